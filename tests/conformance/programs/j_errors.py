"""(j) TensorFlow guide "Introduction to Tensors" (shapes, https://www.tensorflow.org/guide/tensor) and
"tf.data" (consuming iterators to the end, https://www.tensorflow.org/guide/data): an op that
raises (`tf.matmul` of incompatible shapes, caught) and a dataset iterated to its end.
"""
import tensorflow as tf

try:
    tf.matmul(tf.ones((2, 3)), tf.ones((2, 3)))
except tf.errors.InvalidArgumentError as error:
    print("caught", type(error).__name__)

with tf.device("CPU:1"):
    try:
        tf.reshape(tf.range(6), (4, 2))
    except tf.errors.InvalidArgumentError as error:
        print("caught", type(error).__name__)

ds = tf.data.Dataset.from_tensor_slices([1, 2, 3]).map(lambda v: v + 1)
it = iter(ds)
print([int(v) for v in it])
try:
    next(it)
except StopIteration:
    print("exhausted")
