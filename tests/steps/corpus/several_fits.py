"""Keras guide "The Sequential model", transfer-learning style: one model fitted, a second fitted longer, then
the first evaluated. One `Steps` is one loop: the second model's `fit`, the longest training.

expect: kind=keras-fit steps=12 advice=
"""
import keras
import numpy as np

x = np.random.rand(192, 8).astype("float32")
y = np.random.rand(192, 1).astype("float32")


def make():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


first, second = make(), make()
first.fit(x, y, batch_size=64, epochs=1, verbose=0)
second.fit(x, y, batch_size=64, epochs=4, verbose=0)  # the loop
first.evaluate(x, y, batch_size=8, verbose=0)
