"""(e) TensorFlow guides "Introduction to graphs and tf.function" and "Better performance with tf.function"
(https://www.tensorflow.org/guide/intro_to_graphs, https://www.tensorflow.org/guide/function):
`tf.cond` and `tf.while_loop` in a `tf.function`, and AutoGraph's `if`/`while` on tensors.
"""
import tensorflow as tf


@tf.function
def collatz_steps(n):
    def cond(i, n):
        return n > 1

    def body(i, n):
        n = tf.cond(n % 2 == 0, lambda: n // 2, lambda: 3 * n + 1)
        return i + 1, n

    return tf.while_loop(cond, body, [tf.constant(0), n])[0]


@tf.function
def relu_sum(x):
    total = tf.constant(0.0)
    i = tf.constant(0)
    while i < tf.shape(x)[0]:          # AutoGraph: a while_loop
        if x[i] > 0:                   # AutoGraph: a cond
            total += x[i]
        i += 1
    return total


print(int(collatz_steps(tf.constant(27))))
print(int(collatz_steps(tf.constant(6))))   # same signature: no new placement
print(float(relu_sum(tf.constant([1.0, -2.0, 3.0]))))
