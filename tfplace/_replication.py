"""Replication: split a batch over devices, run a function on each, reduce, pick a strategy.

Example (the guide's manual replication, on two logical CPUs):
    >>> import tensorflow as tf, tfplace
    >>> config = tfplace.configure(logical_cpus=2)  # before the runtime starts
    >>> a = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    >>> b = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    >>> parts = tfplace.replicate(tf.matmul, ["CPU:0", "CPU:1"], a, b)
    >>> tfplace.reduce_on(parts).numpy().tolist()
    [[44.0, 56.0], [98.0, 128.0]]
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from typing import Any, Callable, Optional, Sequence

import tensorflow as tf
from absl import logging

from tfplace import _tensorflow
from tfplace._devices import cpu, resolve, try_all_gpus
from tfplace._errors import ConfigurationError
from tfplace.placement.session._sources import user_stacklevel

__all__ = ["split_batch", "replicate", "reduce_on", "strategy"]


def split_batch(x: Any, y: Any, devices: Sequence[Any]) -> tuple[list, list]:
    """Splits `x` and `y` along their first axis into one equal shard per device.

    Each shard is copied to its device (d2l's `split_batch`).

    Raises:
      ConfigurationError: the batch does not divide by the number of devices,
        or `x` and `y` have different batch sizes.
    """
    targets = [resolve(d, fallback=False, origin="tfplace.split_batch's argument devices") for d in devices]
    size_x, size_y = int(tf.shape(x)[0]), int(tf.shape(y)[0])
    if size_x != size_y:
        raise ConfigurationError(
            f"split_batch received x with {size_x} examples and y with {size_y}: both need the same batch size")
    if not targets or size_x % len(targets):
        raise ConfigurationError(
            f"split_batch received a batch of {size_x} for {len(targets)} device(s): the batch size must be "
            f"a multiple of the device count (e.g. {max(1, size_x // max(1, len(targets))) * max(1, len(targets))})")
    step = size_x // len(targets)
    xs, ys = [], []
    for i, target in enumerate(targets):
        with tf.device(target.name):
            xs.append(tf.identity(x[i * step:(i + 1) * step]))
            ys.append(tf.identity(y[i * step:(i + 1) * step]))
    return xs, ys


def replicate(fn: Callable[..., Any], devices: Sequence[Any], *args: Any, **kwargs: Any) -> list:
    """`[fn(*args, **kwargs) computed under each device]`: the guide's manual replication."""
    results = []
    for target in devices:
        with resolve(target, fallback=False, origin="tfplace.replicate's argument devices"):
            results.append(fn(*args, **kwargs))
    return results


def reduce_on(values: Sequence[Any], device: Any = "/cpu:0", op: str = "sum") -> tf.Tensor:
    """Sums (`op="sum"`, with `tf.add_n`) or averages (`op="mean"`) `values` on one device.

    Raises:
      ConfigurationError: `op` is neither "sum" nor "mean", or `values` is empty.
    """
    if op not in ("sum", "mean"):
        raise ConfigurationError(f"reduce_on received op={op!r}: allowed are 'sum' and 'mean'")
    if not values:
        raise ConfigurationError("reduce_on received no values: allowed is a non-empty list of tensors")
    with resolve(device, fallback=False, origin="tfplace.reduce_on's argument device"):
        total = tf.add_n(list(values))
        return total / len(values) if op == "mean" else total


def _cluster() -> Optional[dict]:
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return None
    try:
        config = json.loads(raw)
        cluster = config["cluster"]
        task = config["task"]
        if not isinstance(cluster, dict) or not cluster or not all(isinstance(v, list) for v in cluster.values()):
            raise ValueError("cluster must map job names to lists of host:port")
        if task["type"] not in cluster or not 0 <= int(task["index"]) < len(cluster[task["type"]]):
            raise ValueError(f"task {task} is not in the cluster")
    except (ValueError, KeyError, TypeError) as err:
        raise ConfigurationError(
            f"TF_CONFIG={raw!r} (from environment variable TF_CONFIG) is not a cluster spec ({err}): allowed is JSON "
            'like {"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": 0}}') from None
    return config


def strategy(devices: Optional[Sequence[Any]] = None) -> tf.distribute.Strategy:
    """A `tf.distribute` strategy for `devices`, logging which and why.

    `MultiWorkerMirroredStrategy` when `TF_CONFIG` names a cluster of more
    than one task; else `MirroredStrategy` over >= 2 devices; else
    `OneDeviceStrategy`. Default devices: all GPUs, else all logical CPUs.
    Starts the runtime.

    Raises:
      ConfigurationError: `TF_CONFIG` is malformed.
      DeviceNotFoundError: a device does not exist.
    """
    config = _cluster()
    if config is not None and sum(len(v) for v in config["cluster"].values()) > 1:
        logging.info("tfplace: MultiWorkerMirroredStrategy: TF_CONFIG names a cluster %s", config["cluster"])
        if _keras_3():
            warnings.warn(
                "tfplace.strategy(): TF_CONFIG names a cluster, so this is a MultiWorkerMirroredStrategy, under which "
                f"Keras {_keras_version()}'s Model.fit does not run (keras-team/keras#20585; nor under "
                "ParameterServerStrategy): train with a custom loop (strategy.run over "
                "experimental_distribute_dataset), or use tf_keras (TF_USE_LEGACY_KERAS=1)",
                UserWarning, stacklevel=user_stacklevel())
        return tf.distribute.MultiWorkerMirroredStrategy()
    if devices is None:
        chosen = try_all_gpus()
        if chosen == [cpu()]:
            chosen = [d for d in map(resolve, _tensorflow.logical_device_names()) if d.device_type == "CPU"]
    else:
        chosen = [resolve(d, fallback=False, origin="tfplace.strategy's argument devices") for d in devices]
    return _local_strategy(tuple(d.name for d in chosen))


def _keras_version() -> str:
    return getattr(tf.keras, "__version__", "") or getattr(tf.keras, "version", lambda: "")()


def _keras_3() -> bool:
    """Whether `tf.keras` is Keras 3 (not tf_keras, which `TF_USE_LEGACY_KERAS=1` selects)."""
    return _keras_version().startswith("3")


@functools.lru_cache(maxsize=None)
def _local_strategy(names: tuple[str, ...]) -> tf.distribute.Strategy:
    """One strategy per device set: two MirroredStrategy objects over the same devices
    in one process can clash in their collective ops."""
    if len(names) >= 2:
        logging.info("tfplace: MirroredStrategy over %d devices %s", len(names), list(names))
        return tf.distribute.MirroredStrategy(list(names))
    logging.info("tfplace: OneDeviceStrategy on %s (a single device)", names[0])
    return tf.distribute.OneDeviceStrategy(names[0])
