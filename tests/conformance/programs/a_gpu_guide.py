"""(a) TensorFlow guide "Use a GPU" (https://www.tensorflow.org/guide/gpu), its cells on 2 logical CPUs.

CPU:0 and CPU:1 stand in for GPU:0 and GPU:1. Cells: "Logging device placement",
"Manual device placement", "Using a single GPU on a multi-GPU system" (soft
placement of a device that does not exist), an explicit and an implicit copy across
devices (an identity is explicit under a device scope only), and "Using multiple GPUs" / manual replication with
`tf.add_n` on CPU:0.
"""
import tensorflow as tf

# Logging device placement
a = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
b = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
c = tf.matmul(a, b)

# Manual device placement
with tf.device("/CPU:0"):
    a = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
c = tf.matmul(a, b)

# Using a single GPU on a multi-GPU system: a device that does not exist, soft placement.
tf.config.set_soft_device_placement(True)
with tf.device("/device:GPU:2"):
    a = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    c = tf.matmul(a, b)

# A copy across devices: explicit (identity under a device), then implicit (an op reading CPU:0 data on CPU:1).
with tf.device("/CPU:1"):
    a1 = tf.identity(a)
    d = tf.matmul(a1, b)          # b lives on CPU:0: an implicit copy of input #1
e = tf.identity(d)                # no device scope: it runs on CPU:0, reading d from CPU:1 (implicit)

# Manual replication
cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
assert len(cpus) == 2, cpus
parts = []
for name in cpus:
    with tf.device(name):
        a = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        b = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
        parts.append(tf.matmul(a, b))
with tf.device("/CPU:0"):
    matmul_sum = tf.add_n(parts)
print(matmul_sum.numpy().tolist())
