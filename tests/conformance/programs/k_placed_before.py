"""(k) TensorFlow guide "Better performance with tf.function" (tracing and reuse,
https://www.tensorflow.org/guide/function): a function placed before the capture opened, called
again inside it. The harness runs this file twice: first as `__warmup__` before the capture
(its globals carry over), then as `__main__` inside it. Expected: `complete` is False.
"""
# conformance: expect complete=False
import tensorflow as tf

if __name__ == "__warmup__":
    @tf.function
    def scale(x):
        return x * 3.0 + 1.0

    scale(tf.ones((2,)))          # placed now, before the capture

else:
    print(scale(tf.ones((2,))).numpy().tolist())   # defined by the warm-up run
