"""(o) TensorFlow tutorial "Distributed training with Keras"
(https://www.tensorflow.org/tutorials/distribute/keras) on two logical CPUs: a model built and
compiled under `MirroredStrategy`, trained with `fit` on a batched `tf.data` pipeline, then
evaluated.
"""
# conformance: silent-policy copies: AddN
import numpy as np
import keras
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
features = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
labels = np.ones((64, 1), "float32")
train = tf.data.Dataset.from_tensor_slices((features, labels)).batch(16)
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(train, epochs=2, verbose=0)
print(model.evaluate(train, verbose=0) >= 0)
