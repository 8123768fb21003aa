"""An eager loop whose Python is a sleep (a stand-in for I/O or a simulator): not launch-bound, host-bound."""
import time

import tensorflow as tf

w = tf.ones((4, 4))
total = tf.zeros((4, 4))
for i in range(20):
    time.sleep(0.01)  # the loop's Python
    total = total + tf.matmul(w, w)
