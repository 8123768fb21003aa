"""(p) TensorFlow guide "Distributed input" (https://www.tensorflow.org/tutorials/distribute/input):
a mapped, batched pipeline passed through `experimental_distribute_dataset` and given to Keras
`fit` under `MirroredStrategy`. Auto-sharding rewrites the pipeline's graph when the distributed
dataset is made, and the iterator's optimizations rewrite it again: the map function carries two
sets of `FakeSink` nodes.
"""
# conformance: silent-policy copies: AddN
import numpy as np
import keras
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
features = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
labels = np.ones((64, 1), "float32")
train = tf.data.Dataset.from_tensor_slices((features, labels)).map(lambda x, y: (x * 2.0, y)).batch(16)
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(strategy.experimental_distribute_dataset(train), epochs=2, steps_per_epoch=4, verbose=0)
