"""(zh) tensorflow-text's tokenizers (its own C++ ops, whose Python wrappers `tf.load_op_library` makes) as its
guide "Tokenizing with TF Text" uses them, and the conversions such code makes: a Python list made a uint8 or
bfloat16 tensor (TensorFlow's C++ casts it on the host first, as `FastWordpieceTokenizer` does with its model
buffer), a variable's int8 initial value. Without tensorflow-text (it asks for `tensorflow`: beside
`tensorflow-cpu` install it with `--no-deps`), the conversions alone.
"""
import tensorflow as tf

try:
    import tensorflow_text as text
except ImportError:
    text = None

mask = tf.constant([1, 0, 1], dtype=tf.uint8)
with tf.device("/CPU:1"):
    half = tf.constant([0.5, 1.5], dtype=tf.bfloat16)
    doubled = tf.cast(half, tf.float32) * 2.0
counts = tf.Variable([1, 2], dtype=tf.int8)
if text is not None:
    tokens = text.WhitespaceTokenizer().tokenize(["What you know you can't explain", "but you feel it"])
    wordpiece = text.FastWordpieceTokenizer(vocab=["they", "##'", "##re", "the", "great", "##est", "[UNK]"],
                                            token_out_type=tf.string)
    pieces = wordpiece.tokenize(["they're the greatest"])
    print(tokens.to_list(), pieces.to_list())
print(mask.numpy().tolist(), doubled.numpy().tolist(), counts.numpy().tolist())
