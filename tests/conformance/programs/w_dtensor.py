"""(w) TensorFlow guides "DTensor concepts" (https://www.tensorflow.org/guide/dtensor_overview) and
"Distributed training with DTensors" (https://www.tensorflow.org/tutorials/distribute/dtensor_ml_tutorial),
shrunk: a 1-D mesh over CPU:0 and CPU:1, tensors made with a layout (`call_with_layout`), packed
from per-device components and unpacked, a matmul of a sharded and a replicated tensor, a relayout, and
`DVariable`s trained by a `tf.function` step with a batch-sharded input, called twice. DTensor runs every
op and the step on its device (`/device:CUSTOM:0`) as one function per mesh device, on its own threads.
"""
# conformance: threads interleave
import tensorflow as tf
from tensorflow.experimental import dtensor

mesh = dtensor.create_mesh([("batch", 2)], devices=["CPU:0", "CPU:1"])
replicated = dtensor.Layout.replicated(mesh, rank=2)
sharded = dtensor.Layout.batch_sharded(mesh, "batch", rank=2)

a = dtensor.call_with_layout(tf.ones, sharded, shape=(4, 3))
b = dtensor.call_with_layout(tf.fill, replicated, dims=(3, 2), value=0.5)
c = tf.matmul(a, b)
print("matmul", dtensor.fetch_layout(c).sharding_specs, [t.shape.as_list() for t in dtensor.unpack(c)])
print("relayout", dtensor.fetch_layout(dtensor.relayout(c, dtensor.Layout.replicated(mesh, rank=2))).sharding_specs)

w = dtensor.DVariable(dtensor.call_with_layout(tf.zeros, replicated, shape=(3, 1)))
bias = dtensor.DVariable(dtensor.call_with_layout(tf.zeros, dtensor.Layout.replicated(mesh, rank=1), shape=(1,)))


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + bias - y))
    grad_w, grad_b = tape.gradient(loss, [w, bias])
    w.assign_sub(0.1 * grad_w)
    bias.assign_sub(0.1 * grad_b)
    return loss


for step in range(2):
    x = dtensor.pack([tf.fill((2, 3), float(step)), tf.fill((2, 3), 1.0)], sharded)
    y = dtensor.pack([tf.ones((2, 1)), tf.zeros((2, 1))], sharded)
    print("step", step, "loss", float(dtensor.unpack(train_step(x, y))[0]))
