"""(y) TensorFlow guide "Introduction to Variables" (https://www.tensorflow.org/guide/variable), its cells
that hand variables to ops as arguments (`tf.multiply(v, v)`, `c * v`, `v * v`: TensorFlow's eager fast
path reads them in C++) and its "Placing variables and tensors" cells (a variable on CPU:0 read by an op
placed on CPU:1).
"""
import tensorflow as tf

my_tensor = tf.constant([[1.0, 2.0], [3.0, 4.0]])
my_variable = tf.Variable(my_tensor)
bool_variable = tf.Variable([False, False, False, True])

print("A variable:", my_variable)
print("Viewed as a tensor:", tf.convert_to_tensor(my_variable))
print("Index of highest value:", tf.math.argmax(my_variable))
print("Squared:", tf.multiply(my_variable, my_variable))
c = tf.constant(2.0)
print("Scaled:", c * my_variable)
print("Its own product:", my_variable * my_variable)
print("Logical not:", tf.logical_not(bool_variable))

a = tf.Variable([2.0, 3.0])
b = tf.Variable(a)  # a new variable, initialised from a's value
a.assign([5, 6])
print(a.numpy(), b.numpy())
print(a.assign_add([2, 3]).numpy())

with tf.device("CPU:0"):
    x = tf.Variable([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    y = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
with tf.device("CPU:1"):
    k = tf.matmul(x, y)  # x is read where it lives, the product made on CPU:1
    z = x * 2.0
print(k.numpy(), z.numpy())
