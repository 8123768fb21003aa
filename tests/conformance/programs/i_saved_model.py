"""(i) TensorFlow guide "Using the SavedModel format" (https://www.tensorflow.org/guide/saved_model):
a `tf.Module` with a `tf.function`, `tf.saved_model.save` to a temporary directory,
`tf.saved_model.load`, and a call of the loaded function.
"""
import tempfile

import tensorflow as tf


class CustomModule(tf.Module):
    def __init__(self):
        super().__init__()
        self.v = tf.Variable(1.0)

    @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
    def __call__(self, x):
        return x * self.v

    @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
    def mutate(self, new_v):
        self.v.assign(new_v)


module = CustomModule()
print(float(module(tf.constant(2.0))))
with tempfile.TemporaryDirectory() as path:
    tf.saved_model.save(module, path)
    loaded = tf.saved_model.load(path)
    loaded.mutate(tf.constant(3.0))
    print(float(loaded(tf.constant(4.0))))
