"""An eager loop whose body is a function of the user's: tiny ops launched one by one in every iteration."""
import tensorflow as tf

w = tf.ones((4, 4))


def body(total):
    a = tf.matmul(w, w)
    return total + a * 0.5


total = tf.zeros((4, 4))
for i in range(60):
    total = body(total)
print(float(tf.reduce_sum(total)))
