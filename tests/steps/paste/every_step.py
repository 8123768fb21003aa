"""A function traced again in every step: a Python number that changes each call."""
import tensorflow as tf

w = tf.Variable(tf.ones((32, 32)))


@tf.function
def step(x, scale):
    w.assign_add(tf.matmul(x, w) * scale)
    return tf.reduce_sum(w)


x = tf.ones((32, 32))
for i in range(12):
    loss = step(x, 1e-6 * i)  # a new Python number each step: a new trace each step
