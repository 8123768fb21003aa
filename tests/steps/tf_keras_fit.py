"""tf_keras fit (it marks its steps for TensorFlow's profiler) over a slow map."""
import os
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
import tf_keras


def slow(x, y):
    time.sleep(0.004)
    return x, y


x = np.random.rand(256, 8).astype("float32")
y = np.random.rand(256, 1).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y))
ds = ds.map(lambda a, b: tf.numpy_function(slow, [a, b], [tf.float32, tf.float32]))
ds = ds.map(lambda a, b: (tf.ensure_shape(a, [8]), tf.ensure_shape(b, [1]))).batch(32)
model = tf_keras.Sequential([tf_keras.Input((8,)), tf_keras.layers.Dense(16, activation="relu"),
                             tf_keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(ds, epochs=2, verbose=0)
