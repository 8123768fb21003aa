"""A custom loop whose Python between steps (bookkeeping the user wrote) costs more than the step itself."""
import tensorflow as tf

w = tf.Variable(tf.ones((64, 64)))


@tf.function
def step(x):
    w.assign_add(tf.matmul(x, w) * 1e-6)
    return tf.reduce_sum(w)


def bookkeeping(i):
    return sum(k * k for k in range(300_000 + i))  # pure Python, about 20 ms


x = tf.ones((64, 64))
for i in range(16):
    loss = step(x)
    bookkeeping(i)
