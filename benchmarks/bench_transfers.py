"""Cost of function transfers and timing, and what they report, as ratios measured side by side.

* Keras `fit` (2 epochs) under `MirroredStrategy` on 2 logical CPUs inside a capture (function
  transfers on every step) vs without tfplace.
* `capture_placement(timing=True)` vs a plain capture, on Keras `fit` and on a `strategy.run`
  custom loop (TensorFlow's profiler runs the block; the time includes reading the profile back).
* d2l's exercise "copy every step vs once": the transfers each variant reports
  (`log.transfers()`: count and bytes), and the time ratio.

Each figure comes from its own process (TensorFlow fixes devices per process), the two modes
alternating, best of 4 rounds each.

    python benchmarks/bench_transfers.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from common import print_table, row

ROOT = Path(__file__).resolve().parents[1]
SETUP = """
import json, sys, time, numpy as np, keras, tensorflow as tf, tfplace
tfplace.configure(logical_cpus=2)
"""
FIT = SETUP + """
strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
x, y = np.random.default_rng(0).normal(size=(512, 16)).astype("float32"), np.ones((512, 1), "float32")
def fit():
    with strategy.scope():
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
        model.compile("adam", "mse")
    start = time.perf_counter()
    model.fit(x, y, epochs=2, batch_size=32, verbose=0)
    return time.perf_counter() - start
"""
LOOP = SETUP + """
strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
with strategy.scope():
    w = tf.Variable(tf.ones((256, 256)))
@tf.function
def step(x):
    def replica(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.matmul(x, w))
        return tape.gradient(loss, w)
    grads = strategy.run(replica, args=(x,))
    return strategy.reduce("SUM", grads, axis=None)
x = tf.ones((256, 256))
def fit():
    start = time.perf_counter()
    for _ in range(2000):
        step(x)
    return time.perf_counter() - start
"""
MODES = """
fit()  # warm up Keras and TensorFlow
def capture(**kwargs):
    start = time.perf_counter()  # the capture's exit (the profile read back) counts too
    with tfplace.capture_placement(**kwargs) as log:
        fit()
    return time.perf_counter() - start, log
def profiled():
    start = time.perf_counter()  # TensorFlow's profiler alone, its export included
    tf.profiler.experimental.start(__import__("tempfile").mkdtemp())
    fit()
    tf.profiler.experimental.stop()
    return time.perf_counter() - start, None
times, logs = {{"a": [], "b": []}}, {{}}
for round in range(4):
    for mode in (("a", "b") if round % 2 else ("b", "a")):
        spent, logs[mode] = {a} if mode == "a" else {b}
        times[mode].append(spent)
copies = logs["a"].copies if logs["a"] is not None else []
print("RESULT" + json.dumps([min(times["a"]), min(times["b"]), len(copies),
                             sum(1 for c in copies if c.kind == "function")]))
"""
COPIES = SETUP + """
with tf.device("/device:CPU:0"):
    x = tf.random.normal((256, 256))
with tf.device("/device:CPU:1"):
    w = tf.random.normal((256, 256))
def implicit():
    with tf.device("/device:CPU:1"):
        for _ in range(200):
            y = tf.matmul(x, w)  # x is copied to CPU:1 every step
    return y.numpy()
def explicit():
    x1 = tfplace.to_device(x, "CPU:1")
    with tf.device("/device:CPU:1"):
        for _ in range(200):
            y = tf.matmul(x1, w)
    return y.numpy()
reported = {}
for name, fn in (("implicit", implicit), ("explicit", explicit)):
    with tfplace.capture_placement() as log:
        fn()
    reported[name] = [[t.op, t.count, t.total_bytes] for t in log.transfers()]
times = {"implicit": [], "explicit": []}
for round in range(6):
    for name in (("implicit", "explicit") if round % 2 else ("explicit", "implicit")):
        start = time.perf_counter()
        (implicit if name == "implicit" else explicit)()
        times[name].append(time.perf_counter() - start)
print("RESULT" + json.dumps([reported, min(times["implicit"]) / min(times["explicit"])]))
"""


def _run(code: str) -> list:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT"))[len("RESULT"):])


def _pair(program: str, a: str, b: str) -> list:
    return _run(program + MODES.format(a=a, b=b))


def run() -> list[dict[str, str]]:
    rows = []
    captured, plain, copies, functions = _pair(FIT, "capture()", "(fit(), None)")
    rows.append(row("Keras fit under MirroredStrategy inside a capture vs without tfplace", f"{captured / plain:.2f}",
                    "<= 1.10", f"{captured:.2f} vs {plain:.2f} s, 2 epochs of 16 steps, best of 4; {copies} copies, "
                               f"{functions} of them inside functions"))
    for name, program in (("Keras fit under MirroredStrategy", FIT), ("strategy.run loop, 2000 steps", LOOP)):
        timed, untimed, _, _ = _pair(program, "capture(timing=True)", "capture()")
        alone, plain, _, _ = _pair(program, "profiled()", "(fit(), None)")
        rows.append(row(f"{name}: capture(timing=True) vs capture()", f"{timed / untimed:.2f}", "<= 1.3",
                        f"{timed:.2f} vs {untimed:.2f} s with the capture's exit (profile read back), best of 4; "
                        f"TensorFlow's profiler alone vs plain: {alone / plain:.2f}"))
    reported, slower = _run(COPIES)
    implicit, explicit = reported["implicit"], reported["explicit"]
    rows.append(row("d2l copy every step vs once: transfers reported", f"{len(implicit)} vs {len(explicit)} row(s)", "",
                    "every step: " + "; ".join(f"{op} x{n}, {total / 2**20:.0f} MiB" for op, n, total in implicit)
                    + " | once: " + ("; ".join(f"{op} x{n}" for op, n, _ in explicit) or "no implicit transfer")))
    rows.append(row("d2l copy every step vs once: time", f"{slower:.2f}x", "",
                    "200 matmuls 256^2 on CPU:1; between logical CPUs the copy is a host memcpy"))
    return rows


if __name__ == "__main__":
    print_table(run())
