"""The eager tensors and variables alive now (`live_tensors()`, like `jax.live_arrays()`), with the line that made
them where a memory capture saw it.

Example:
    >>> import tensorflow as tf, tfplace
    >>> x = tf.zeros((64, 64))
    >>> any(t.bytes == 16384 and t.shape == (64, 64) for t in tfplace.live_tensors("CPU:0"))
    True
"""

from __future__ import annotations

from typing import Any, NamedTuple, Union

from tfplace import _tensorflow
from tfplace._devices import canonical_name, parse_device
from tfplace.placement.session import _session
from tfplace.placement.taking._memory import sized

__all__ = ["LiveTensor", "live_tensors"]


class LiveTensor(NamedTuple):
    """An eager tensor or variable alive now: `kind` ("tensor" or "variable"), `device` holding its
    memory, `bytes`, `dtype`, `shape` and `source`, the line that made it where a memory capture saw it."""

    kind: str
    device: str
    bytes: int
    dtype: str
    shape: tuple
    source: str


def live_tensors(device: Union[str, Any, None] = None) -> list[LiveTensor]:
    """The eager tensors and variables alive in this process now, most bytes first (`device`: only
    those whose memory is there, written any accepted way).

    It reads Python's garbage collector (the objects it tracks), as `jax.live_arrays()` reads JAX's
    own list: tensors TensorFlow holds below Python (inside functions, in datasets) are not listed.
    Imports TensorFlow.

    >>> import tensorflow as tf, tfplace
    >>> x = tf.zeros((64, 64))
    >>> any(t.bytes == 16384 and t.shape == (64, 64) for t in tfplace.live_tensors("CPU:0"))
    True
    """
    wanted = parse_device(device, origin="tfplace.live_tensors's argument device").name if device is not None else None
    found = []
    made = _session.runtime().made
    for kind, obj in _tensorflow.live_tensor_objects():
        where = canonical_name(obj.backing_device if kind == "tensor" else obj.device)
        if wanted is not None and where != wanted:
            continue
        shape = _tensorflow.shape_tuple(obj)
        size, dtype, _ = sized(obj.dtype, shape)
        found.append(LiveTensor(kind, where, size, dtype, shape or (), made.get(id(obj), "")))
    return sorted(found, key=lambda t: (-t.bytes, t.device))
