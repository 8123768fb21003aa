"""Cost of placement records, guards and `tfplace trace`, as ratios measured side by side.

* A program that calls `configure()` vs one that does not, per eager op
  (alternating process pairs): tfplace costs nothing outside a capture.
* 100,000 eager ops in one capture: every record, memory per record (tracemalloc).
* `PlacementLog.from_text` on a 1,000,000-line saved log.
* `tfplace trace` on the d2l training example vs running it plainly (wall time).
* `tfplace trace` vs a plain run on each program of the conformance suite (median).

Per-op and Keras `fit` costs beside TensorFlow's own floor: `bench_overhead.py`.

    python benchmarks/bench_capture.py [--ops 20000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

from common import print_table, row

ROOT = Path(__file__).resolve().parents[1]
PER_OP = """
import sys, time, tensorflow as tf, tfplace
if sys.argv[1] == "configure":
    tfplace.configure()
x = tf.ones(1)
for _ in range(2000):
    x = tf.identity(x)
rounds = []
for _ in range(5):  # the best of 5 rounds: the least disturbed by the rest of the machine
    start = time.perf_counter()
    for _ in range({ops} // 5):
        x = tf.identity(x)
    rounds.append((time.perf_counter() - start) / ({ops} // 5))
print(min(rounds))
"""
TRAINING = ["examples/multi_gpu_training.py", "--num_devices=2", "--width=0.125", "--dataset=synthetic",
            "--epochs=1", "--train_size=512", "--batch_size=128"]


def configure_cost(ops: int, pairs: int = 9) -> tuple[float, float, float]:
    """Per-op time of a process that called configure() vs one that did not, process pairs in alternating order."""
    results = []
    for pair in range(pairs):
        times = {}
        for mode in (("configure", "plain") if pair % 2 else ("plain", "configure")):
            done = subprocess.run([sys.executable, "-c", PER_OP.format(ops=ops), mode],
                                  capture_output=True, text=True, check=True)
            times[mode] = float(done.stdout.split()[-1])
        results.append((times["configure"] / times["plain"], times["configure"], times["plain"]))
    return tuple(statistics.median(r[i] for r in results) for i in range(3))  # type: ignore[return-value]


def trace_cost(pairs: int = 3) -> tuple[float, float, float]:
    """Wall time of `tfplace trace` on the d2l training example vs running it plainly, alternating."""
    results = []
    for _ in range(pairs):
        times = {}
        for mode, command in (("trace", [sys.executable, "-m", "tfplace", "trace", "--logical_cpus=2", *TRAINING]),
                              ("plain", [sys.executable, *TRAINING])):
            start = time.perf_counter()
            subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
            times[mode] = time.perf_counter() - start
        results.append((times["trace"] / times["plain"], times["trace"], times["plain"]))
    return tuple(statistics.median(r[i] for r in results) for i in range(3))  # type: ignore[return-value]


PLAIN_PROGRAM = """
import runpy, sys, tensorflow as tf
tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                           [tf.config.LogicalDeviceConfiguration()] * 2)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def trace_programs_cost() -> tuple[float, list[tuple[str, float]]]:
    """`tfplace trace` vs a plain run (same 2 logical CPUs) of each conformance program, wall time."""
    programs = sorted((ROOT / "tests" / "conformance" / "programs").glob("[a-j]_*.py"))
    ratios = []
    for index, program in enumerate(programs):
        times = {}
        commands = {"trace": [sys.executable, "-m", "tfplace", "trace", "--logical_cpus=2", str(program)],
                    "plain": [sys.executable, "-c", PLAIN_PROGRAM, str(program)]}
        for mode in (("trace", "plain") if index % 2 else ("plain", "trace")):
            start = time.perf_counter()
            subprocess.run(commands[mode], capture_output=True, text=True, check=True, cwd=ROOT)
            times[mode] = time.perf_counter() - start
        ratios.append((program.stem, times["trace"] / times["plain"]))
    return statistics.median(r for _, r in ratios), ratios


def run(ops: int = 20_000) -> list[dict[str, str]]:
    import tensorflow as tf

    import tfplace

    x = tf.ones(1)

    peaks = {}
    for n in (25_000, 100_000):
        tracemalloc.start()
        with tfplace.capture_placement() as log:
            y = x
            for _ in range(n):
                y = tf.identity(y)
        peaks[n] = (tracemalloc.get_traced_memory()[1], sum(1 for r in log.records if r.op == "Identity"))
        tracemalloc.stop()
        del log
    (small, small_count), (large, large_count) = peaks[25_000], peaks[100_000]
    per_record = (large - small) / (large_count - small_count)

    sample = ("I0000 00:00:1795316459.951921    1852 execute.cc:1775] Executing op _MklMatMul in device "
              "/job:localhost/replica:0/task:0/device:CPU:0\n"
              "I0000 00:00:1795316459.951596    1852 placer.cc:162] MatMul: (MatMul): "
              "/job:localhost/replica:0/task:0/device:CPU:1\n"
              "some program output that is not placement\n"
              "MatMul: (MatMul): /job:localhost/replica:0/task:0/device:CPU:1\n")
    text = sample * 250_000
    lines = text.count("\n")
    speeds = []
    for _ in range(3):
        start = time.perf_counter()
        tfplace.PlacementLog.from_text(text)
        speeds.append(lines / (time.perf_counter() - start))

    configured, configured_s, plain_s = configure_cost(ops)
    traced, traced_s, untraced_s = trace_cost()
    programs, per_program = trace_programs_cost()
    long_line = "x" * 20_000 + "): /job:" + "y" * 20_000
    line_times = []
    for _ in range(5):
        start = time.perf_counter()
        tfplace.PlacementLog.from_text(long_line)
        line_times.append(time.perf_counter() - start)
    return [
        row("eager op after configure() vs without tfplace", f"{configured:.3f}", "<= 1.02",
            f"{configured_s * 1e6:.1f} vs {plain_s * 1e6:.1f} us per tf.identity, best of 5 rounds per process, "
            "median of 9 process pairs"),
        row("tfplace trace vs plain run, conformance programs (median)", f"{programs:.2f}", "<= 1.10",
            ", ".join(f"{name.split('_')[0]} {r:.2f}" for name, r in per_program)),
        row("PlacementLog.from_text on one 40 kB line with a placer marker",
            f"{min(line_times) * 1e3:.1f} ms", "< 10 ms", "best of 5"),
        row("memory per record, 100,000 eager ops in one capture", f"{per_record:.0f} B", "<= 300 B, linear",
            f"{large_count} of 100000 records; tracemalloc peak {small / 1e6:.2f} MB for {small_count}, "
            f"{large / 1e6:.2f} MB for {large_count} (identical events share one record)"),
        row(f"PlacementLog.from_text on a {lines:,}-line log", f"{statistics.median(speeds) / 1e3:.0f}k lines/s",
            ">= 800k lines/s", "one core, median of 3"),
        row("tfplace trace on the d2l training example vs plain run", f"{traced:.2f}", "<= 1.5",
            f"{traced_s:.1f} vs {untraced_s:.1f} s wall, 1 epoch, 2 logical CPUs, median of 3 pairs"),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=20_000)
    print_table(run(parser.parse_args().ops))
