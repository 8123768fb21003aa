"""(z) TensorFlow guide "tf.data: Build TensorFlow input pipelines"
(https://www.tensorflow.org/guide/data), its "Preprocessing data" section, on two logical CPUs: a
`map` whose function places part of its work with `tf.device` (as a pipeline does to keep a step
beside the model), a `filter` on the other device, and the same pipeline iterated twice (each
iterator instantiates the functions again), then prefetched to CPU:1 (`prefetch_to_device`, from the
"Better performance with tf.data" guide): the copy's generator makes the pipeline's iterator on its
source device, CPU:0, and its functions are instantiated there.
"""
import tensorflow as tf


def scale(x):
    x = tf.cast(x, tf.float32)
    with tf.device("/CPU:1"):
        y = x * 2.0 + 1.0
    return tf.stack([y, x])


def keep(v):
    with tf.device("/CPU:1"):
        return v[0] > 2.0


pipeline = tf.data.Dataset.range(6).map(scale).filter(keep).batch(2)
for epoch in range(2):
    print("epoch", epoch, [batch.numpy().tolist() for batch in pipeline])
prefetched = pipeline.apply(tf.data.experimental.prefetch_to_device("/CPU:1"))
print([batch.device for batch in prefetched])
