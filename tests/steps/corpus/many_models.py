"""Keras guide "Training & evaluation with the built-in methods", a model per setting: twelve small models, each
fitted for one step from one line. Twelve functions of the same code, each traced once: no loop of one
function, no retracing.

expect: kind= steps=0 advice=
"""
import keras
import numpy as np

x = np.random.rand(32, 4).astype("float32")
y = np.random.rand(32, 1).astype("float32")
models = []
for units in range(1, 13):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(units, activation="relu"), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    models.append(model)
for model in models:
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
