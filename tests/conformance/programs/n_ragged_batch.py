"""(n) TensorFlow guide "Ragged tensors" (https://www.tensorflow.org/guide/ragged_tensor, "Datasets
with variable-length elements"): elements of different lengths batched with `ragged_batch`, which
encodes each element with a map function it keeps to itself.
"""
import tensorflow as tf

lengths = tf.data.Dataset.range(1, 7)
features = lengths.map(lambda n: tf.range(n))
for batch in features.ragged_batch(2):
    print(batch.to_list())

words = tf.data.Dataset.from_tensor_slices(["a b", "c", "d e f"]).map(tf.strings.split)
print([b.to_list() for b in words.ragged_batch(3)])
