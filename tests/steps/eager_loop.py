"""An eager loop of tiny ops."""
import tensorflow as tf

w = tf.ones((4, 4))
total = tf.zeros((4, 4))
for i in range(60):
    a = tf.matmul(w, w)  # the loop's first line
    total = total + a * 0.5
