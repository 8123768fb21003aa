"""Keras 3 fit over a pipeline whose map calls slow Python per element: no parallel calls, no prefetch."""
import time

import keras
import numpy as np
import tensorflow as tf


def slow(x, y):
    time.sleep(0.004)
    return x, y


x = np.random.rand(256, 8).astype("float32")
y = np.random.rand(256, 1).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y))
ds = ds.map(lambda a, b: tf.numpy_function(slow, [a, b], [tf.float32, tf.float32]))  # the slow stage
ds = ds.map(lambda a, b: (tf.ensure_shape(a, [8]), tf.ensure_shape(b, [1]))).batch(32)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(ds, epochs=2, verbose=0)
