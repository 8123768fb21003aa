"""(zg) TensorFlow guide "Distributed input" (https://www.tensorflow.org/tutorials/distribute/input), a
`Dataset.from_generator` pipeline passed through `experimental_distribute_dataset` of a `MirroredStrategy`
over CPU:0 and CPU:1: the strategy's auto-sharding rewrites the input's graph, functions the generator's
init, next and finalize functions included, so each holds a second `FakeSink` (`FakeSink0/_5`).
"""
import numpy as np
import tensorflow as tf


def gen():
    for i in range(8):
        yield np.full((2,), i, "float32")


dataset = tf.data.Dataset.from_generator(gen, output_signature=tf.TensorSpec((2,), tf.float32)).batch(4)
strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
for batch in strategy.experimental_distribute_dataset(dataset):
    print([t.shape.as_list() for t in strategy.experimental_local_results(batch)])
