"""A custom loop that reads its loss in Python every step: Python waits for the step to finish."""
import tensorflow as tf

w = tf.Variable(tf.ones((64, 64)))


@tf.function
def step(x):
    w.assign_add(tf.matmul(x, w) * 1e-6)
    return tf.reduce_sum(w)


x = tf.ones((64, 64))
losses = []
for i in range(20):
    loss = step(x)
    losses.append(float(loss))  # a read of the device's result in every step
