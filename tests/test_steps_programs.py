"""Steps on real programs, each with a known bottleneck (`tests/steps/`): `tfplace trace --timing` leads with
the steps line and the advice that holds, each rule fires on its program at its line and on no other, and on
profiles XProf reads (the `xprof` package, TensorFlow's profiler UI) its step count, input share and median
step time agree with XProf's."""

import glob
import json
import os
import re
import statistics
import subprocess
import sys

import pytest

from conftest import ROOT, line_of, result_of, run_python

pytestmark = pytest.mark.slow
PROGRAMS = ROOT / "tests" / "steps"


def _trace(tmp_path, program, *options):
    out = tmp_path / f"{program}.json"
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "--timing", "--logical_cpus=2", f"--json={out}",
                           *options, f"{program}.py"], cwd=PROGRAMS, capture_output=True, text=True,
                          timeout=300, env={k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, json.loads(out.read_text())


def _line(program, marker):
    text = (PROGRAMS / f"{program}.py").read_text().splitlines()
    return f"{program}.py:{next(i for i, line in enumerate(text, 1) if marker in line)}"


def test_an_input_bound_fit_leads_with_its_steps_and_the_map_to_change_and_its_twin_is_quiet(tmp_path):
    report, data = _trace(tmp_path, "input_slow")
    lines = report.splitlines()
    assert lines[1].startswith("steps: 15 x ") and "(keras-fit at " in lines[1], report[:2000]
    steps, advice = data["steps"], data["advice"]
    assert (steps["kind"], steps["count"] + steps["warmup"]) == ("keras-fit", 16)  # 2 epochs of 8 batches
    assert steps["shares"]["input"] >= 0.8
    assert steps["input"]["dataset_op"] == "Map" and steps["input"]["source"] == _line("input_slow", "the slow stage")
    assert advice[0]["rule"] == "input-bound" and advice[0]["source"] == _line("input_slow", "the slow stage")
    # 4 ms of Python per element, 32 per batch, on a machine of a few cores: no num_parallel_calls keeps up
    assert "advice (most costly first):" in report
    assert "fix: ds = ds.cache().prefetch(tf.data.AUTOTUNE)  # right after" in report
    for step in steps["steps"]:
        assert sum(step["phases"].values()) == pytest.approx(step["wall_us"], rel=0.02)
    _, twin = _trace(tmp_path, "input_fixed")
    if twin["steps"]["shares"]["input"] > 0.2:  # the suite's other processes on 2 cores: a second run decides
        _, twin = _trace(tmp_path, "input_fixed")
    assert twin["steps"]["shares"]["input"] <= 0.2 and twin["steps"]["count"] + twin["steps"]["warmup"] == 16
    assert "input-bound" not in [a["rule"] for a in twin["advice"]]
    done = subprocess.run([sys.executable, "-m", "tfplace", "diff", str(tmp_path / "input_slow.json"),
                           str(tmp_path / "input_fixed.json")], capture_output=True, text=True, timeout=120)
    compared = next(line for line in done.stdout.splitlines() if line.startswith("steps (A -> B): "))
    assert " per second (by the median step); input " in compared, done.stdout


def test_the_input_bound_fix_pasted_after_its_stage_takes_the_input_share_below_the_rule(tmp_path):
    # the fix as printed, pasted on the line after the stage it names: the program exits as before, and its
    # typical step no longer waits for input
    _, data = _trace(tmp_path, "input_slow")
    fix = data["advice"][0]["fix"]
    line = int(data["advice"][0]["source"].rpartition(":")[2])
    text = (PROGRAMS / "input_slow.py").read_text().splitlines()
    fixed = tmp_path / "input_slow_fixed.py"
    fixed.write_text("\n".join(text[:line] + [fix] + text[line:]) + "\n")
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "--timing", f"--json={tmp_path / 'fixed.json'}",
                           str(fixed)], cwd=PROGRAMS, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")})
    assert done.returncode == 0, done.stderr[-3000:]
    from tfplace.placement.steps._thresholds import INPUT_BOUND, INPUT_US

    after = json.loads((tmp_path / "fixed.json").read_text())
    steps = after["steps"]
    waited = steps["shares"]["input"] * steps["median_us"]  # the rule's threshold: a share and a wait per step
    assert waited < data["steps"]["shares"]["input"] * data["steps"]["median_us"] / 10, steps
    # on a quiet machine the typical step no longer crosses the rule's threshold; on one that other processes
    # load, what is left of the wait is no longer the stage the fix named
    assert steps["shares"]["input"] < INPUT_BOUND or waited < INPUT_US or \
        (steps["input"]["dataset_op"], steps["input"]["source"]) != ("Map", f"{fixed.name}:{line}"), steps


