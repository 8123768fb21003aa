"""The examples' up-front checks: a wrong flag or output path, too few devices or no network end the
program with one line on stderr and a non-zero status, without traceback or flag help, before training."""

import os
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT


def run(script: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], capture_output=True, text=True,
                          timeout=180, cwd=ROOT, env={**os.environ, **(env or {})})


def error_line(done: subprocess.CompletedProcess, script: str) -> str:
    """The program's one error line; TensorFlow's own start-up lines on stderr are left aside."""
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output[-3000:]
    assert "flags:" not in output and "--helpfull" not in output, output[-3000:]  # absl's flag help
    ours = [line for line in done.stderr.splitlines() if line.startswith(f"{script}: error: ")]
    assert len(ours) == 1, output[-3000:]
    return ours[0][len(f"{script}: error: "):]


@pytest.mark.parametrize("script, args, flag", [
    ("multi_worker.py", ["--launch_local=2"], "report_dir"),
    ("multi_worker.py", [], "report_dir"),
])
def test_missing_report_dir_is_one_line_before_any_worker_starts(tmp_path, script, args, flag):
    missing = tmp_path / "missing"
    start = time.monotonic()
    done = run(script, *args, f"--{flag}={missing}")
    assert done.returncode == 2
    assert error_line(done, script) == (f"--{flag}={missing} (flag): {missing} does not exist; allowed is an "
                                        "existing folder this user can write to (create it first)")
    assert "launched" not in done.stdout
    assert time.monotonic() - start < 20  # no worker, no TensorFlow


def test_report_dir_that_is_a_file_is_refused(tmp_path):
    file = tmp_path / "file"
    file.write_text("")
    done = run("multi_worker.py", "--launch_local=2", f"--report_dir={file}")
    assert done.returncode == 2
    assert error_line(done, "multi_worker.py") == (f"--report_dir={file} (flag): {file} is not a folder; allowed is "
                                                   "an existing folder this user can write to")


@pytest.mark.parametrize("script, args, flag", [
    ("multi_gpu_training.py", ["--dataset=synthetic"], "plot"),
    ("d2l_gpus.py", ["--logical_cpus=2"], "report"),
])
def test_output_file_in_a_missing_folder_is_refused_before_any_work(tmp_path, script, args, flag):
    target = tmp_path / "missing" / "out"
    done = run(script, *args, f"--{flag}={target}")
    assert done.returncode == 2
    assert error_line(done, script) == (f"--{flag}={target} (flag): the folder {target.parent} does not exist; "
                                        "allowed is a file name in an existing folder this user can write to "
                                        "(create it first)")
    assert "==" not in done.stdout and "epoch" not in done.stdout  # no step, no training


def test_more_devices_than_logical_cpus_names_both_flags():
    done = run("multi_gpu_training.py", "--num_devices=4", "--logical_cpus=2", "--dataset=synthetic")
    assert done.returncode == 2
    assert error_line(done, "multi_gpu_training.py") == (
        "--num_devices=4 (flag) asks for 4 CPU devices, but this machine has no GPU and --logical_cpus=2 (flag) "
        "made 2 logical CPU(s): /device:CPU:0, /device:CPU:1; allowed is --num_devices from 1 to 2: lower "
        "--num_devices, or raise --logical_cpus (without it, --num_devices logical CPUs are made)")


def test_batch_size_not_a_multiple_of_devices_is_one_line():
    done = run("multi_gpu_training.py", "--num_devices=3", "--batch_size=64", "--dataset=synthetic")
    assert done.returncode == 2
    assert error_line(done, "multi_gpu_training.py").startswith(
        "--batch_size=64 (flag) is not a multiple of --num_devices=3: allowed are multiples of 3")


def test_offline_fashion_mnist_is_one_line_naming_the_synthetic_set(tmp_path):
    with socket.socket() as s:  # a proxy that nobody runs: every download fails at once
        s.bind(("127.0.0.1", 0))
        proxy = f"http://127.0.0.1:{s.getsockname()[1]}"
    env = {"KERAS_HOME": str(tmp_path), "https_proxy": proxy, "http_proxy": proxy, "HTTPS_PROXY": proxy,
           "HTTP_PROXY": proxy, "no_proxy": "", "NO_PROXY": ""}
    done = run("multi_gpu_training.py", "--num_devices=2", "--epochs=1", env=env)
    assert done.returncode == 1
    line = error_line(done, "multi_gpu_training.py")
    assert line.startswith("--dataset=fashion_mnist could not be downloaded (")
    assert line.endswith("); on an offline machine use --dataset=synthetic")
    assert "Channel multiplier" not in done.stdout + done.stderr  # the flag help of --width
