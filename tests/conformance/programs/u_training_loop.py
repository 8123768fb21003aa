"""(u) Keras guide "Writing a training loop from scratch"
(https://keras.io/guides/writing_a_custom_training_loop_in_tensorflow/): a `tf.function` step with a
`GradientTape`, over a batched `tf.data` pipeline for two epochs (each epoch ends with the
end-of-data `IteratorGetNext` TensorFlow logs).
"""
import numpy as np
import keras
import tensorflow as tf

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(learning_rate=1e-3)
loss_fn = keras.losses.MeanSquaredError()
train_dataset = tf.data.Dataset.from_tensor_slices((np.ones((64, 4), "float32"), np.ones((64, 1), "float32"))).batch(32)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss_value = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss_value, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    return loss_value


for epoch in range(2):
    for step, (x_batch_train, y_batch_train) in enumerate(train_dataset):
        loss_value = train_step(x_batch_train, y_batch_train)
print(float(loss_value) >= 0)
