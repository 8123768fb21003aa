"""`tf.data` internals: the Python dataset behind a variant tensor, its functions and inputs, and what its
class says. Part of `tfplace._tensorflow` (see its docstring)."""

from __future__ import annotations

import gc
import sys
from types import FrameType
from typing import Any, Mapping, Optional

import tensorflow as tf
from tensorflow.python.data.experimental.ops import data_service_ops as _data_service_ops


# tf.data ---------------------------------------------------------------------------------------

_MAP_DATASETS = frozenset({"_MapDataset", "_ParallelMapDataset"})  # the Python classes of map()


def variant_tensor_of(dataset_dict: Mapping[str, Any]) -> Any:
    """The variant tensor a dataset's attribute dictionary holds (None when it has none yet)."""
    return dataset_dict.get("_variant_tensor_attr")


_STACK_DEPTH = 12


def dataset_of_variant(variant: Any, depth: int) -> Optional[tf.data.Dataset]:
    """The Python dataset whose variant tensor is `variant`: one in the locals of the frames from
    `depth` out (0: the caller's; where `iter(dataset)` keeps it), else one of the objects referring
    to the tensor (Python's garbage collector); None when none holds it."""
    frame: Optional[FrameType] = sys._getframe(depth + 1)  # pylint: disable=protected-access
    for _ in range(_STACK_DEPTH):
        if frame is None:
            break
        for value in frame.f_locals.values():
            if isinstance(value, tf.data.Dataset) and variant_tensor_of(value.__dict__) is variant:
                return value
        frame = frame.f_back
    for referrer in gc.get_referrers(variant):
        if isinstance(referrer, tf.data.Dataset):
            return referrer
        if isinstance(referrer, dict) and variant_tensor_of(referrer) is variant:
            for owner in gc.get_referrers(referrer):
                if isinstance(owner, tf.data.Dataset) and owner.__dict__ is referrer:
                    return owner
    return None


# The tf.data service's cache of uncompress functions (2.18 and later; before, each dataset made its own and kept
# it nowhere: `unreadable_functions` says so).
_UNCOMPRESS = getattr(_data_service_ops, "_get_uncompress_func", None)


def unreadable_functions(dataset: tf.data.Dataset) -> str:
    """Why a function an iterator of `dataset` itself instantiates cannot be read ("" when they all can)."""
    if _UNCOMPRESS is None and isinstance(dataset, _data_service_ops._DataServiceDatasetV2):  # pylint: disable=protected-access
        return (f"the block iterated a dataset read through the tf.data service, whose uncompress function every "
                f"iterator instantiates; TensorFlow {tf.__version__} keeps that function nowhere tfplace reads (2.18 "
                "and later do), so this log lacks its nodes")
    return ""


def dataset_functions(dataset: tf.data.Dataset) -> list[Any]:
    """The functions of a dataset itself: its `map`/`filter`/... functions, and those it keeps as
    attributes (a `MultiDeviceIterator`'s per-device generators, whose init and finalize functions
    an iterator instantiates when it is made; their next function runs through the source device's
    iterator and is never placed with them)."""
    functions = [wrapper.function for wrapper in dataset._functions()]  # pylint: disable=protected-access
    if isinstance(dataset, _data_service_ops._DataServiceDatasetV2) and _UNCOMPRESS is not None:  # pylint: disable=protected-access
        # its `uncompress_fn`, which every iterator instantiates, kept in the module's cache per element spec
        functions.append(_UNCOMPRESS(_data_service_ops.HashableElementSpec(dataset.element_spec)).function)
    return functions + [value for key, value in vars(dataset).items()
                        if isinstance(value, tf.types.experimental.ConcreteFunction) and key != "_next_func"]


def dataset_inputs(dataset: tf.data.Dataset) -> list[tf.data.Dataset]:
    """The datasets a dataset is made of: those it reads from, and those it keeps as attributes
    (`ragged_batch` keeps the `map` that encodes its elements, whose variant tensor is its own)."""
    found = {id(d): d for d in dataset._inputs()}  # pylint: disable=protected-access
    found.update((id(value), value) for value in vars(dataset).values() if isinstance(value, tf.data.Dataset))
    return list(found.values())


def is_map_dataset(dataset: tf.data.Dataset) -> bool:
    """True for the dataset `map()` makes."""
    return type(dataset).__name__ in _MAP_DATASETS


def is_cache_dataset(dataset: tf.data.Dataset) -> bool:
    """True for the dataset `cache()` makes (in memory or in a file)."""
    return type(dataset).__name__ == "CacheDataset"


# Datasets that read their input(s) to the end when they are read to the end (what a `cache()`
# below them needs to fill); `take`, `take_while`, `zip` and `sample_from_datasets` may stop early.
_READ_WHOLE = frozenset({
    "_MapDataset", "_ParallelMapDataset", "_BatchDataset", "_ParallelBatchDataset", "_PaddedBatchDataset",
    "_PrefetchDataset", "_ShuffleDataset", "CacheDataset", "_OptionsDataset", "_FilterDataset", "_UnbatchDataset",
    "_RepeatDataset", "_ShardDataset", "_SkipDataset", "_ConcatenateDataset", "_FlatMapDataset",
    "_InterleaveDataset", "_ParallelInterleaveDataset", "_ScanDataset", "_WindowDataset", "_RebatchDataset",
    "_AutoShardDataset", "_IgnoreErrorsDataset", "_UniqueDataset", "_AssertCardinalityDataset",
    "_GroupByWindowDataset"})


def reads_inputs_to_end(dataset: tf.data.Dataset) -> bool:
    """True for a dataset that, read to its end, has read its inputs to theirs (`map`, `batch`,
    `prefetch`, ...); False for `take`, `zip` and any dataset not known to."""
    return type(dataset).__name__ in _READ_WHOLE


def is_parallel_interleave(dataset: tf.data.Dataset) -> bool:
    """True for the dataset `interleave(..., num_parallel_calls=...)` makes."""
    return type(dataset).__name__ == "_ParallelInterleaveDataset"


def rewrites_input_graph(dataset: tf.data.Dataset) -> bool:
    """True for a dataset whose op rewrites its input's graph when it is made (`AutoShardDataset`,
    which `experimental_distribute_dataset` adds), leaving its own `FakeSink`s in every function."""
    return type(dataset).__name__ == "_AutoShardDataset"


def copied_from(dataset: tf.data.Dataset) -> Optional[str]:
    """The source device of a dataset that copies its input to another device (`prefetch_to_device`,
    `copy_to_device`: its input's iterator is made on the source device); None for any other."""
    if type(dataset).__name__ != "_CopyToDeviceDataset":
        return None
    return getattr(dataset, "_source_device_string", None) or "/device:CPU:0"


def is_generator_dataset(dataset: tf.data.Dataset) -> bool:
    """True for a dataset made by a GeneratorDataset op (`from_generator`'s, a MultiDeviceIterator's
    per-device ones), which TensorFlow cannot serialize."""
    return all(hasattr(dataset, name) for name in ("_init_func", "_next_func", "_finalize_func"))
