"""TensorFlow tutorial "Save and load a model using a distribution strategy", in small: a model trained under
MirroredStrategy, saved, restored into a new strategy's scope, its predictions read once after training.
The restore's copies into mirrored variables and the reads after training are in no step. Keras' own pipeline
over the arrays under a strategy costs ms per batch, near the input rule's threshold.

expect: kind=keras-fit steps=8 advice= maybe=input-bound
"""
import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

x = np.random.rand(128, 4).astype("float32")
y = np.random.rand(128, 1).astype("float32")
strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
model.fit(x, y, batch_size=32, epochs=2, verbose=0)  # the loop
path = os.path.join(tempfile.mkdtemp(), "model.weights.h5")
model.save_weights(path)
with tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"]).scope():
    restored = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    restored.load_weights(path)
for row in x[:3]:
    print(float(restored(row[None])[0, 0]))
