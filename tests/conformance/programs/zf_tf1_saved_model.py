"""(zf) TensorFlow guide "Migrate the SavedModel workflow" (https://www.tensorflow.org/guide/migrate/saved_model),
its TF1 half, shrunk: a graph with a variable saved by `tf.compat.v1.saved_model.Builder` and by a `Saver`,
then loaded into new graphs with `tf.compat.v1.saved_model.load` and `import_meta_graph` + `restore`, and
served by `Session.run` (the loaders run their restore ops in the Session too).
"""
# conformance: expect complete=False
import os
import tempfile

import tensorflow as tf

tf1 = tf.compat.v1
work = tempfile.mkdtemp()

graph = tf.Graph()
with graph.as_default():
    x = tf1.placeholder(tf.float32, shape=(None, 3), name="x")
    w = tf1.get_variable("w", initializer=tf.constant([[1.0], [2.0], [3.0]]))
    y = tf.identity(tf.matmul(x, w) + 0.5, name="y")
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        print("served", sess.run(y, feed_dict={x: [[1.0, 1.0, 1.0]]}).tolist())
        builder = tf1.saved_model.Builder(os.path.join(work, "saved"))
        signature = tf1.saved_model.predict_signature_def(inputs={"x": x}, outputs={"y": y})
        builder.add_meta_graph_and_variables(sess, tags=[tf1.saved_model.tag_constants.SERVING],
                                             signature_def_map={"serving_default": signature})
        builder.save()
        tf1.train.Saver().save(sess, os.path.join(work, "ckpt", "model"))

with tf.Graph().as_default() as loaded, tf1.Session() as sess:
    meta = tf1.saved_model.load(sess, [tf1.saved_model.tag_constants.SERVING], os.path.join(work, "saved"))
    outputs = meta.signature_def["serving_default"].outputs["y"].name
    print("loaded", sess.run(outputs, feed_dict={"x:0": [[0.0, 1.0, 0.0]]}).tolist())

with tf.Graph().as_default(), tf1.Session() as sess:
    saver = tf1.train.import_meta_graph(os.path.join(work, "ckpt", "model.meta"))
    saver.restore(sess, os.path.join(work, "ckpt", "model"))
    print("restored", sess.run("y:0", feed_dict={"x:0": [[0.0, 0.0, 1.0]]}).tolist())
