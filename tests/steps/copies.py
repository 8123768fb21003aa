"""A function on CPU:1 that reads a tensor made on CPU:0 in every step: an implicit copy per step."""
import tensorflow as tf

w = tf.Variable(tf.ones((64, 64)))


@tf.function
def step(x):
    with tf.device("/CPU:1"):
        return tf.reduce_sum(tf.matmul(x, w))


for i in range(20):
    with tf.device("/CPU:0"):
        x = tf.ones((64, 64)) * float(i)  # made on CPU:0 every step
    loss = step(x)
