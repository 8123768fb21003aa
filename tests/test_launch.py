"""`tfplace launch`: tasks, their TF_CONFIG and prefixed lines, exit statuses, stopping, usage errors, --trace.

Most tasks here are small Python scripts without TensorFlow; one test runs a real
ParameterServerStrategy cluster (a coordinator, a worker and a ps task)."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # slow tier: clusters: several TensorFlow processes per case


TFPLACE = [sys.executable, "-m", "tfplace"]


def launch(*args: str, cwd: Path, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*TFPLACE, "launch", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, **(env or {})})


def script(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def alive(pid: int) -> bool:
    """Whether `pid` is a running (not zombie) process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def started_pids(text: str) -> dict[str, int]:
    """The tasks and pids of the launcher's "started ..." line."""
    line = next(line for line in text.splitlines() if line.startswith("tfplace launch: started "))
    found = re.findall(r"(chief|worker \d+|ps \d+) \(pid (\d+), 127\.0\.0\.1:\d+\)", line)
    return {task: int(pid) for task, pid in found}


SHOW_TASK = """
import json, os, sys
config = json.loads(os.environ["TF_CONFIG"])
print(json.dumps({"config": config, "argv": sys.argv[1:],
                  "settings": {k: v for k, v in os.environ.items() if k.startswith("TFPLACE_")}}))
print("to stderr", config["task"]["type"], file=sys.stderr)
sys.stdout.write("no newline at the end")
"""


