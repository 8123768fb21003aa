"""d2l's ResNet-18 variant, its data and a distributed training loop, shared by the training examples.

The loop is written with `strategy.run` and `experimental_distribute_dataset`,
so it runs unchanged under `OneDeviceStrategy`, `MirroredStrategy` and
`MultiWorkerMirroredStrategy` (where Keras 3's `fit` fails).

Example:
    >>> import tfplace, resnet_training as rt
    >>> strategy = tfplace.strategy()
    >>> (x, y), _ = rt.load_data("synthetic", train_size=64, test_size=32)
    >>> with strategy.scope():
    ...     model, optimizer = rt.resnet18(10, width=0.125), rt.sgd(0.1)
    >>> step = rt.make_train_step(strategy, model, optimizer, global_batch=32)
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable

import numpy as np

IMAGE_SHAPE = (28, 28, 1)
NUM_CLASSES = 10


def load_data(name: str, train_size: int = 6000, test_size: int = 1000):
    """((x_train, y_train), (x_test, y_test)) as float32 images in [0, 1] and int32 labels.

    `synthetic`: a deterministic, learnable set made here: each class is a fixed
    random 28x28 pattern, each example that pattern plus noise.
    `fashion_mnist`: Keras' loader (downloads once and caches).

    Raises:
      RuntimeError: Fashion-MNIST cannot be downloaded (offline machine).
      ValueError: an unknown name.
    """
    if name == "synthetic":
        rng = np.random.default_rng(0)
        patterns = rng.uniform(0.0, 1.0, size=(NUM_CLASSES, *IMAGE_SHAPE)).astype("float32")

        def draw(count: int, seed: int):
            local = np.random.default_rng(seed)
            labels = local.integers(0, NUM_CLASSES, size=count).astype("int32")
            noise = local.normal(0.0, 0.35, size=(count, *IMAGE_SHAPE)).astype("float32")
            return np.clip(patterns[labels] + noise, 0.0, 1.0), labels

        return draw(train_size, 1), draw(test_size, 2)
    if name == "fashion_mnist":
        import keras

        try:
            (x, y), (tx, ty) = keras.datasets.fashion_mnist.load_data()
        except Exception as err:  # urllib, ssl and socket errors all mean: no download
            raise RuntimeError(
                f"--dataset=fashion_mnist could not be downloaded ({type(err).__name__}: {err}); "
                "on an offline machine use --dataset=synthetic") from None
        prep = lambda a: (a[..., None] / 255.0).astype("float32")  # noqa: E731
        return ((prep(x[:train_size]), y[:train_size].astype("int32")),
                (prep(tx[:test_size]), ty[:test_size].astype("int32")))
    raise ValueError(f"dataset {name!r} is unknown: allowed are 'fashion_mnist' and 'synthetic'")


def resnet18(num_classes: int, width: float = 1.0):
    """d2l's ResNet-18 for small images: 3x3 stride-1 first conv, no max-pool, blocks 64-128-256-512 × width."""
    import keras
    from keras import layers

    def norm():
        return layers.BatchNormalization(momentum=0.9)  # moving statistics settle within short CPU runs

    def channels(c: int) -> int:
        return max(1, int(round(c * width)))

    def residual(x, filters: int, strides: int):
        y = layers.Conv2D(filters, 3, strides=strides, padding="same")(x)
        y = layers.ReLU()(norm()(y))
        y = norm()(layers.Conv2D(filters, 3, padding="same")(y))
        if strides != 1 or x.shape[-1] != filters:
            x = layers.Conv2D(filters, 1, strides=strides)(x)
        return layers.ReLU()(layers.Add()([x, y]))

    inputs = keras.Input(IMAGE_SHAPE)
    x = layers.Conv2D(channels(64), 3, strides=1, padding="same")(inputs)
    x = layers.ReLU()(norm()(x))
    for index, filters in enumerate((64, 128, 256, 512)):
        for block in range(2):
            x = residual(x, channels(filters), 2 if block == 0 and index > 0 else 1)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(num_classes)(x), name="resnet18")


def sgd(lr: float):
    import keras

    return keras.optimizers.SGD(learning_rate=lr)


def make_train_step(strategy, model, optimizer, global_batch: int) -> Callable:
    """A `tf.function` that runs one step on a distributed batch and returns the global mean loss."""
    import tensorflow as tf

    import keras

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def per_replica(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            per_example = loss_fn(y, logits)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def step(batch):
        losses = strategy.run(per_replica, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return step


def distribute(strategy, x, y, global_batch: int, shuffle: bool):
    """The (x, y) arrays as a distributed dataset of global batches (sharded by data).

    Under the "explicit" device policy the batches stay on the host: TensorFlow's
    prefetch of each replica's batch to its device reads the host's iterator
    from each device, an implicit copy that this policy refuses. The step
    function then copies them, inside the function, where the policy does not
    apply.
    """
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if shuffle:
        ds = ds.shuffle(len(x), seed=0, reshuffle_each_iteration=True)
    ds = ds.batch(global_batch, drop_remainder=True)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    on_host = (tf.distribute.InputOptions(experimental_fetch_to_device=False)
               if tf.config.experimental.get_device_policy() == "explicit" else None)
    return strategy.experimental_distribute_dataset(ds.with_options(options), on_host)


def accuracy(model, x, y, batch: int = 256) -> float:
    """Test accuracy, computed on the default device."""
    correct = 0
    for start in range(0, len(x), batch):
        logits = model(x[start:start + batch], training=False)
        correct += int(np.sum(np.argmax(np.asarray(logits), axis=1) == y[start:start + batch]))
    return correct / len(x)


def train(strategy, model, optimizer, data, *, epochs: int, global_batch: int, log=print,
          around=lambda epoch: contextlib.nullcontext()) -> dict:
    """Trains for `epochs`; returns per-epoch losses, test accuracies and seconds. Each epoch's steps run
    inside `around(epoch)` (a context manager: a capture of one epoch's steps, say)."""
    (x, y), (tx, ty) = data
    step = make_train_step(strategy, model, optimizer, global_batch)
    history = {"loss": [], "test_acc": [], "seconds": []}
    for epoch in range(epochs):
        start = time.perf_counter()
        total, batches = 0.0, 0
        with around(epoch):
            for batch in distribute(strategy, x, y, global_batch, shuffle=True):
                total += step(batch)  # kept on the device: read once per epoch, not per step
                batches += 1
        seconds = time.perf_counter() - start
        history["loss"].append(float(total) / max(1, batches))
        history["test_acc"].append(accuracy(model, tx, ty))
        history["seconds"].append(seconds)
        log(f"epoch {epoch + 1}/{epochs}: loss {history['loss'][-1]:.4f}, "
            f"test acc {history['test_acc'][-1]:.3f}, {seconds:.1f} sec")
    return history
