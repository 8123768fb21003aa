"""Cost of capture_placement() and speed of the parser.

* A block of eager ops captured vs the same block with placement logging on and
  fds 1/2 sent to /dev/null (both in one process, alternating).
* Memory per record: tracemalloc's peak while capturing N and 4N ops.
* Parser throughput on a recorded log of >= 1,000,000 lines.

    python benchmarks/bench_capture.py [--ops 50000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import tracemalloc

from common import print_table, ratio, row


QUIET = """
import sys, time, tensorflow as tf, tfplace
tfplace.configure(log_placement={setting})
x = tf.ones(1)
for _ in range(2000):
    x = tf.identity(x)
start = time.perf_counter()
for _ in range({ops}):
    x = tf.identity(x)
print((time.perf_counter() - start) / {ops})
"""


def quiet_logging_cost(ops: int) -> tuple[float, float, float]:
    """Per-op time with quiet logging (the default) vs logging off, in alternating processes."""
    pairs = []
    for _ in range(3):
        times = {}
        for setting in ("None", "False"):
            done = subprocess.run([sys.executable, "-c", QUIET.format(setting=setting, ops=ops)],
                                  capture_output=True, text=True, check=True)
            times[setting] = float(done.stdout.split()[-1])
        pairs.append((times["None"] / times["False"], times["None"], times["False"]))
    return tuple(statistics.median(p[i] for p in pairs) for i in range(3))


def run(ops: int = 50_000) -> list[dict[str, str]]:
    import tensorflow as tf

    import tfplace
    tfplace.configure(log_placement=True)  # logging on from the start, lines on the terminal (here /dev/null)
    x = tf.ones(1)

    def block():
        y = x
        for _ in range(ops):
            y = tf.identity(y)

    def to_devnull():
        saved = [os.dup(1), os.dup(2)]
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        try:
            block()
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in (*saved, null):
                os.close(fd)

    def captured():
        with tfplace.capture_placement() as log:
            block()
        assert len(log.records) >= ops
        return log

    capture_ratio = ratio(captured, to_devnull, calls=1, rounds=3)[0]

    peaks = {}
    for n in (ops // 4, ops):
        tracemalloc.start()
        with tfplace.capture_placement() as log:
            y = x
            for _ in range(n):
                y = tf.identity(y)
        count = len(log.records)
        peaks[n] = (tracemalloc.get_traced_memory()[1], count)
        tracemalloc.stop()
        del log
    (small, small_count), (large, large_count) = peaks[ops // 4], peaks[ops]
    per_record = (large - small) / (large_count - small_count)

    from tfplace.parsing import parse_placement

    sample = ("I0000 00:00:1795316459.951921    1852 execute.cc:1775] Executing op Identity in device "
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
        parse_placement(text)
        speeds.append(lines / (time.perf_counter() - start))
    quiet, quiet_s, off_s = quiet_logging_cost(ops // 2)
    return [
        row("quiet logging (configure() default) vs logging off, per eager op", f"{quiet:.2f}", "",
            f"{quiet_s * 1e6:.1f} vs {off_s * 1e6:.1f} us per tf.identity; the price of capturing at any time"),
        row(f"capture {ops} eager ops vs logging to /dev/null", f"{capture_ratio:.2f}", "<= 1.3",
            "wall time, median of 3 alternating runs"),
        row("memory per record while capturing", f"{per_record:.0f} B", "linear",
            f"tracemalloc peak {small / 1e6:.1f} MB for {small_count} records, {large / 1e6:.1f} MB for {large_count}"),
        row(f"parser on a {lines:,}-line log", f"{statistics.median(speeds) / 1e3:.0f}k lines/s", ">= 500k lines/s",
            "one core, median of 3"),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=50_000)
    print_table(run(parser.parse_args().ops))
