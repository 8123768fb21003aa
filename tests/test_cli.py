"""The console script, run in subprocesses."""

import json
import os
import shutil
import subprocess
import sys

from conftest import ROOT


def tfplace(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    command = shutil.which("tfplace") or sys.executable
    prefix = [] if command.endswith("tfplace") else ["-m", "tfplace"]
    return subprocess.run([command, *prefix, *args], capture_output=True, text=True, timeout=120, env=env)


def imported(stderr: str) -> set[str]:
    """The top-level packages that `PYTHONPROFILEIMPORTTIME=1` (`-X importtime`) says were imported."""
    return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def messages(stderr: str) -> str:
    """`stderr` without the import-time lines."""
    return "".join(line for line in stderr.splitlines(keepends=True) if not line.startswith("import time:"))


def test_help_and_usage_errors_answer_without_importing_tensorflow(tmp_path):
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    main_help = tfplace("--help", env=env)
    trace_help = tfplace("trace", "--help", env=env)
    bad_count = tfplace("devices", "--logical_cpus=0", env=env)
    bogus = tfplace("bogus", env=env)
    no_script = tfplace("trace", str(tmp_path / "nowhere.py"), env=env)
    for done in (main_help, trace_help, bad_count, bogus, no_script):
        assert "tfplace" in imported(done.stderr) and "tensorflow" not in imported(done.stderr)
    assert main_help.returncode == 0 and main_help.stdout.startswith(
        "usage: tfplace [-h] {devices,env,doctor,trace,profile,launch,diff,merge} ...")
    assert trace_help.returncode == 0 and trace_help.stdout.startswith("usage: tfplace trace [tfplace flags]")
    assert "--soft_placement, --nosoft_placement" in trace_help.stdout
    assert bad_count.returncode == 2 and messages(bad_count.stderr).endswith(
        "logical_cpus=0 (from option --logical_cpus) is not allowed: expected a whole number >= 1\n")
    assert bogus.returncode == 2 and "invalid choice: 'bogus'" in messages(bogus.stderr)
    assert no_script.returncode == 2
    assert "nowhere.py' (from argument script) is not a file" in messages(no_script.stderr)


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
    for unset in ("TF_ENABLE_ONEDNN_OPTS", "CUDA_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH",
                  "TFPLACE_MEMORY_GROWTH"):
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


def test_env_warns_about_a_memory_conflict_only_when_configure_would_raise():
    import os

    base = {**os.environ, "TF_FORCE_GPU_ALLOW_GROWTH": "true", "TFPLACE_MEMORY_FRACTION": "0.5"}
    warned = json.loads(tfplace("env", "--json", env=base).stdout)["warnings"]
    assert any(w.startswith("memory_growth=True (from environment variable TF_FORCE_GPU_ALLOW_GROWTH) and "
                            "memory_fraction=0.5 (from environment variable TFPLACE_MEMORY_FRACTION) cannot be "
                            "combined") for w in warned), warned
    overridden = json.loads(tfplace("env", "--json", env={**base, "TFPLACE_MEMORY_GROWTH": "0"}).stdout)["warnings"]
    assert not any("cannot be combined" in w for w in overridden), overridden


def test_every_setting_is_an_option_of_trace_and_every_fixed_one_a_preview_of_devices():
    from tfplace.config._settings import SETTINGS

    trace_help = " ".join(tfplace("trace", "--help").stdout.split())
    devices_help = " ".join(tfplace("devices", "--help").stdout.split())
    for setting in SETTINGS:
        assert f"--{setting.name}" in trace_help and setting.kind.allowed in trace_help, setting.name
        assert (f"--{setting.name}" in devices_help) == setting.fixed, setting.name
    done = tfplace("devices", "--json", "--log_placement=false", "--logical_cpus=3")
    assert json.loads(done.stdout)["logical"] == ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2"], done.stderr


def test_devices_and_env_hide_tensorflows_info_start_up_lines_unless_the_user_set_the_log_level():
    base = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    base["TF_ENABLE_ONEDNN_OPTS"] = "1"  # TensorFlow then logs its oneDNN notice at start-up, on every CPU
    devices = tfplace("devices", "--json", "--logical_cpus=2", env=base)
    env = tfplace("env", "--json", env=base)
    shown = tfplace("devices", env={**base, "TF_CPP_MIN_LOG_LEVEL": "0"})
    for done in (devices, env):
        assert done.returncode == 0, done.stderr
        assert "oneDNN custom operations" not in done.stderr and "absl::InitializeLog" not in done.stderr, done.stderr
    assert json.loads(devices.stdout)["logical"] == ["/device:CPU:0", "/device:CPU:1"]
    report = json.loads(env.stdout)
    assert report["environment"]["TF_CPP_MIN_LOG_LEVEL"] is None  # the user's environment, not the quiet run's
    assert not any("TF_CPP_MIN_LOG_LEVEL" in warning for warning in report["warnings"])
    assert "oneDNN custom operations are on" in shown.stderr  # the user's own level: every line shows
    assert shown.returncode == 0 and "logical devices: /device:CPU:0" in shown.stdout


def test_a_reader_that_stops_reading_ends_env_and_doctor_quietly():
    for command in ("env", "doctor"):
        done = subprocess.run(["sh", "-c", f"'{sys.executable}' -m tfplace {command} | true"], capture_output=True,
                              text=True, cwd=ROOT, timeout=120)
        assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr[-2000:]
