"""(c) TensorFlow tutorial "Convolutional Neural Network (CNN)" (https://www.tensorflow.org/tutorials/images/cnn),
shrunk: Conv2D + Flatten + Dense, `fit` for one epoch on small NumPy images (Keras 3), then one
eager call of the model.
"""
import numpy as np
import keras

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
images = rng.uniform(size=(32, 8, 8, 1)).astype("float32")
labels = rng.integers(0, 3, size=(32,)).astype("int32")

model = keras.Sequential([
    keras.Input(shape=(8, 8, 1)),
    keras.layers.Conv2D(4, (3, 3), activation="relu"),
    keras.layers.Flatten(),
    keras.layers.Dense(3),
])
model.compile(optimizer="adam",
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
history = model.fit(images, labels, batch_size=16, epochs=1, verbose=0)
print(sorted(history.history))
# Calling the model directly runs its layers eagerly (Conv2D, BiasAdd, Relu, MatMul as eager ops).
print(model(images[:2], training=False).shape)
