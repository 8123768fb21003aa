"""(zi) A `Dataset.map` whose function branches with `tf.cond` and makes a `RaggedTensor` with validation (its
`AssertGuard`s), as tensorflow-text's tokenizers do inside a map: tf.data's rewrite leaves a `FakeSink` per
result in every function of the dataset's library, the branch functions included, which TensorFlow inlines
where it instantiates the map function.
"""
import tensorflow as tf


def clip(x):
    return tf.cond(x > 2, lambda: x * 2, lambda: x - 1)


def ragged(x):
    return tf.RaggedTensor.from_row_lengths(tf.range(x), [x], validate=True).flat_values


for value in tf.data.Dataset.range(4).map(clip):
    print(int(value))
for values in tf.data.Dataset.range(1, 3).map(ragged):
    print(values.numpy().tolist())
