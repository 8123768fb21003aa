"""The console script, run in subprocesses."""

import json
import shutil
import subprocess
import sys


def tfplace(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    command = shutil.which("tfplace") or sys.executable
    prefix = [] if command.endswith("tfplace") else ["-m", "tfplace"]
    return subprocess.run([command, *prefix, *args], capture_output=True, text=True, timeout=120, env=env)


def test_devices_preview_logical_cpus_without_starting_the_runtime():
    done = tfplace("devices", "--logical_cpus=4", "--json")
    report = json.loads(done.stdout)
    assert report["logical"] == [f"/device:CPU:{i}" for i in range(4)]
    assert report["runtime_started"] is False
    assert report["physical"][0] == {"name": "/physical_device:CPU:0", "type": "CPU", "visible": True}


def test_env_reports_versions_variables_and_warnings():
    import os

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1", "TFPLACE_LOGICAL_CPUS": "2"}
    report = json.loads(tfplace("env", "--json", env=env).stdout)
    assert report["tensorflow"].startswith("2.") and report["is_cuda_build"] is False
    assert report["environment"]["TF_CPP_MIN_LOG_LEVEL"] == "1"
    assert report["environment"]["TFPLACE_LOGICAL_CPUS"] == "2"
    for unset in ("TF_ENABLE_ONEDNN_OPTS", "CUDA_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH", "TFPLACE_MEMORY_GROWTH"):
        if unset not in os.environ:
            assert report["environment"][unset] is None
    assert any("hides TensorFlow's own eager" in w for w in report["warnings"])
    text = tfplace("env", env=env).stdout
    assert "TFPLACE_LOGICAL_CPUS 2" in " ".join(text.split())
    assert ("TF_ENABLE_ONEDNN_OPTS (unset)" in " ".join(text.split())) == ("TF_ENABLE_ONEDNN_OPTS" not in os.environ)


def test_env_says_whether_onednn_is_on():
    import os

    for value, on in (("0", False), ("1", True)):
        report = json.loads(tfplace("env", "--json", env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": value}).stdout)
        assert report["onednn"] is on and report["environment"]["TF_ENABLE_ONEDNN_OPTS"] == value
        assert ("_MklMatMul" in report["onednn_note"]) is on


def test_bad_options_exit_non_zero_with_a_message():
    done = tfplace("devices", "--logical_cpus=0")
    assert done.returncode == 2
    assert "logical_cpus=0 (from option --logical_cpus) is not allowed: expected a whole number >= 1" in done.stderr
    done = tfplace("devices", "--visible_gpus=3")
    assert done.returncode == 2 and "visible_gpus=[3]" in done.stderr and "this machine has 0 GPU" in done.stderr
    assert tfplace("bogus").returncode == 2
