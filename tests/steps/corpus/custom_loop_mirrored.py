"""TensorFlow tutorial "Custom training with tf.distribute.Strategy": a MirroredStrategy custom loop over a
distributed dataset, the loss summed on the device and read once per epoch, as the tutorial does.

expect: kind=function steps=16 advice=
"""
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
GLOBAL_BATCH = 16
features = np.random.rand(128, 8).astype("float32")
labels = np.random.rand(128, 1).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(GLOBAL_BATCH).prefetch(2)
dist_dataset = strategy.experimental_distribute_dataset(dataset)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.01)


def step_fn(inputs):
    x, y = inputs
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(tf.reduce_sum(tf.square(model(x) - y), axis=1),
                                          global_batch_size=GLOBAL_BATCH)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss


@tf.function
def train_step(inputs):
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step_fn, args=(inputs,)), axis=None)


for epoch in range(2):
    total = 0.0
    for batch in dist_dataset:
        total += train_step(batch)  # the loop
    print(f"epoch {epoch}: {float(total):.4f}")
