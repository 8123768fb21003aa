"""(g) TensorFlow guides "Introduction to Variables" (placing variables on devices,
https://www.tensorflow.org/guide/variable), "Writing a training loop from scratch" with
`tf.GradientTape` (https://www.tensorflow.org/guide/keras/writing_a_training_loop_from_scratch),
"Unicode strings" / tf.strings (https://www.tensorflow.org/text/guide/unicode) and `tf.py_function`
(https://www.tensorflow.org/api_docs/python/tf/py_function).
"""
import numpy as np
import tensorflow as tf

# Data from text: string ops.
lines = tf.constant(["1.0 2.0 3.0", "4.0 5.0 6.0", "-1.0 0.5 2.0", "0.0 1.0 -3.0"])
fields = tf.strings.split(lines)
x = tf.strings.to_number(fields.to_tensor(default_value="0"), out_type=tf.float32)
words = tf.strings.reduce_join(fields, axis=-1, separator=",")
print(words.numpy().tolist())

# A label from Python code.
def label(v):
    return np.asarray(v.numpy().sum(axis=1, keepdims=True) > 0, dtype=np.float32)

y = tf.py_function(label, [x], Tout=tf.float32)

with tf.device("CPU:0"):
    w = tf.Variable(tf.fill((3, 1), 0.1), name="w")
with tf.device("CPU:1"):
    b = tf.Variable(tf.zeros((1,)), name="b")



def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = tf.matmul(x, w) + b
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
    dw, db = tape.gradient(loss, [w, b])
    w.assign_sub(0.1 * dw)
    b.assign_sub(0.1 * db)
    return loss


# Eagerly first, then (the guide's "Speeding-up your training step with tf.function") as a function.
loss = train_step(x, y)
fast_step = tf.function(train_step)
for step in range(2):
    loss = fast_step(x, y)


@tf.function
def labelled(v):
    return tf.py_function(label, [v], Tout=tf.float32)    # a py_function inside a function


print(round(float(loss), 4), labelled(x).numpy().ravel().tolist())
