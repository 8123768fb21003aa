"""tensorflow-text's guide "Tokenizing with TF Text": a whitespace tokenizer inside a tf.data pipeline feeding
a small custom loop. The tokenizer's own code is the library's: the steps and any advice name this file's lines.

expect: kind=function steps=6 advice=
needs: tensorflow_text
"""
import tensorflow as tf
import tensorflow_text as text

tokenizer = text.WhitespaceTokenizer()
lines = tf.data.Dataset.from_tensor_slices(["the quick brown fox", "jumps over", "the lazy dog"] * 16)
ids = lines.map(lambda s: tf.strings.to_hash_bucket_fast(tokenizer.tokenize(s), 1000)).padded_batch(8)
embedding = tf.Variable(tf.random.normal((1000, 8)))


@tf.function
def step(batch):
    return tf.reduce_sum(tf.nn.embedding_lookup(embedding, batch))


for batch in ids:
    total = step(batch)  # the loop
print(float(total))
