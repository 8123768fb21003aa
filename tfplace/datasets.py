"""The `tf.data` functions behind a dataset tensor: what an iterator instantiates when it is made.

An eager op that makes an iterator (`MakeIterator`, `ReduceDataset`, a
`tf.function` taking a dataset) receives only the dataset's variant tensor;
the Python dataset that made it knows its functions (`map`, `filter`,
generators) and its input datasets. `functions_of(variant)` finds that dataset
on the caller's stack (where `iter(dataset)` keeps it), else among the
objects referring to the tensor, and lists the names of its functions and
those of its inputs.

Example:
    >>> import tensorflow as tf
    >>> from tfplace import datasets
    >>> ds = tf.data.Dataset.range(4).map(lambda x: x + 1)
    >>> [name.split("_")[2:4] for name in datasets.functions_of(ds._variant_tensor)]
    [['Dataset', 'map']]
"""

from __future__ import annotations

import gc
import sys
from types import FrameType
from typing import Any, Optional

from tensorflow.python.data.ops import dataset_ops

__all__ = ["functions_of"]

_STACK_DEPTH = 12


def _on_stack(variant: Any) -> Optional[Any]:
    frame: Optional[FrameType] = sys._getframe(2)
    for _ in range(_STACK_DEPTH):
        if frame is None:
            return None
        for value in frame.f_locals.values():
            if isinstance(value, dataset_ops.DatasetV2) and value.__dict__.get("_variant_tensor_attr") is variant:
                return value
        frame = frame.f_back
    return None


def _referring(variant: Any) -> Optional[Any]:
    for referrer in gc.get_referrers(variant):
        if isinstance(referrer, dataset_ops.DatasetV2):
            return referrer
        if isinstance(referrer, dict) and referrer.get("_variant_tensor_attr") is variant:
            for owner in gc.get_referrers(referrer):
                if isinstance(owner, dataset_ops.DatasetV2) and owner.__dict__ is referrer:
                    return owner
    return None


def functions_of(variant: Any) -> list[str]:
    """Names of the tf.data functions of the dataset whose variant tensor is `variant` ([] if none is found)."""
    dataset = _on_stack(variant) or _referring(variant)
    names: list[str] = []
    todo, seen = [dataset] if dataset is not None else [], set()
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        names += [wrapper.function.name for wrapper in current._functions()]  # pylint: disable=protected-access
        todo += list(current._inputs())  # pylint: disable=protected-access
    return list(dict.fromkeys(n.decode() if isinstance(n, bytes) else n for n in names))
