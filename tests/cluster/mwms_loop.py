"""TensorFlow's "Custom training loop with MultiWorkerMirroredStrategy" tutorial, in small: a linear
model whose gradient (a 4x2 float32 kernel: 32 bytes) is all-reduced across the workers each step.

    --steps=N                each worker runs N steps (default 3); the time per step after the first is printed
    --steps_for_worker_1=N   worker 1 runs N steps instead (uneven data shards)
    --group_size_for_worker_1=N   worker 1 also all-reduces with collective ops in a group of size N
    --extra_work_for_worker_1=N   worker 1 multiplies N more 256x256 matrices per step (a slower worker)
    --guard                  run the loop under tfplace.cluster_guard()
    --guard_period=S         the guard reads its peers every S seconds (default 0.5)
"""
import argparse
import contextlib
import json
import os
import time

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--steps_for_worker_1", type=int, default=0)
parser.add_argument("--group_size_for_worker_1", type=int, default=0)
parser.add_argument("--extra_work_for_worker_1", type=int, default=0)
parser.add_argument("--guard", action="store_true")
parser.add_argument("--guard_period", type=float, default=0.5)
flags = parser.parse_args()
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    kernel = tf.Variable(tf.ones((4, 2)), name="kernel")
features = tf.data.Dataset.from_tensor_slices((tf.ones((24, 4)), tf.ones((24, 2)))).batch(4).repeat()
batches = iter(strategy.experimental_distribute_dataset(features))


@tf.function
def train_step(iterator):
    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((tf.matmul(x, kernel) - y) ** 2)
            if index == 1 and flags.extra_work_for_worker_1:
                extra = tf.ones((256, 256)) * tf.reduce_mean(x)
                for _ in range(flags.extra_work_for_worker_1):
                    extra = tf.matmul(extra, extra) * 1e-3  # worker 1's extra work
                loss += tf.reduce_sum(extra) * 0.0
        gradient = tf.distribute.get_replica_context().all_reduce("sum", tape.gradient(loss, kernel))
        kernel.assign_sub(0.01 * gradient)
        return loss
    return strategy.run(replica_step, args=next(iterator))


@tf.function
def extra_all_reduce(x):
    from tensorflow.python.ops import collective_ops
    return collective_ops.all_reduce_v2(x, group_size=flags.group_size_for_worker_1 if index == 1 else 2,
                                        group_key=100, instance_key=1)


steps = flags.steps_for_worker_1 if index == 1 and flags.steps_for_worker_1 else flags.steps
if flags.guard:
    import tfplace
with tfplace.cluster_guard(period=flags.guard_period) if flags.guard else contextlib.nullcontext():
    if flags.group_size_for_worker_1:
        extra_all_reduce(tf.ones(4))
    for step in range(steps):
        if step == 1:
            started = time.perf_counter()
        train_step(batches)
per_step = f"; {(time.perf_counter() - started) * 1000 / (steps - 1):.3f} ms per step" if steps > 1 else ""
print(f"worker {index}: done, kernel sum {float(tf.reduce_sum(kernel)):.4f}{per_step}")