CORPUS = sorted((PROGRAMS / "corpus").glob("*.py"))


@pytest.mark.parametrize("program", CORPUS, ids=[p.stem for p in CORPUS])
def test_a_program_of_the_corpus_has_the_steps_and_the_advice_its_reader_expects(tmp_path, program):
    """Programs written from TensorFlow's and Keras' guides and tutorials (`tests/steps/corpus/`), each saying in
    its docstring what a reader expects: `expect: kind=... steps=N advice=rule,rule maybe=rule` (steps counts
    every step run, warm-up too; `maybe`: a rule true of the program near its threshold, which a loaded machine
    may or may not cross; the loop's line is marked `# the loop`), `needs: module` where it needs a library."""
    text = program.read_text()
    expected = dict(item.split("=", 1) for item in re.search(r"^expect: (.*)$", text, re.M)[1].split())
    for needed in re.findall(r"^needs: (\S+)$", text, re.M):
        pytest.importorskip(needed)
    out = tmp_path / "trace.json"
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "--timing", "--logical_cpus=2", f"--json={out}",
                           program.name], cwd=program.parent, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")})
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    steps, advice = data["steps"], data["advice"]
    assert (steps["kind"], steps["count"] + steps["warmup"]) == (expected["kind"], int(expected["steps"])), \
        done.stdout[:1500]
    if steps["count"]:
        loop = next(i for i, line in enumerate(text.splitlines(), 1) if line.rstrip().endswith("# the loop"))
        assert steps["source"] == f"{program.name}:{loop}"
    maybe = set(filter(None, expected.get("maybe", "").split(",")))  # near their threshold on a loaded machine
    assert sorted(a["rule"] for a in advice if a["rule"] not in maybe) == \
        sorted(filter(None, expected["advice"].split(","))), done.stdout[:1500]
    for item in advice:
        compile(item["fix"], "<fix>", "exec")  # every fix printed is code (or a comment) that can be pasted


def test_the_retracing_fix_pasted_over_its_line_ends_the_retracing(tmp_path):
    # the fix is the call line itself with the Python number made a tensor: pasted in its place, the program
    # runs as before and its step function traces once
    _, data = _trace(tmp_path, "retrace")
    advice = next(a for a in data["advice"] if a["rule"] == "retracing")
    line = int(advice["source"].rpartition(":")[2])
    text = (PROGRAMS / "retrace.py").read_text().splitlines()
    indent = text[line - 1][:len(text[line - 1]) - len(text[line - 1].lstrip())]
    fixed = tmp_path / "retrace_fixed.py"
    fixed.write_text("\n".join(text[:line - 1] + [indent + advice["fix"]] + text[line:]) + "\n")
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "--timing", f"--json={tmp_path / 'fixed.json'}",
                           str(fixed)], cwd=PROGRAMS, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")})
    assert done.returncode == 0, done.stderr[-3000:]
    after = json.loads((tmp_path / "fixed.json").read_text())
    assert [a["rule"] for a in after["advice"] if a["rule"] in ("retracing", "compile-every-step")] == []
    assert after["steps"]["count"] + after["steps"]["warmup"] == 24 and after["steps"]["shares"]["compile"] < 0.01


