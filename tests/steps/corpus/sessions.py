"""TensorFlow guide "Migrate to TF2" (TF1.x code run as it is): a graph built once and run by a
`tf.compat.v1.Session` in a loop, then four Sessions of their own, each run once (no loop).

expect: kind=session steps=10 advice=
"""
import tensorflow as tf

tf.compat.v1.disable_eager_execution()
x = tf.compat.v1.placeholder(tf.float32, (64, 64))
y = tf.reduce_sum(tf.matmul(x, x))
feed = {x: [[1.0] * 64] * 64}
with tf.compat.v1.Session() as session:
    for _ in range(10):
        session.run(y, feed)  # the loop
for _ in range(4):
    with tf.compat.v1.Session() as other:
        other.run(y, feed)
