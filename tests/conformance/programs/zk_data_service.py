"""(zk) TensorFlow's "tf.data service" guide in small: a dispatcher and a worker in this process, a dataset
distributed through them (`service.distribute`) and read back by its id (`from_dataset_id`), each iterated
twice. A dataset read through the service is a `DataServiceDatasetV4`, whose `uncompress_fn` every iterator
instantiates on its device (before TensorFlow 2.18 the dataset keeps that function nowhere: the log says so).
"""
# conformance: expect complete=False before TensorFlow 2.18
import tensorflow as tf

dispatcher = tf.data.experimental.service.DispatchServer()
worker = tf.data.experimental.service.WorkerServer(
    tf.data.experimental.service.WorkerConfig(dispatcher_address=dispatcher.target.split("://")[1]))
dataset = tf.data.Dataset.range(4).map(lambda x: x * 2)
distributed = dataset.apply(tf.data.experimental.service.distribute(
    processing_mode="parallel_epochs", service=dispatcher.target))
for _ in range(2):
    print(sorted(int(v) for v in distributed))
dataset_id = tf.data.experimental.service.register_dataset(dispatcher.target, dataset)
by_id = tf.data.experimental.service.from_dataset_id(processing_mode="parallel_epochs", service=dispatcher.target,
                                                     dataset_id=dataset_id, element_spec=dataset.element_spec)
for _ in range(2):
    print(sorted(int(v) for v in by_id))
