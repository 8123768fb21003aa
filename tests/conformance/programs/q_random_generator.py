"""(q) TensorFlow guide "Random number generation"
(https://www.tensorflow.org/guide/random_numbers, "Creating generators under a distribution
strategy"): a `tf.random.Generator` made on CPU:0 and drawn from under `tf.device("CPU:1")`, and
one made under `MirroredStrategy` drawn from in each replica.
"""
import tensorflow as tf

with tf.device("CPU:0"):
    g = tf.random.Generator.from_seed(1)
with tf.device("CPU:1"):
    print(g.normal([]).shape, g.uniform([2, 2]).shape)

strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
with strategy.scope():
    replica_generator = tf.random.Generator.from_seed(1)


def draw():
    ctx = tf.distribute.get_replica_context()
    return replica_generator.normal([]) + tf.cast(ctx.replica_id_in_sync_group, tf.float32)


print(strategy.experimental_local_results(strategy.run(draw)))
