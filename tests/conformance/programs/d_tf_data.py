"""(d) TensorFlow guide "tf.data: Build TensorFlow input pipelines" (https://www.tensorflow.org/guide/data):
`range().map().filter().batch()`, `Dataset.from_generator`, iterated eagerly, and the
"Iterating over a dataset inside a tf.function" pattern (https://www.tensorflow.org/guide/function).
"""
import itertools

import tensorflow as tf

ds = tf.data.Dataset.range(20).map(lambda x: x * 2).filter(lambda x: x % 3 == 0).batch(4)
print([b.numpy().tolist() for b in ds])


def count(stop):
    i = 0
    while i < stop:
        yield i
        i += 1


gen = tf.data.Dataset.from_generator(count, args=[5], output_types=tf.int32, output_shapes=())
print([int(v) for v in gen.repeat(2)])

gen2 = tf.data.Dataset.from_generator(lambda: itertools.islice(itertools.count(), 3),
                                      output_signature=tf.TensorSpec(shape=(), dtype=tf.int64))
print([int(v) for v in gen2])


@tf.function
def total(dataset):
    s = tf.constant(0, dtype=tf.int64)
    for batch in dataset:
        s += tf.reduce_sum(batch)
    return s


print(int(total(ds)))

# Generator datasets interleaved sequentially (no num_parallel_calls): TensorFlow instantiates the
# generator's functions on the iterating thread, the same number of times on every run.
seq = tf.data.Dataset.range(1, 4).interleave(
    lambda n: tf.data.Dataset.from_generator(count, args=[n], output_types=tf.int32, output_shapes=()), cycle_length=2)
print([int(v) for v in seq])