def _xprof(directory):
    from xprof.convert import raw_to_tool_data

    paths = glob.glob(f"{directory}/**/*.xplane.pb", recursive=True)
    assert paths, f"no profile kept in {directory}"
    overview = json.loads(raw_to_tool_data.xspace_to_tool_data(paths, "overview_page", {})[0])
    table = next(part for part in overview if part.get("p", {}).get("steptime_ms_average"))
    rows = [row["c"] for row in table["rows"]]  # one per step: ..., input ms at 6, ..., step ms last
    return len(rows), sum(r[6]["v"] for r in rows) / sum(r[-1]["v"] for r in rows), \
        statistics.median(r[-1]["v"] for r in rows) * 1000


@pytest.mark.parametrize("program", ["tf_keras_fit", "marked"])
def test_steps_agree_with_xprof_on_the_kept_profile(tmp_path, program):
    pytest.importorskip("xprof", reason="XProf is the reference: pip install xprof (.ci/run installs it)")
    pytest.importorskip("tf_keras", reason="tf_keras fit: pip install --no-deps tf-keras (.ci/run installs it)")
    _, data = _trace(tmp_path, program, f"--profile_dir={tmp_path / 'profile'}")
    steps = data["steps"]
    count, input_share, median_us = _xprof(tmp_path / "profile")
    # Like with like: XProf leaves out the profile's first and last steps; tfplace counts every step, the
    # first (which traced) as warm-up.
    assert count == steps["count"] + steps["warmup"] - 2
    assert abs(steps["shares"]["input"] - input_share) <= 0.05
    assert steps["median_us"] == pytest.approx(median_us, rel=0.10)
    assert steps["kind"] == ("keras-fit" if program == "tf_keras_fit" else "marked")


RULES = """
import runpy, sys, tfplace
tfplace.configure(logical_cpus=2)
found = {}
for program in sys.argv[1:]:
    sys.argv = [program]
    with tfplace.capture_placement(sources=True, all_threads=True, timing=True) as log:
        runpy.run_path(program, run_name="__main__")
    steps = log.steps()
    found[program.rpartition("/")[2][:-3]] = {"kind": steps.kind, "count": steps.count, "reason": steps.reason,
                                              "advice": sorted({(a.rule, a.source.rpartition("/")[2])
                                                                for a in log.advice()}),
                                              "changed": [a.evidence.get("changed") for a in log.advice()
                                                          if a.rule == "retracing"],
                                              "fixes": [a.fix for a in log.advice()]}
report(found)
"""


def test_each_rule_fires_on_its_program_at_its_line_and_on_no_other():
    names = ["retrace", "eager_loop", "copies", "skew", "host_sync", "host_bound", "input_fixed", "marked", "once",
             "eager_sleep"]
    found = result_of(run_python(RULES, args=tuple(str(PROGRAMS / f"{n}.py") for n in names), timeout=600))
    assert found["retrace"]["advice"] == [["retracing", _line("retrace", "loss = step(")]]
    assert found["retrace"]["changed"] == [[["scale", "0.0", "1e-06"]]]  # the argument that made it trace again
    assert found["eager_loop"]["kind"] == "eager-loop" and found["eager_loop"]["count"] == 59
    assert found["eager_loop"]["advice"] == [["eager-loop", _line("eager_loop", "for i in range(60)")]]
    # a loop whose Python is a sleep: wrapping its ops in a tf.function removes nothing of it
    assert found["eager_sleep"]["advice"] == [["host-bound", _line("eager_sleep", "for i in range(20)")]]
    assert found["copies"]["advice"] == [["copies-per-step", _line("copies", "tf.matmul(x, w)")]]
    assert found["skew"]["advice"] == [["replica-skew", _line("skew", "y = tf.matmul(y, w)")]]
    assert found["host_sync"]["advice"] == [["host-sync", _line("host_sync", "losses.append(float(loss))")]]
    assert found["host_bound"]["advice"] == [["host-bound", _line("host_bound", "loss = step(x)")]]
    assert found["input_fixed"]["advice"] == found["marked"]["advice"] == found["once"]["advice"] == []
    assert found["once"]["count"] == 0 and found["once"]["reason"].startswith("no step found")
    for name, seen in found.items():  # every fix is Python to paste (code, or what to do as a comment)
        for fix in seen["fixes"]:
            compile(fix, f"<{name}'s fix>", "exec")


