"""What `tfplace doctor` and its checks cost, measured side by side on one machine.

    python benchmarks/bench_doctor.py
    DOCTOR_CUDA_PYTHON=/path/to/venv-with-tensorflow[and-cuda]/bin/python python benchmarks/bench_doctor.py

Rows: reading the machine's facts (GPUs, driver, TensorFlow's build and requirements, each CUDA library the build
loads, loaded in a child process), in this Python and in one with TensorFlow's CUDA wheel and its `nvidia-*-cu12`
wheels when given; `tfplace doctor` beside `python -c "import tensorflow"` (TensorFlow's own view is read in a
child process, meanwhile); the check `configure()`, `try_gpu()` and `try_all_gpus()` make where nothing is wrong.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import print_table, row

ROOT = Path(__file__).resolve().parents[1]


def _seconds(command: list[str], rounds: int = 3, env: dict[str, str] | None = None) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, check=False, cwd=ROOT, env=env)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _facts_ms(python: str) -> float:
    code = ("import time, statistics\nfrom tfplace.machine import _facts\n_facts.read()\nruns = []\n"
            "for _ in range(5):\n    t = time.perf_counter(); _facts.read(); runs.append(time.perf_counter() - t)\n"
            "print(statistics.median(runs) * 1000)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return float(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True, env=env,
                                cwd=ROOT).stdout)


def _check_ms() -> float:
    code = ("import time\nfrom tfplace.machine import _doctor\nruns = []\n"
            "for _ in range(200):\n    _doctor._warned = False\n    t = time.perf_counter()\n"
            "    _doctor.warn_if_unused(0, 'bench')\n    runs.append(time.perf_counter() - t)\n"
            "runs.sort(); print(runs[len(runs) // 2] * 1000)\n")
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                cwd=ROOT).stdout)


def run() -> list[dict[str, str]]:
    rows = [row("machine facts (this Python)", f"{_facts_ms(sys.executable):.0f} ms", "<= 500 ms",
                "median of 5 reads after one; libraries loaded in a child process")]
    cuda = os.environ.get("DOCTOR_CUDA_PYTHON")
    if cuda:
        rows.append(row("machine facts (TensorFlow's CUDA wheel and nvidia-*-cu12 wheels)", f"{_facts_ms(cuda):.0f} ms",
                        "<= 500 ms", "10 libraries loaded and asked their version"))
    python_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    doctor = _seconds([sys.executable, "-m", "tfplace", "doctor"])
    import_tf = _seconds([sys.executable, "-c", "import tensorflow"], env=python_env)
    rows.append(row("tfplace doctor vs python -c 'import tensorflow'", f"+{doctor - import_tf:.2f} s", "<= +2 s",
                    f"{doctor:.2f} s vs {import_tf:.2f} s, medians of 3"))
    rows.append(row("GPU-unused check where nothing is wrong (configure, try_gpu)", f"{_check_ms():.3f} ms", "<= 50 ms",
                    "one NVML count; median of 200"))
    return rows


if __name__ == "__main__":
    print_table(run())
