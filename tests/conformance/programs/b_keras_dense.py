"""(b) Keras guides "The Sequential model" and "Training & evaluation with the built-in methods"
(https://www.tensorflow.org/guide/keras/sequential_model, .../training_with_built_in_methods):
Dense layers with relu, `fit`, `evaluate`, `predict` on small NumPy data (Keras 3).
"""
import numpy as np
import keras

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype("float32")
y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")

model = keras.Sequential([
    keras.Input(shape=(4,)),
    keras.layers.Dense(8, activation="relu"),
    keras.layers.Dense(1, activation="sigmoid"),
])
model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
model.fit(x, y, batch_size=16, epochs=2, verbose=0)
print(model.evaluate(x, y, batch_size=32, verbose=0))
print(model.predict(x[:8], batch_size=8, verbose=0).shape)
