"""TensorFlow guide "Introduction to tensors" and "Introduction to graphs", in small: ops, one function called
once from each of two lines, one prediction. Nothing repeats: no steps, no advice.

expect: kind= steps=0 advice=
"""
import keras
import tensorflow as tf

a = tf.constant([[1.0, 2.0], [3.0, 4.0]])
b = tf.ones((2, 2))
print(tf.add(a, b), tf.multiply(a, b), tf.matmul(a, b))


@tf.function
def dense(x, w):
    return tf.nn.relu(tf.matmul(x, w))


print(dense(a, b))
print(dense(b, a))
model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
print(model.predict(a, verbose=0).shape)
