"""(s) TensorFlow guide "Use a GPU" ("Using multiple GPUs", https://www.tensorflow.org/guide/gpu):
the guide's model built and compiled under `MirroredStrategy` on two logical CPUs, then trained
with `fit` on NumPy arrays (Keras makes the dataset, with tf.data's default rewrites off).
"""
# conformance: silent-policy copies: AddN
import numpy as np
import keras
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
with strategy.scope():
    inputs = keras.layers.Input(shape=(1,))
    predictions = keras.layers.Dense(1)(inputs)
    model = keras.models.Model(inputs=inputs, outputs=predictions)
    model.compile(loss="mse", optimizer=keras.optimizers.SGD(learning_rate=0.2))
x = np.arange(32, dtype="float32").reshape(-1, 1)
model.fit(x, 2 * x, epochs=2, batch_size=8, verbose=0)
