"""(x) TensorFlow tutorial "Custom training with tf.distribute.Strategy"
(https://www.tensorflow.org/tutorials/distribute/custom_training), its "iterating inside a tf.function"
section, shrunk: a `MirroredStrategy` over CPU:0 and CPU:1 whose distributed dataset is iterated by a
`for` loop inside the `tf.function` that runs the steps.
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
        loss = tf.nn.compute_average_loss(tf.reduce_sum(tf.square(tf.matmul(x, w) - y), axis=1),
                                          global_batch_size=GLOBAL_BATCH)
    w.assign_sub(0.05 * tape.gradient(loss, w))
    return loss


@tf.function
def train_epoch(dist_dataset):
    total = 0.0
    for batch in dist_dataset:
        total += strategy.reduce("SUM", strategy.run(step_fn, args=(batch,)), axis=None)
    return total


for epoch in range(2):
    print("epoch", epoch, "loss", float(train_epoch(dist_dataset)))