def test_with_another_profiler_session_steps_carry_no_times_and_say_why(python):
    out = python("""
        import warnings
        import tensorflow as tf, tfplace
        step = tf.function(lambda x: x * 2.0)
        tf.profiler.experimental.start("/tmp/tfplace-users-own-profile")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with tfplace.capture_placement(timing=True) as log:
                for _ in range(4):
                    step(tf.ones(2))
        tf.profiler.experimental.stop()
        steps = log.steps()
        report({"warnings": len(caught), "count": steps.count, "median": steps.median_us, "reason": steps.reason,
                "advice": len(log.advice()), "records": len(log.records)})
    """)
    assert out["warnings"] == 1 and out["count"] == 3 and out["median"] is None and out["advice"] == 0
    assert out["reason"].startswith("times: another TensorFlow profiler session was active") and out["records"] > 0


def test_reads_the_users_lines_make_are_marked_and_those_of_tensorflow_are_not(python):
    out = python("""
        import os
        import tensorflow as tf, tfplace
        step = tf.function(lambda x: x * 2.0)
        with open(os.devnull, "w") as null, tfplace.capture_placement(sources=True, timing=True) as log:
            for _ in range(5):
                y = step(tf.ones(2))
                tf.get_static_value(y)  # TensorFlow reads the value
                print(y, file=null)  # the user: __str__
                z = float(tf.reduce_sum(y))  # the user: __float__
        steps = log.steps()
        report({"kind": steps.kind, "reads": [n for n, _ in steps.reads.values()], "sync": steps.shares["sync"]})
    """)
    assert out["kind"] == "function" and out["reads"] == [3, 3] and out["sync"] > 0  # the last step ends with its call


def test_a_print_of_a_strategys_per_replica_result_each_step_is_the_users_read(python):
    # printing a PerReplica reads every replica's tensor through the distribute package's own helpers
    code = """
        import os
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)
        strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
        step = tf.function(lambda: strategy.run(lambda: tf.ones(2) * 2.0))
        with open(os.devnull, "w") as null, tfplace.capture_placement(sources=True, timing=True) as log:
            for _ in range(6):
                result = step()
                print(result, file=null)  # the user's read
        report({"kind": log.steps().kind, "reads": {line: n for line, (n, _) in log.steps().reads.items()}})
    """
    out = python(code)
    # the last step ends with its call
    assert out["kind"] == "function" and out["reads"] == {line_of(code, "print(result"): 4}


QUIET = """
import os, runpy, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import tfplace
program = sys.argv[1]
sys.argv = [program]
sys.path.insert(0, os.path.dirname(program))
with open(program, encoding="utf-8") as f:
    warm = "__warmup__" in f.read()
carried = runpy.run_path(program, run_name="__warmup__") if warm else None
with tfplace.capture_placement(sources=True, timing=True) as log:
    runpy.run_path(program, init_globals=carried, run_name="__main__")
report([[a.rule, a.source, a.message] for a in log.advice()])
"""
CONFORMANCE = sorted((ROOT / "tests" / "conformance" / "programs").glob("*.py"))


@pytest.mark.parametrize("program", CONFORMANCE, ids=[p.stem for p in CONFORMANCE])
def test_no_rule_fires_on_a_program_of_the_conformance_suite(program):
    """The conformance suite's programs (TensorFlow's and Keras' tutorials in small) are healthy as written:
    timed, with sources, on two logical CPUs as the suite runs them, no advice holds."""
    found = result_of(run_python(QUIET, args=(str(program),), timeout=300))
    if found and {rule for rule, _, _ in found} == {"input-bound"}:  # the other tests' processes on 2 cores can slow
        found = result_of(run_python(QUIET, args=(str(program),), timeout=300))  # Keras' array pipeline: run again
    assert found == []
