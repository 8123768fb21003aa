"""A custom loop whose steps the user marks with tf.profiler.experimental.Trace."""
import time

import tensorflow as tf

w = tf.Variable(tf.ones((64, 64)))
ds = tf.data.Dataset.range(24).map(lambda i: tf.numpy_function(lambda v: (time.sleep(0.003), v)[1], [i], tf.int64))
ds = ds.map(lambda i: tf.ones((64, 64)) * tf.cast(i, tf.float32))


@tf.function
def step(x):
    w.assign_add(tf.matmul(x, w) * 1e-6)
    return tf.reduce_sum(w)


for number, x in enumerate(ds):
    with tf.profiler.experimental.Trace("train", step_num=number, _r=1):
        loss = step(x)
