"""MirroredStrategy on two devices, one replica doing extra work every step."""
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy(["/CPU:0", "/CPU:1"])
with strategy.scope():
    w = tf.Variable(tf.ones((128, 128)) * 1e-3)


@tf.function(autograph=False)  # the lines of its nodes are this file's (autograph would name its own copy)
def step():
    def replica():
        ctx = tf.distribute.get_replica_context()
        x = tf.ones((128, 128))
        y = tf.matmul(x, w)
        if tf.get_static_value(ctx.replica_id_in_sync_group) == 1:  # a Python branch: replica 1 works more
            for _ in range(40):
                y = tf.matmul(y, w)
        return tf.reduce_sum(y)
    return strategy.run(replica)


for i in range(12):
    step()
