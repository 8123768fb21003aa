"""TensorFlow guide "Better performance with the tf.data API": the naive pipeline, a generator that reads each
sample slowly and a map whose work (a `tf.py_function` sleeping, standing in for parsing) runs one element at a
time, consumed by a training step that computes little: the steps wait for input.

expect: kind=function steps=12 advice=input-bound
"""
import time

import tensorflow as tf


def samples():
    for index in range(48):
        time.sleep(0.002)  # reading the sample
        yield (index,)


def parse(sample):
    tf.py_function(lambda: time.sleep(0.01), [], ())  # parsing it
    return tf.cast(sample, tf.float32)


dataset = tf.data.Dataset.from_generator(samples, output_signature=tf.TensorSpec((1,), tf.int64))
dataset = dataset.map(parse).batch(4)
w = tf.Variable(tf.ones((1, 1)))


@tf.function
def train_step(batch):
    w.assign_add(tf.reduce_mean(tf.matmul(batch, w), keepdims=True) * 1e-3)


for batch in dataset:
    train_step(batch)  # the loop