def test_each_task_gets_its_tf_config_and_its_lines_come_prefixed_on_their_own_stream(tmp_path):
    path = script(tmp_path, "show.py", SHOW_TASK)
    done = launch("--workers=2", "--chief", "--logical_cpus=2", "--nosoft_placement", path, "one", "--", "--two",
                  cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    seen = {}
    for line in done.stdout.splitlines():
        found = re.fullmatch(r"\[(chief|worker \d)\] (\{.*\})", line)
        if found:
            seen[found[1]] = json.loads(found[2])
    assert set(seen) == {"chief", "worker 0", "worker 1"}
    cluster = seen["chief"]["config"]["cluster"]
    assert set(cluster) == {"chief", "worker"} and len(cluster["chief"]) == 1 and len(cluster["worker"]) == 2
    addresses = cluster["chief"] + cluster["worker"]
    assert len(set(addresses)) == 3 and all(re.fullmatch(r"127\.0\.0\.1:\d+", a) for a in addresses)
    assert seen["chief"]["config"]["task"] == {"type": "chief", "index": 0}
    assert seen["worker 1"]["config"] == {"cluster": cluster, "task": {"type": "worker", "index": 1}}
    assert all(task["argv"] == ["one", "--two"] for task in seen.values())
    assert seen["worker 0"]["settings"] == {"TFPLACE_LOGICAL_CPUS": "2", "TFPLACE_SOFT_PLACEMENT": "false"}
    for task in ("chief", "worker 0", "worker 1"):
        assert f"[{task}] no newline at the end" in done.stdout.splitlines()
    assert "[chief] to stderr chief" in done.stderr.splitlines()
    assert "[worker 1] to stderr worker" in done.stderr.splitlines()
    assert "to stderr" not in done.stdout
    assert set(started_pids(done.stderr)) == {"chief", "worker 0", "worker 1"}


def test_with_ps_tasks_the_chief_alone_runs_the_script_and_the_others_serve(tmp_path):
    path = script(tmp_path, "show.py", SHOW_TASK)
    start = time.monotonic()
    done = launch("--ps=2", "--workers=1", path, cwd=tmp_path)  # the servers are stopped once the chief is done
    assert done.returncode == 0, done.stderr
    configs = [json.loads(line.split("] ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("[chief] {")]
    assert len(configs) == 1 and not re.search(r"^\[(worker|ps) \d\] \{", done.stdout, re.M)
    config = configs[0]["config"]
    assert set(config["cluster"]) == {"chief", "worker", "ps"} and len(config["cluster"]["ps"]) == 2
    assert config["task"] == {"type": "chief", "index": 0}
    assert set(started_pids(done.stderr)) == {"chief", "worker 0", "ps 0", "ps 1"}
    assert time.monotonic() - start < 30


FAILS = """
import json, os, sys, time
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
if index == 1:
    print("worker 1 gives up", flush=True)
    sys.exit(3)
time.sleep(120)
"""


def test_the_first_failing_task_names_itself_and_gives_its_status(tmp_path):
    start = time.monotonic()
    done = launch("--workers=3", script(tmp_path, "fails.py", FAILS), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert "[worker 1] worker 1 gives up" in done.stdout.splitlines()
    assert "tfplace launch: worker 1 exited with status 3; stopping the other tasks" in done.stderr.splitlines()
    assert not [pid for pid in started_pids(done.stderr).values() if alive(pid)]
    assert time.monotonic() - start < 20


CRASHES_AT_PROFILER_STOP = """
import json, os, signal, time
import tensorflow as tf
from tfplace import _tensorflow
if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0:  # as TensorFlow 2.21's can crash
    _tensorflow.profiler_stop = lambda: os.kill(os.getpid(), signal.SIGSEGV)
else:
    time.sleep(3)  # still running when worker 0 dies
print("sum", float(tf.reduce_sum(tf.ones(3))))
"""


def test_a_task_whose_process_dies_after_its_script_ended_is_named_with_what_to_do(tmp_path):
    done = launch("--workers=1", "--trace", "--timing", "--json=cluster.json",
                  script(tmp_path, "crash.py", CRASHES_AT_PROFILER_STOP), cwd=tmp_path, timeout=120)
    assert done.returncode == 139, done.stderr
    assert "[worker 0] sum 3.0" in done.stdout.splitlines()
    lines = done.stdout[done.stdout.index("what is uneven or costly"):].splitlines()
    assert lines[1] == ("  worker:0: no trace: its script ended (status 0), then the process was killed by signal 11 "
                        "as it closed its trace (with --timing, TensorFlow's profiler can crash as it stops: "
                        "run again, or leave out --timing); its figures below are what its peers saw")
    tasks = json.loads((tmp_path / "cluster.json").read_text())["tasks"]
    assert [(t["task"], t["trace"], t["script_exit_status"]) for t in tasks if t["task"] == "worker:0"] == \
        [("worker:0", None, 0)]


def test_a_task_dying_as_it_closes_its_trace_leaves_the_others_to_end_with_their_traces(tmp_path):
    done = launch("--workers=2", "--trace", "--timing", "--json=cluster.json",
                  script(tmp_path, "crash.py", CRASHES_AT_PROFILER_STOP), cwd=tmp_path, timeout=120)
    assert done.returncode == 139, done.stderr
    assert ("tfplace launch: worker 0 was killed by SIGSEGV (status 139) as it closed its trace, after its script "
            "ended (status 0); the other tasks go on") in done.stderr.splitlines()
    assert "[worker 1] sum 3.0" in done.stdout.splitlines()
    tasks = {t["task"]: t for t in json.loads((tmp_path / "cluster.json").read_text())["tasks"]}
    assert (tasks["worker:0"]["trace"], tasks["worker:1"]["exit_status"]) == (None, 0)
    assert tasks["worker:1"]["trace"]["cost"]["timed"]
    findings = done.stdout[done.stdout.index("what is uneven or costly"):].split("where the time")[0]
    assert "worker:0: no trace: its script ended (status 0)" in findings and "worker:1" not in findings


def test_a_server_that_ends_before_the_script_is_a_failure(tmp_path):
    sleeper = script(tmp_path, "sleeps.py", "import time\ntime.sleep(120)\n")
    # the servers read the tfplace settings from the environment; this one cannot be read, so they end at once
    done = launch("--ps=1", "--workers=1", sleeper, cwd=tmp_path, env={"TFPLACE_LOGICAL_CPUS": "none"})
    assert done.returncode == 2, done.stderr
    assert re.search(r"^tfplace launch: (worker 0|ps 0) exited with status 2, but a server runs until the script's "
                     r"tasks end; stopping the other tasks$", done.stderr, re.M), done.stderr
    assert "TFPLACE_LOGICAL_CPUS='none' (from environment variable TFPLACE_LOGICAL_CPUS)" in done.stderr


def test_timeout_stops_every_task_with_124(tmp_path):
    start = time.monotonic()
    done = launch("--workers=2", "--timeout=1", script(tmp_path, "sleeps.py", "import time\ntime.sleep(120)\n"),
                  cwd=tmp_path)
    assert done.returncode == 124, done.stderr
    assert "tfplace launch: tasks still running after --timeout=1 s; stopping every task" in done.stderr
    assert time.monotonic() - start < 20  # three interpreters start on a loaded machine
    assert not [pid for pid in started_pids(done.stderr).values() if alive(pid)]


IGNORES_SIGTERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as TensorFlow's coordination service does
print("ready", flush=True)
time.sleep(300)
"""

CATCHES_SIGINT = """
import time
print("ready", flush=True)
try:
    time.sleep(300)
except KeyboardInterrupt:
    print("interrupted once", flush=True)
    time.sleep(0.5)  # a second SIGINT would show as a traceback here
"""


class Launcher:
    """`tfplace launch` in the background, its lines (stdout and stderr) read as they come."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.process = subprocess.Popen([*TFPLACE, "launch", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, cwd=cwd)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.process.stdout), daemon=True)
        self.reader.start()

    def wait_until_ready(self, count: int) -> dict[str, int]:
        """The tasks' pids, once `count` tasks printed "ready"."""
        deadline = time.monotonic() + 30
        while sum(line.endswith("] ready\n") for line in self.lines) < count:
            assert time.monotonic() < deadline and self.process.poll() is None, "".join(self.lines)
            time.sleep(0.05)
        return started_pids("".join(self.lines))

    def finish(self, timeout: float = 30) -> str:
        """Its exit, then all it printed."""
        self.process.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return "".join(self.lines)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_stops_the_tasks_and_sigkills_those_that_ignore_sigterm_after_kill_after(tmp_path, signum):
    launcher = Launcher(["--workers=2", "--kill_after=1", script(tmp_path, "ignores_sigterm.py", IGNORES_SIGTERM)],
                        tmp_path)
    pids = launcher.wait_until_ready(2)
    try:
        start = time.monotonic()
        launcher.process.send_signal(signum)
        out = launcher.finish()
        took = time.monotonic() - start
    finally:
        launcher.process.kill()
        for pid in pids.values():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert launcher.process.returncode == 128 + signum, out
    assert (f"tfplace launch: received {signum.name}; stopping every task (SIGTERM, then SIGKILL after "
            "--kill_after=1 s)") in out
    assert (f"tfplace launch: SIGKILL for worker 0 (pid {pids['worker 0']}), worker 1 (pid {pids['worker 1']}): still "
            "running --kill_after=1 s after SIGTERM") in out
    assert "worker 0 was killed by SIGKILL (status 137)" in out
    assert 1 <= took < 10
    assert not [pid for pid in pids.values() if alive(pid)]


def test_the_tasks_die_with_a_launcher_killed_without_a_chance_to_stop_them(tmp_path):
    launcher = Launcher(["--workers=2", script(tmp_path, "ignores_sigterm.py", IGNORES_SIGTERM)], tmp_path)
    pids = launcher.wait_until_ready(2)
    launcher.process.kill()
    launcher.process.wait(timeout=30)
    deadline = time.monotonic() + 10
    while [pid for pid in pids.values() if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in pids.values() if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left


def test_sigint_reaches_each_task_once_and_gives_130(tmp_path):
    launcher = Launcher(["--workers=2", script(tmp_path, "catches.py", CATCHES_SIGINT)], tmp_path)
    launcher.wait_until_ready(2)
    launcher.process.send_signal(signal.SIGINT)
    out = launcher.finish()
    assert launcher.process.returncode == 130, out
    assert "tfplace launch: received SIGINT; stopping every task (SIGINT, then SIGKILL" in out
    assert out.count("] interrupted once") == 2 and "Traceback" not in out


@pytest.mark.parametrize("args, says", [
    (["--workers=1", "missing.py"], "script 'missing.py' (from argument script) is not a file"),
    (["--workers=0", "ran.py"], "--workers='0' (from option --workers) is not allowed: expected a whole number >= 1"),
    (["--workers=2", "--timeout=soon", "ran.py"],
     "--timeout='soon' (from option --timeout) is not allowed: expected seconds > 0"),
    (["--workers=2", "--json=out.json", "ran.py"],
     "--json (from option --json) needs --trace: allowed is tfplace launch --trace --json=FILE"),
    (["--workers=2", "--timing", "ran.py"], "--timing (from option --timing) needs --trace"),
    (["--workers=2", "--trace", "--json=nowhere/out.json", "ran.py"],
     "--json='nowhere/out.json' (from option --json) cannot be written: its folder 'nowhere' does not exist"),
    (["--workers=2", "ran.py", "--ps=1"], "'--ps=1' comes after the script 'ran.py' (from the command line)"),
    (["ran.py"], "the following arguments are required: --workers"),
    (["--workers=1", "--memory_growth", "--logical_gpus=2", "ran.py"],
     "memory_growth=True (from option --memory_growth) and logical_gpus=2 (from option --logical_gpus) cannot be "
     "combined"),
], ids=["no-script", "no-workers", "bad-timeout", "json-without-trace", "timing-without-trace", "json-folder",
        "option-after-script", "workers-missing", "settings-conflict"])
def test_usage_errors_exit_2_before_any_task_starts(tmp_path, args, says):
    (tmp_path / "ran.py").write_text("open('ran', 'w').close()\n")
    done = launch(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "tfplace launch: error: " in done.stderr
    assert "started" not in done.stderr and not (tmp_path / "ran").exists()


def test_help_answers_without_importing_tensorflow(tmp_path):
    done = subprocess.run([*TFPLACE, "launch", "--help"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in done.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert done.returncode == 0 and "tfplace" in imported and "tensorflow" not in imported
    assert done.stdout.startswith("usage: tfplace launch --workers=N [--ps=M] [--chief] [--trace]")
    assert "implies --chief" in done.stdout and "--logical_cpus" in done.stdout


FAKE_CHECKS = """
import json, sys
from tfplace.cluster import _checks
calls = []

def watch(directory, statuses, jobs=None):
    calls.append(statuses)
    with open(sys.argv[1], "w") as out:
        json.dump({"directory": directory, "statuses": statuses, "jobs": jobs}, out)
    return "tfplace: worker:0 and worker:1 differ (a test's mismatch)" if len(calls) >= 2 else None

_checks.watch = watch
from tfplace.cli._cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_under_trace_a_mismatch_of_the_checks_stops_the_cluster_with_3(tmp_path):
    wrapper = script(tmp_path, "checked_launch.py", FAKE_CHECKS)
    sleeper = script(tmp_path, "sleeps.py", "import os, time\nprint(os.environ['TFPLACE_CLUSTER_DIR'])\n"
                                            "time.sleep(120)\n")
    start = time.monotonic()
    done = subprocess.run([sys.executable, wrapper, str(tmp_path / "seen.json"), "launch", "--workers=2", "--trace",
                           "--kill_after=2", sleeper], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert "tfplace launch: worker:0 and worker:1 differ (a test's mismatch)" in done.stderr.splitlines()
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["statuses"] == {"worker:0": None, "worker:1": None} and seen["jobs"] == {"worker": 2}
    assert f"; traces in {seen['directory']}" in done.stderr
    assert time.monotonic() - start < 30


PSS_LOOP = str(Path(__file__).parent / "cluster" / "pss_loop.py")
W, PS = "/job:worker/replica:0/task:{}/device:CPU:0", "/job:ps/replica:0/task:{}/device:CPU:0"


@pytest.mark.placement
def test_a_parameter_server_cluster_traced_has_its_variables_steps_and_reads_where_tensorflow_put_them(tmp_path):
    """The PSS tutorial's custom loop with 2 workers and 2 ps tasks: every task's trace merged into one."""
    start = time.monotonic()
    done = launch("--ps=2", "--workers=2", "--trace", "--json=cluster.json", "--perfetto=cluster.json.gz", PSS_LOOP,
                  cwd=tmp_path, timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"kernel on {PS.format(0)}; bias on {PS.format(1)}" in done.stdout
    assert not re.search(r"placer\.cc|SessionOptions|^\[\w+ ?\d?\] \S+: \(\w+\): /job:", done.stdout + done.stderr,
                         re.M)
    folder = Path(re.search(r"; traces in (\S+)", done.stderr)[1])
    assert not folder.exists()  # merged: the tasks' own files are gone
    merged = json.loads((tmp_path / "cluster.json").read_text())
    assert [(v["name"], v["device"], v["bytes"]) for v in merged["variables"]] == [
        ("kernel:0", PS.format(0), 32), ("bias:0", PS.format(1), 8)]
    assert merged["ps_bytes"] == {"/job:ps/replica:0/task:0": 32, "/job:ps/replica:0/task:1": 8}
    assert merged["ps_imbalance"] == pytest.approx(1.6)
    traces = {task["task"]: task["trace"] for task in merged["tasks"]}
    assert list(traces) == ["chief", "worker:0", "worker:1", "ps:0", "ps:1"]
    matmuls = {r["device"] for name in ("worker:0", "worker:1") for r in traces[name]["records"] if r["op"] == "MatMul"}
    assert matmuls and matmuls <= {W.format(0), W.format(1)}  # each worker's own log: its server placed the step
    reads = [r for r in merged["traffic"] if r["kind"] == "remote" and "ReadVariableOp kernel:0" in r["what"]]
    assert {(r["from_task"], r["per_step"], r["bytes"]) for r in reads} <= {("ps:0", True, 32)}
    assert {r["to_task"] for r in reads} <= {"worker:0", "worker:1"} and sum(r["steps"] for r in reads) == 4
    writes = [r for r in merged["traffic"] if r["kind"] == "remote" and "AssignSubVariableOp bias:0" in r["what"]]
    assert {(r["to_task"], r["bytes"]) for r in writes} == {("ps:1", 8)}
    timeline = json.loads(gzip.decompress((tmp_path / "cluster.json.gz").read_bytes()))
    processes = {e["args"]["name"] for e in timeline["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert {"chief /job:chief/replica:0/task:0/device:CPU:0", f"chief {PS.format(0)}",
            f"chief {W.format(1)}"} <= processes
    assert any(e["ph"] == "X" and e["name"].startswith("send AssignVariableOp") for e in timeline["traceEvents"])
    reason = traces["chief"]["incomplete_reason"]
    assert "another task's device" in reason and "placed before the block opened" not in reason
    # the coordinator's closures call the step on the workers (under a cancellation manager): each call recorded
    steps = [r for r in traces["chief"]["records"] if r["op"].startswith("__inference_train_step")]
    assert {r["device"] for r in steps} <= {W.format(0), W.format(1)} and sum(r.get("count", 1) for r in steps) == 4
    assert "__inference_train_step" in reason
    # the steps the coordinator scheduled, at the user's schedule line; 32 B per step makes no ps a hotspot
    schedule = next(i for i, text in enumerate(Path(PSS_LOOP).read_text().splitlines(), 1)
                    if "coordinator.schedule(" in text)
    assert merged["steps"]["chief"]["count"] + merged["steps"]["chief"]["warmup"] == 4
    assert merged["steps"]["chief"]["source"] == f"{PSS_LOOP}:{schedule}" and merged["advice"] == []

    # the same traces merged by tfplace merge give the same cluster and the same report
    paths = []
    for name, trace in traces.items():
        paths.append(tmp_path / f"{name.replace(':', '-')}.json")
        paths[-1].write_text(json.dumps(trace))
    again = subprocess.run([*TFPLACE, "merge", "--json=again.json", *map(str, paths)], capture_output=True, text=True,
                           cwd=tmp_path, timeout=60)
    assert again.returncode == 0, again.stderr
    again_merged = json.loads((tmp_path / "again.json").read_text())
    assert [entry.pop("file") for entry in again_merged["tasks"]] == list(map(str, paths))
    assert again_merged == merged
    report = done.stdout[done.stdout.index("== tfplace merge:"):]
    assert again.stdout.startswith(report.rstrip("\n"))
    assert time.monotonic() - start < 120


@pytest.mark.placement
def test_a_ps_task_serving_most_bytes_per_step_is_a_hotspot_and_the_coordinator_waits_for_its_workers(tmp_path):
    done = launch("--ps=2", "--workers=2", "--trace", "--timing", "--json=cluster.json", PSS_LOOP, "--steps=8",
                  "--units=65536", cwd=tmp_path, timeout=200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    merged = json.loads((tmp_path / "cluster.json").read_text())
    kernel = next(i for i, text in enumerate(Path(PSS_LOOP).read_text().splitlines(), 1)
                  if "kernel = tf.Variable(" in text)
    assert [(a["rule"], a["task"], a["source"]) for a in merged["advice"]] == [
        ("ps-hotspot", "ps:0", f"{PSS_LOOP}:{kernel}")]
    hot = merged["advice"][0]["evidence"]
    assert hot["bytes_per_step"] == 2 * 2 * 4 * 65536 * 4  # two workers each read and write the 1 MiB kernel
    chief = merged["steps"]["chief"]
    assert chief["count"] + chief["warmup"] == 8 and chief["shares"]["sync"] > 0.5  # waiting on the workers
    assert "[medium] ps-hotspot on ps:0 at " in done.stdout  # (4 - 2.5) MiB of 5 MiB per step: 30 %
