"""(h) TensorFlow tutorial "Custom training with tf.distribute.Strategy"
(https://www.tensorflow.org/tutorials/distribute/custom_training), shrunk: a
`MirroredStrategy` over CPU:0 and CPU:1, `strategy.run` and `strategy.reduce` in a custom loop.
"""
# conformance: silent-policy copies: AddN
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
GLOBAL_BATCH = 8

rng = np.random.default_rng(0)
features = rng.normal(size=(32, 3)).astype("float32")
targets = features @ np.array([[1.0], [-2.0], [0.5]], dtype="float32")
dataset = tf.data.Dataset.from_tensor_slices((features, targets)).batch(GLOBAL_BATCH)
dist_dataset = strategy.experimental_distribute_dataset(dataset)

with strategy.scope():
    w = tf.Variable(tf.zeros((3, 1)), aggregation=tf.VariableAggregation.MEAN, name="w")


def step_fn(inputs):
    x, y = inputs
    with tf.GradientTape() as tape:
        per_example = tf.reduce_sum(tf.square(tf.matmul(x, w) - y), axis=1)
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
    grad = tape.gradient(loss, w)
    w.assign_sub(0.05 * grad)
    return loss


@tf.function
def train_step(inputs):
    per_replica = strategy.run(step_fn, args=(inputs,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


for epoch in range(2):
    total = 0.0
    for batch in dist_dataset:
        total += train_step(batch)  # as the tutorial sums the loss: on the device, read once per epoch
print(round(float(total), 4))

# strategy.run outside a tf.function: the replicas run in threads MirroredStrategy starts.
batch = next(iter(dist_dataset))
per_replica_loss = strategy.run(step_fn, args=(batch,))
print(round(float(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_loss, axis=None)), 4))
