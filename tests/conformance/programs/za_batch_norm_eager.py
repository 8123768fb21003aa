"""(za) TensorFlow's "Keras: BatchNormalization" layer called eagerly in inference mode, as a model's
`predict` on one batch would be, then a `tf.function`: with oneDNN on, TensorFlow runs the eager
`FusedBatchNormV3` (tf_keras' fused layer; `tf.compat.v1.nn.fused_batch_norm` below for Keras 3) as a one-op
function and its oneDNN rewrite as another, collected together.
"""
import tensorflow as tf

try:
    import tf_keras as keras  # Keras 2: BatchNormalization(fused=True) runs FusedBatchNormV3
except ImportError:
    import keras

model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3), keras.layers.BatchNormalization(),
                          keras.layers.ReLU()])
x = tf.random.uniform((2, 8, 8, 3), seed=1)
y = model(x, training=False)
normalized, _, _ = tf.compat.v1.nn.fused_batch_norm(y, tf.ones((4,)), tf.zeros((4,)), mean=tf.zeros((4,)),
                                                     variance=tf.ones((4,)), is_training=False)


@tf.function
def double(a):
    return a * 2


print(double(normalized).shape)
