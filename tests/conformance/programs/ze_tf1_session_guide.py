"""(ze) TensorFlow 1's guide "Using GPUs" (https://github.com/tensorflow/docs/blob/master/site/en/r1/guide/using_gpu.md),
run through `tf.compat.v1` on two logical CPUs standing in for GPUs: its "Manual device placement" graph
(constants `a` and `b` on one device, a `MatMul` on the other) run in a Session three times, then the graph
grown by an `AddN` on the first device and run again (the Session places the whole graph again), and a
placeholder fed at each run (a fed placeholder never runs: it is recorded where TensorFlow's placer puts a
node that asks for an existing device).
"""
import tensorflow as tf

graph = tf.Graph()
with graph.as_default():
    with tf.device("/cpu:0"):
        a = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[2, 3], name="a")
        b = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[3, 2], name="b")
        x = tf.compat.v1.placeholder(tf.float32, shape=[2, 2], name="x")
    with tf.device("/cpu:1"):
        c = tf.matmul(a, b)
        y = tf.matmul(x, c)

with tf.compat.v1.Session(graph=graph) as sess:
    for step in range(3):
        print(sess.run(y, feed_dict={x: [[1.0, float(step)], [0.0, 1.0]]}))
    with graph.as_default():
        with tf.device("/cpu:0"):
            total = tf.add_n([y, c])
    print(sess.run(total, feed_dict={x: [[1.0, 0.0], [0.0, 1.0]]}))
