"""(zj) A dataset mapped and reduced inside a `tf.function` under `tf.device("/CPU:1")`, and in each replica of a
`MirroredStrategy` step, as TensorFlow Recommenders' `FactorizedTopK` metric does: TensorFlow instantiates the
map function on the `ReduceDataset`'s device and the reduce function on the host.
"""
import tensorflow as tf


@tf.function
def total(n):
    ds = tf.data.Dataset.range(n).map(lambda x: x * 2)
    return ds.reduce(tf.constant(0, tf.int64), lambda state, x: state + x)


with tf.device("/CPU:1"):
    print(int(total(tf.constant(4, tf.int64))))

strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])


@tf.function
def step():
    def replica():
        ds = tf.data.Dataset.range(3).map(lambda x: x + 1)
        return ds.reduce(tf.constant(0, tf.int64), lambda state, x: state + x)
    return strategy.run(replica)


print(strategy.experimental_local_results(step()))
