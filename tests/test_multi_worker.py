"""examples/multi_worker.py: two real worker processes on 127.0.0.1 (`--launch_local`, which is `tfplace launch`;
tests/test_launch.py tests the launcher itself), its failure and signal paths, and the worker's checks of TF_CONFIG
and of its peers."""

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow  # slow tier: clusters: several TensorFlow processes per case

SCRIPT = str(ROOT / "examples" / "multi_worker.py")


def test_two_workers_end_with_identical_weights_and_lower_loss(tmp_path):
    done = subprocess.run([sys.executable, SCRIPT, "--launch_local=2", f"--report_dir={tmp_path}", "--epochs=2"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reports = [json.loads((tmp_path / f"worker-{i}.json").read_text()) for i in range(2)]
    assert {r["strategy"] for r in reports} == {"MultiWorkerMirroredStrategy"}
    assert {r["replicas"] for r in reports} == {2}
    assert reports[0]["weights_sha256"] == reports[1]["weights_sha256"]
    assert all(r["loss"][-1] < r["loss"][0] for r in reports)


def test_a_dead_worker_makes_the_launcher_fail_quickly():
    start = time.monotonic()
    done = subprocess.run([sys.executable, SCRIPT, "--launch_local=2", "--simulate_failure=1", "--timeout=300"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 3, done.stderr[-3000:]
    assert "[worker 1] worker 1: simulated failure" in done.stdout.splitlines()
    assert "tfplace launch: worker 1 exited with status 3; stopping the other tasks" in done.stderr.splitlines()
    assert time.monotonic() - start < 60  # worker 0 would otherwise wait for its peer forever




def closed_port() -> int:
    """A port of 127.0.0.1 that nobody listens on (just freed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tf_config(*addresses: str, index: int = 0) -> str:
    return json.dumps({"cluster": {"worker": list(addresses)}, "task": {"type": "worker", "index": index}})


def worker_env(config: str) -> dict:
    return {**os.environ, "TF_CONFIG": config}


def alive(pid: int) -> bool:
    """Whether `pid` is still a running (not zombie) worker of these tests."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z" and b"multi_worker.py" in command


def read_until(proc: subprocess.Popen, pattern: str, timeout: float = 60) -> re.Match:
    """Reads the process's stdout until a line matches `pattern`."""
    deadline, seen = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.5)[0]:
            line = proc.stdout.readline()
            seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found
            if not line:
                break
    proc.kill()
    pytest.fail(f"no line matching {pattern!r} (exit {proc.poll()}): {''.join(seen)[-3000:]}")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_to_the_launcher_stops_its_workers(signum):
    launcher = subprocess.Popen([sys.executable, SCRIPT, "--launch_local=2", "--epochs=50"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    started = read_until(launcher, r"tfplace launch: started worker 0 \(pid (\d+), [^)]*\), worker 1 \(pid (\d+)")
    pids = [int(p) for p in started.groups()]
    try:
        assert all(alive(pid) for pid in pids)
        # children of the launcher: the field after the state in /proc/PID/stat is the parent's pid
        assert [Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1] for pid in pids] == \
            [str(launcher.pid)] * 2
        launcher.send_signal(signum)
        out, _ = launcher.communicate(timeout=60)
    finally:
        launcher.kill()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert launcher.returncode == 128 + signum, out[-3000:]
    assert f"tfplace launch: received {signum.name}; stopping every task ({signum.name}, then SIGKILL" in out
    assert not [pid for pid in pids if alive(pid)]


@pytest.mark.parametrize("config, named", [
    ("not json", "it is not JSON (Expecting value: line 1 column 1 (char 0))"),
    (tf_config("127.0.0.1:2222", "127.0.0.1:99999"),
     "cluster[\"worker\"][1] is '127.0.0.1:99999': the port 99999 is outside 1..65535"),
    (tf_config("127.0.0.1:2222", "127.0.0.1"), "cluster[\"worker\"][1] is '127.0.0.1', not \"host:port\""),
    ('{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "chief", "index": 0}}',
     "the task type 'chief' is not a job of the cluster ('worker')"),
], ids=["not-json", "port-99999", "no-port", "task-not-in-cluster"])
def test_bad_tf_config_is_one_line_before_tensorflow_starts(config, named):
    start = time.monotonic()
    done = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env=worker_env(config))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"multi_worker.py: error: TF_CONFIG={config!r} (from environment variable TF_CONFIG) is not a cluster spec: "
        f"{named}; allowed is JSON like {{\"cluster\": {{\"worker\": [\"host:port\", ...]}}, \"task\": "
        "{\"type\": \"worker\", \"index\": 0}}, each port in 1..65535"]
    assert time.monotonic() - start < 20  # no TensorFlow import: a second or two


def test_unreachable_peer_fails_within_connect_timeout_naming_it():
    own, peer = closed_port(), closed_port()
    start = time.monotonic()
    done = subprocess.run([sys.executable, SCRIPT, "--connect_timeout=1"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=worker_env(tf_config(f"127.0.0.1:{own}", f"127.0.0.1:{peer}")))
    assert done.returncode == 1, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "multi_worker.py: error: no answer within --connect_timeout=1 s from the peer(s) "
        f'cluster["worker"][1]=127.0.0.1:{peer} (ConnectionRefusedError'), done.stderr
    assert "environment variable TF_CONFIG" in lines[0]
    assert time.monotonic() - start < 30  # today's TensorFlow alone waits for an hour


def test_a_cluster_that_never_forms_is_stopped_after_connect_timeout():
    own = closed_port()
    with socket.create_server(("127.0.0.1", 0)) as impostor:  # answers, but is no TensorFlow worker
        peer = impostor.getsockname()[1]
        start = time.monotonic()
        done = subprocess.run([sys.executable, SCRIPT, "--connect_timeout=3"], capture_output=True, text=True,
                              timeout=180, cwd=ROOT,
                              env=worker_env(tf_config(f"127.0.0.1:{own}", f"127.0.0.1:{peer}")))
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    assert ("multi_worker.py: error: the cluster of environment variable TF_CONFIG did not form within "
            f'--connect_timeout=3 s after its peers answered (cluster["worker"][1]=127.0.0.1:{peer})') in done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - start < 90
