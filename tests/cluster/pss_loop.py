"""TensorFlow's "Parameter server training with ParameterServerStrategy" tutorial, its custom loop in small:
the chief coordinates, a linear model's kernel (4x2 float32: 32 bytes) and bias (2 float32: 8 bytes) go round
robin to the ps tasks, and each step a `ClusterCoordinator` schedules runs on a worker, reading both.

    --steps=N   steps scheduled (default 4)
    --units=N   the kernel's columns (default 2; 65536 makes it 1 MiB on ps:0 and the bias 256 KiB on ps:1)
"""
import argparse

import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--units", type=int, default=2)
flags = parser.parse_args()

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    kernel = tf.Variable(tf.ones((4, flags.units)), name="kernel")
    bias = tf.Variable(tf.zeros((flags.units,)), name="bias")


def dataset_fn():
    return tf.data.Dataset.from_tensor_slices((tf.ones((16, 4)), tf.ones((16, flags.units)))).batch(4).repeat()


iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))


@tf.function
def train_step(iterator):
    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((tf.matmul(x, kernel) + bias - y) ** 2)
        gradients = tape.gradient(loss, [kernel, bias])
        for variable, gradient in zip((kernel, bias), gradients):
            variable.assign_sub(0.01 * gradient)
        return loss
    return strategy.run(replica_step, args=next(iterator))


for _ in range(flags.steps):
    loss = coordinator.schedule(train_step, args=(iterator,))
coordinator.join()
print(f"loss {float(loss.fetch()):.3f}; kernel on {kernel.device}; bias on {bias.device}", flush=True)
