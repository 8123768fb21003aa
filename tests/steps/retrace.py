"""A function retraced every few steps: a Python number that changes."""
import tensorflow as tf

w = tf.Variable(tf.ones((32, 32)))


@tf.function
def step(x, scale):
    w.assign_add(tf.matmul(x, w) * scale)
    return tf.reduce_sum(w)


x = tf.ones((32, 32))
for i in range(24):
    loss = step(x, 1e-6 * (i // 4))  # retraced whenever the Python number changes
