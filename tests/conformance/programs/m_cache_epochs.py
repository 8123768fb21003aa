"""(m) TensorFlow guide "Better performance with the tf.data API" (caching,
https://www.tensorflow.org/guide/data_performance#caching): a mapped dataset cached in memory and
iterated for several epochs. TensorFlow instantiates the map function while the cache fills, on
the first epoch only; later epochs read the cache. Then a cache under take(), one filled by
counting, and Keras fit over a cached pipeline.
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

# A cache under take(): read to the end, take() stops after 2 elements and the cache's input is never
# read to its end, so the cache does not fill: every pass instantiates the map function again.
taken = tf.data.Dataset.range(5).map(lambda x: x - 1).cache().take(2)
for epoch in range(2):
    print([int(v) for v in taken])

# An iterator that delivers as many elements as its dataset holds fills the cache without reaching
# the end of its data (TensorFlow completes a cache that read as many elements as its input holds).
counted = tf.data.Dataset.range(4).map(lambda x: x + 7).cache()
size = int(counted.cardinality())
iterator = iter(counted)
print([int(next(iterator)) for _ in range(size)])
print([int(v) for v in counted])

# Keras fit over a cached pipeline (the guide's `.cache()` before `.batch()`): Keras steps by the
# dataset's cardinality, never reading the end of an epoch's data; the first epoch fills the cache.
import keras  # noqa: E402


def features(i):
    return tf.cast(tf.fill([4], i), tf.float32), tf.cast(i % 2, tf.float32)


batches = tf.data.Dataset.range(64).map(features).cache().batch(16)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(batches, epochs=3, verbose=0)
