"""(zb) Functions TensorFlow does not inline, as tf_keras' GRU and LSTM layers call their implementations: a
`tf.function` with `experimental_attributes={"_noinline": True}` (a loop inside, and a node asking for CPU:1),
another with `experimental_implements`, called from a training step under a `GradientTape`. TensorFlow places
each called function on its own when its call node first runs.
"""
import tensorflow as tf


@tf.function(experimental_attributes={"_noinline": True})
def cell(x, w):
    def body(i, h):
        return i + 1, tf.tanh(tf.matmul(h, w))

    _, h = tf.while_loop(lambda i, h: i < 3, body, (tf.constant(0), x))
    with tf.device("CPU:1"):
        scaled = h * 2.0
    return scaled


@tf.function(experimental_implements="tfplace.test.affine")
def affine(x, w):
    return tf.matmul(x, w) + 1.0


w = tf.Variable(tf.ones((4, 4)) * 0.1)


@tf.function
def step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(cell(x, w) + affine(x, w))
    grad = tape.gradient(loss, w)
    w.assign_sub(0.01 * grad)
    return loss


print(float(step(tf.ones((2, 4)))))  # one call: TensorFlow's partitions of a called function are read once
