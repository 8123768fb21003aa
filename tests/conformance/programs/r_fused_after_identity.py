"""(r) TensorFlow guide "Introduction to graphs and tf.function" with the "Use a GPU" guide's
manual placement: inside a `tf.function`, an identity of the argument stays on CPU:0 while a
Dense computation (`MatMul`, `BiasAdd`, `Relu`, fused by Grappler into one kernel) runs under
`tf.device("CPU:1")`; Grappler then removes the identity.
"""
import tensorflow as tf

w, b = tf.ones((4, 4)), tf.ones((4,))


@tf.function
def outer2(x):
    xi = tf.identity(x)
    with tf.device("CPU:1"):
        return tf.nn.relu(tf.nn.bias_add(tf.matmul(xi, w), b))


print(outer2(tf.ones((4, 4))).numpy().sum())
