"""Each rule's fix pasted as printed: `tfplace trace --timing` runs a program with a known bottleneck, the fix of
the rule that fires is pasted where it names (in place of its line, or before the loop it names), and the
program, traced again, exits as before and no longer crosses the rule's threshold (`_rules.py`'s constants).
(`copies-per-step` has none: its fix, `with tf.device(...): ...`, leaves to the user the line that makes the input.)"""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from tfplace.placement.steps._thresholds import HOST_BOUND, HOST_US, LAUNCH_US, RETRACED

pytestmark = pytest.mark.slow
PROGRAMS = ROOT / "tests" / "steps"


def _trace(tmp_path, program, name):
    """`tfplace trace --timing --json` of `program` (run where it lies): its exit status and the JSON."""
    out = tmp_path / f"{name}.json"
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "--timing", "--logical_cpus=2", f"--json={out}",
                           str(program)], cwd=program.parent, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")})
    assert out.exists(), done.stderr[-3000:]
    return done.returncode, json.loads(out.read_text())


def _fired(data, rule):
    """The advice of `rule`, which holds with a fix on a line of the program."""
    found = [a for a in data["advice"] if a["rule"] == rule]
    assert found and all(a["fix"] and a["source"] for a in found), data["advice"]
    return found


def _number(advice):
    return int(advice["source"].rpartition(":")[2])


def _pasted(tmp_path, program, number, fix, *, replace):
    """`program` with `fix` pasted at its line `number`: in that line's place (at its indentation), or before it."""
    text = program.read_text().splitlines()
    line = text[number - 1]
    indent = line[:len(line) - len(line.lstrip())]
    fixed = tmp_path / f"{program.stem}_fixed.py"
    fixed.write_text("\n".join(text[:number - 1] + [indent + fix] + text[number - (not replace):]) + "\n")
    return fixed


def _traced_again(tmp_path, fixed, status):
    """The program with its fix pasted, traced: it exits as the program did (0); its JSON."""
    status_after, after = _trace(tmp_path, fixed, "after")
    assert status_after == status == 0
    return after


def test_the_host_sync_fix_pasted_over_its_read_reads_no_longer_every_step(tmp_path):
    program = PROGRAMS / "host_sync.py"
    status, data = _trace(tmp_path, program, "before")
    advice, = _fired(data, "host-sync")
    assert advice["fix"].startswith("if i % 100 == 0: losses.append(float(loss))"), advice["fix"]
    after = _traced_again(tmp_path, _pasted(tmp_path, program, _number(advice), advice["fix"], replace=True), status)
    steps = after["steps"]
    assert steps["count"] + steps["warmup"] == 20 and "host-sync" not in [a["rule"] for a in after["advice"]]
    # the rule's threshold: a read in (nearly) every steady step; the read now runs once in 100 steps
    assert all(count < max(2, steps["count"] - 1) for count, _ in steps["reads"].values()), steps["reads"]


def test_the_eager_loop_fix_pasted_before_the_loop_makes_its_body_one_call(tmp_path):
    # the fix is `body = tf.function(body)`, for a loop whose body is a function: here, the program's `body`,
    # pasted before the loop that calls it (the line the advice names is the body's first op, inside it)
    program = PROGRAMS / "paste" / "eager_body.py"
    status, data = _trace(tmp_path, program, "before")
    advice, = _fired(data, "eager-loop")
    assert advice["fix"].startswith("body = tf.function(body)  #") and data["steps"]["kind"] == "eager-loop"
    loop = next(i for i, line in enumerate(program.read_text().splitlines(), 1) if line.startswith("for "))
    after = _traced_again(tmp_path, _pasted(tmp_path, program, loop, advice["fix"], replace=False), status)
    steps = after["steps"]
    assert (steps["kind"], steps["count"] + steps["warmup"]) == ("function", 60), steps
    assert [a["rule"] for a in after["advice"] if a["rule"] in ("eager-loop", "host-bound")] == []
    # the rule's threshold: Python and launches per iteration over LAUNCH_US per op; one call of a function now
    assert (steps["shares"]["host"] + steps["shares"]["idle"]) * steps["median_us"] <= 4 * LAUNCH_US, steps


def test_the_host_bound_fix_is_a_comment_and_done_as_it_says_takes_host_time_below_the_rule(tmp_path):
    # the fix names no line to change (the step's call line, where the time goes between calls): it says what
    # to do. Done as it says on the program's one line of per-step Python: run it every N steps.
    program = PROGRAMS / "host_bound.py"
    status, data = _trace(tmp_path, program, "before")
    advice, = _fired(data, "host-bound")
    assert advice["fix"].startswith("# keep per-step Python") and "every N steps" in advice["fix"], advice["fix"]
    number = next(i for i, line in enumerate(program.read_text().splitlines(), 1) if line == "    bookkeeping(i)")
    fixed = _pasted(tmp_path, program, number, "if i % 100 == 0: bookkeeping(i)", replace=True)
    after = _traced_again(tmp_path, fixed, status)
    steps = after["steps"]
    assert steps["count"] + steps["warmup"] == 16 and "host-bound" not in [a["rule"] for a in after["advice"]]
    assert steps["shares"]["host"] < HOST_BOUND or steps["shares"]["host"] * steps["median_us"] < HOST_US, steps


def test_the_compile_every_step_fix_pasted_over_its_call_traces_once(tmp_path):
    program = PROGRAMS / "paste" / "every_step.py"
    status, data = _trace(tmp_path, program, "before")
    advice, = _fired(data, "compile-every-step")
    assert advice["fix"].startswith("loss = step(x, tf.constant(1e-6 * i, tf.float32))"), advice["fix"]
    after = _traced_again(tmp_path, _pasted(tmp_path, program, _number(advice), advice["fix"], replace=True), status)
    steps = after["steps"]
    assert [a["rule"] for a in after["advice"] if a["rule"] in ("retracing", "compile-every-step")] == []
    # the rule's threshold: RETRACED steady steps that compile; none do now
    assert steps["count"] + steps["warmup"] == 12 and steps["shares"]["compile"] < 0.01 and RETRACED > 0, steps
