"""(f) TensorFlow guide "Use XLA with tf.function" (https://www.tensorflow.org/xla/tutorials/jit_compile):
a `jit_compile=True` function with a `tf.device("CPU:1")` inside, called under CPU:0
(XLA compiles the function whole, on the device it is called on).
"""
import tensorflow as tf


@tf.function(jit_compile=True)
def dense_step(x, w):
    with tf.device("CPU:1"):
        y = tf.matmul(x, w)
    return tf.nn.relu(y) + 1.0


with tf.device("CPU:0"):
    x = tf.ones((4, 3))
    w = tf.fill((3, 2), 0.5)
    out = dense_step(x, w)
    out = dense_step(x, w)      # cached: no new compilation
print(out.numpy().tolist())
