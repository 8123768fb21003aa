"""examples/multi_worker.py: two real worker processes on 127.0.0.1, and the launcher's failure paths."""

import json
import subprocess
import sys
import time

from conftest import ROOT

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
    assert done.returncode == 1
    assert "worker 1 exited with status 3; stopping the others" in done.stdout
    assert time.monotonic() - start < 60  # worker 0 would otherwise wait for its peer forever


def test_malformed_tf_config_is_a_clear_usage_error():
    env = {"TF_CONFIG": '{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "chief", "index": 0}}',
           "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert done.returncode != 0
    assert "TF_CONFIG=" in done.stderr and "is not a cluster spec" in done.stderr
    assert "Traceback" not in done.stderr
