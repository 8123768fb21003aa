"""(zd) TensorFlow guide "Better performance with tf.function"
(https://www.tensorflow.org/guide/function), its "Looping over Python data" section: a `tf.data`
dataset passed to a `tf.function` and iterated there (AutoGraph turns the loop into a `ReduceDataset`),
called three times: each call makes a new iterator, and TensorFlow places the dataset's `map` function
and the loop's body again at every call. Then the "Custom training with tf.distribute.Strategy"
tutorial's distributed dataset iterated inside a `tf.function` called once: the loop makes two iterators
over the same per-device generators, and TensorFlow instantiates each generator's init and finalize
function once per device.
"""
# conformance: silent-policy copies: AddN
import numpy as np
import tensorflow as tf

dataset = tf.data.Dataset.range(6).map(lambda x: x * 2).batch(2)


@tf.function
def total(ds):
    s = tf.constant(0, tf.int64)
    for batch in ds:
        s += tf.reduce_sum(batch)
    return s


for _ in range(3):
    print("total", int(total(dataset)))

strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
features = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
dist_dataset = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(features).batch(8))


@tf.function
def sum_all(dist_dataset):
    result = 0.0
    for batch in dist_dataset:
        result += strategy.reduce("SUM", strategy.run(tf.reduce_sum, args=(batch,)), axis=None)
    return result


print("sum", float(sum_all(dist_dataset)))
