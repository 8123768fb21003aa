"""(zc) TensorFlow's "Text generation with an RNN" tutorial in small: a GRU and an LSTM layer trained for a few
steps with `fit` and used with `predict`. Under tf_keras (Keras 2), the layers call their CPU and GPU implementations
as functions TensorFlow does not inline (`api_implements`), with their gradients; under Keras 3 they run as
loops in the step function.
"""
import numpy as np

try:
    import tf_keras as keras
except ImportError:
    import keras

vocab, length = 20, 6
model = keras.Sequential([keras.Input((length,)), keras.layers.Embedding(vocab, 8),
                          keras.layers.GRU(8, return_sequences=True), keras.layers.LSTM(8), keras.layers.Dense(vocab)])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x = np.random.default_rng(0).integers(0, vocab, (16, length))
y = np.random.default_rng(1).integers(0, vocab, (16,))
model.fit(x, y, batch_size=8, epochs=1, verbose=0)
print(model.predict(x[:2], verbose=0).shape)
