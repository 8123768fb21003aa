"""(m) TensorFlow guide "Better performance with the tf.data API" (caching,
https://www.tensorflow.org/guide/data_performance#caching): a mapped dataset cached in memory and
iterated for several epochs. TensorFlow instantiates the map function while the cache fills, on
the first epoch only; later epochs read the cache.
"""
import tensorflow as tf


def mapped_function(s):
    return tf.math.square(s) + 1


dataset = tf.data.Dataset.range(5).map(mapped_function).cache()
for epoch in range(3):
    print(epoch, [int(v) for v in dataset])

# A second cached pipeline whose first pass stops early: its cache is not filled, and the next
# iterator instantiates the map function again.
partial = tf.data.Dataset.range(5).map(lambda x: x * 3).cache()
first = iter(partial)
print(int(next(first)))
print([int(v) for v in partial])
