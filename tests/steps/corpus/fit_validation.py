"""Keras guide "Training & evaluation with the built-in methods": `fit` with `validation_data`. (Keras' own
pipeline over the arrays competes for the CPU with the steps: on a loaded 2-core machine its waits cross the
input-bound threshold, where a quiet one stays under it.)

expect: kind=keras-fit steps=8 advice= maybe=input-bound
"""
import keras
import numpy as np

x = np.random.rand(256, 16).astype("float32")
y = np.random.rand(256, 1).astype("float32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(x[:128], y[:128], batch_size=32, epochs=2, validation_data=(x[128:], y[128:]), verbose=0)  # the loop
