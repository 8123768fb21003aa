"""Replication benchmarks, each as a ratio measured side by side.

* Steps per second of a training step under `tfplace.strategy()` vs written
  directly with `tf.distribute.MirroredStrategy`, on 2 logical CPUs (each in its
  own process, alternating, since two MirroredStrategy objects over the same
  devices clash in one process).
* Two matmuls on two logical CPUs at once (one intra-op thread each) vs the
  same two in sequence on one: d2l's "near-linear scaling" exercise.

    python benchmarks/bench_replication.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import textwrap

from common import print_table, row

STEP = textwrap.dedent("""
    import sys, time
    import tensorflow as tf, tfplace, keras
    tfplace.configure(logical_cpus=2)
    which = sys.argv[1]
    strategy = (tfplace.strategy(["CPU:0", "CPU:1"]) if which == "tfplace"
                else tf.distribute.MirroredStrategy(["/device:CPU:0", "/device:CPU:1"]))
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                                  keras.layers.Dense(10)])
        optimizer = keras.optimizers.SGD(0.01)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    def per_replica(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x)), global_batch_size=128)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss
    @tf.function
    def step(batch):
        return strategy.reduce("SUM", strategy.run(per_replica, args=batch), axis=None)
    ds = tf.data.Dataset.from_tensors((tf.random.normal((128, 64)), tf.zeros(128, tf.int32))).repeat()
    it = iter(strategy.experimental_distribute_dataset(ds))
    for _ in range(20):
        step(next(it))
    start = time.perf_counter()
    for _ in range(300):
        step(next(it))
    float(step(next(it)))
    print(301 / (time.perf_counter() - start))
""")

PARALLEL = textwrap.dedent("""
    import time, statistics
    import tensorflow as tf, tfplace
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tfplace.configure(logical_cpus=2)
    a = tf.random.normal((1024, 1024))
    @tf.function
    def parallel(a):
        with tf.device("/device:CPU:0"):
            x = tf.matmul(a, a)
        with tf.device("/device:CPU:1"):
            y = tf.matmul(a, a)
        return x[0, 0] + y[0, 0]
    @tf.function
    def sequence(a):
        with tf.device("/device:CPU:0"):
            x = tf.matmul(a, a)
            with tf.control_dependencies([x]):
                y = tf.matmul(a, a)
        return x[0, 0] + y[0, 0]
    def timed(fn, n=10):
        fn(a).numpy()
        start = time.perf_counter()
        for _ in range(n):
            fn(a).numpy()
        return (time.perf_counter() - start) / n
    ratios = [timed(sequence) / timed(parallel) for _ in range(5)]
    print(statistics.median(ratios))
""")


def _python(code: str, *args: str) -> float:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def run() -> list[dict[str, str]]:
    pairs = []
    for _ in range(5):
        ours = _python(STEP, "tfplace")
        raw = _python(STEP, "raw")
        pairs.append((ours / raw, ours, raw))
    ratio, ours, raw = (statistics.median(p[i] for p in pairs) for i in range(3))
    speedup = _python(PARALLEL)
    return [
        row("train step: tfplace.strategy() vs raw MirroredStrategy (2 logical CPUs)", f"{ratio:.3f}", ">= 0.97",
            f"{ours:.0f} vs {raw:.0f} steps/s, median of 5 process pairs"),
        row("2 matmuls 1024^2 on 2 logical CPUs at once vs in sequence on 1", f"{speedup:.2f}x", "near 2x",
            "1 intra-op thread per op; 2 physical cores shared with everything else"),
    ]


if __name__ == "__main__":
    print_table(run())
