"""(l) TensorFlow guide "Distributed training with TensorFlow" (https://www.tensorflow.org/guide/distributed_training)
and the `tf.distribute.ReplicaContext.all_reduce` API docs: a `MirroredStrategy` over CPU:0 and
CPU:1 whose replicas all-reduce with collective ops (`CollectiveReduceV2`, launched eagerly on a
thread pool TensorFlow starts), outside a `tf.function`.
"""
# conformance: threads interleave
import tensorflow as tf
from tensorflow.python.distribute import cross_device_ops

devices = ["/device:CPU:0", "/device:CPU:1"]
collectives = cross_device_ops.CollectiveAllReduce(devices, 2, tf.distribute.experimental.CommunicationOptions())
strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=collectives)
with strategy.scope():
    v = tf.Variable(1.0)


def step():
    return tf.distribute.get_replica_context().all_reduce("SUM", v * 2.0)


print([float(t) for t in strategy.experimental_local_results(strategy.run(step))])
