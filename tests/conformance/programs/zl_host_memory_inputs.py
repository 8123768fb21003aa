"""(zl) Host-memory inputs computed on another device: a kernel's int32 host-memory argument (StridedSlice's
begin, Reshape's shape, Tile's multiples, StatelessRandomNormalV2's shape and algorithm) made on CPU:1 is
copied to the host CPU:0 first, for the op on CPU:1 as for the op on CPU:0; its other host-memory arguments
(StatelessRandomGetKeyCounter's int64 seed, RngReadAndSkip's uint64 delta) and strings are read where they
are. On a GPU the same copies bring shapes computed in device memory to the host.
"""
import tensorflow as tf

x = tf.reshape(tf.range(24.0), (4, 6))
with tf.device("CPU:1"):
    begin = tf.constant([1, 0]) + 0          # int32, computed on CPU:1
    shape = tf.constant([6, 4]) + 0
    multiples = tf.constant([2, 1]) + 0
    seed = tf.constant([1, 2], tf.int64) + 0
    y = x * 1.0
    print(tf.strided_slice(y, begin, [3, 4], [1, 1]).shape)
    print(tf.reshape(y, shape).shape)
    print(tf.tile(y, multiples).shape)
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)
    alg = tf.constant(1) + 0
    print(tf.raw_ops.StatelessRandomNormalV2(shape=tf.constant([2, 2]) + 0, key=key, counter=counter, alg=alg).shape)
    generator = tf.random.Generator.from_seed(1)
    print(generator.normal((2,)).shape)
    print(tf.strings.length(tf.strings.as_string(tf.constant([1, 22]))).numpy())
with tf.device("CPU:0"):
    print(tf.strided_slice(x, begin, [3, 4], [1, 1]).shape)   # the op on the host: its begin copied there too
