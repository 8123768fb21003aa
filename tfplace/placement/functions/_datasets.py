"""The `tf.data` functions behind a dataset tensor: what an iterator instantiates when it is made.

An eager op that makes an iterator (`MakeIterator`, `ReduceDataset`, a
`tf.function` taking a dataset) receives only the dataset's variant tensor;
the Python dataset that made it knows its functions (`map`, `filter`,
generators) and its input datasets. `pipeline_of(variant)` finds that dataset
on the caller's stack (where `iter(dataset)` keeps it), else among the
objects referring to the tensor, and lists the names of its functions and
those of its inputs, and whether tf.data's graph rewrites will run over it. A `cache()` fills when
the iterator writing it reads its input to the end, or reads as many elements as its input holds
(TensorFlow's `MemoryWriterIterator` completes it then); filled, it serves later iterators from
memory and the functions upstream of it are not instantiated again. `exhausted()` learns the first
from an iterator's end-of-data error; `read()` counts the elements an iterator delivered, and once
they are as many as its dataset holds (a `DatasetCardinality` op of the block said so:
`cardinality()`; Keras asks before `fit`), the iterator read everything. Either fills only the
caches that every dataset between them and the iterator reads to the end (not under `take`, `zip`).

Example:
    >>> import tensorflow as tf
    >>> from tfplace.placement.functions import _datasets
    >>> ds = tf.data.Dataset.range(4).map(lambda x: x + 1)
    >>> pipeline = _datasets.pipeline_of(ds._variant_tensor)
    >>> [name.split("_")[3:5] for name in pipeline.functions], pipeline.rewritten
    ([['Dataset', 'map']], True)
"""

from __future__ import annotations

import weakref
from typing import Any, Optional, Sequence

from tensorflow.core.framework import types_pb2

from tfplace import _tensorflow
from tfplace.placement.functions import _pipelines
from tfplace.placement.session import _session

__all__ = ["pipeline_of", "exhausted", "read", "read_in_call", "reading", "cardinality", "READS"]

_HOST_MEMORY = frozenset({types_pb2.DT_INT32, types_pb2.DT_STRING})


def _captures(function: Any) -> tuple[str, ...]:
    """Where tf.data puts a function's captured inputs (its last arguments): "host" for host-memory
    types, a resource's device, "" for the function's own device (captured_function.cc)."""
    kinds = []
    for tensor in function.captured_inputs:
        dtype = tensor.dtype.as_datatype_enum
        if dtype == types_pb2.DT_RESOURCE:
            kinds.append(tensor.device)
        else:
            kinds.append("host" if dtype in _HOST_MEMORY else "")
    return tuple(kinds)


def _functions(dataset: Any) -> list[tuple[str, tuple[str, ...]]]:
    """A dataset's own functions, with where their captured inputs go: its `map`/`filter`/...
    functions, and functions it keeps as attributes (a `MultiDeviceIterator`'s per-device
    generators, whose init and finalize functions an iterator instantiates when it is made; their
    next function runs through the source device's iterator and is never placed here)."""
    functions = _tensorflow.dataset_functions(dataset)
    return [(f.name.decode() if isinstance(f.name, bytes) else f.name, _captures(f)) for f in functions]


# Ops that deliver one element of the iterator that is their first input.
READS = frozenset({"IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional"})
# Ops that make a function's nodes run a number of times that its graph does not say.
_CONTROL_FLOW = frozenset({"Enter", "NextIteration", "Switch", "Merge", "While", "StatelessWhile", "If",
                           "StatelessIf", "Case", "StatelessCase"})


class _Reading:
    """An iterator made over a pipeline with caches: its resource handle (weakly), the caches it fills
    when it reads everything (weakly), how many elements its dataset holds (None: unknown), and how
    many it delivered."""

    __slots__ = ("iterator", "caches", "size", "delivered")

    def __init__(self, iterator: Any, caches: list[Any], size: Optional[int]) -> None:
        self.iterator = weakref.ref(iterator)
        self.caches = tuple(weakref.ref(cache) for cache in caches)
        self.size = size
        self.delivered = 0


# What datasets did outlives captures, as TensorFlow's runtime does (`_session.runtime()`): the caches
# an iterator filled (`filled`: they serve every later iterator, which then instantiates nothing
# upstream of them), the iterators that may fill caches (`iterators`: id of the handle -> `_Reading`),
# and the sizes DatasetCardinality ops said (`cardinalities`: id of a variant -> (it, weakly; elements)).
_LIMIT = 1024


_PARALLEL_INTERLEAVE = (
    "the block iterated a pipeline that interleaves, in parallel (interleave with num_parallel_calls), datasets "
    "with functions of their own (from_generator, map): TensorFlow instantiates those functions on its own "
    "threads, once per inner iterator or fewer, a number that varies from run to run and that no hook of "
    "TensorFlow reports; this log holds them once per iterator: {}. Interleave without num_parallel_calls to "
    "record them exactly")


def exhausted(iterator: Any) -> None:
    """The iterator whose resource handle is `iterator` reached the end of its data: its caches are filled."""
    runtime = _session.runtime()
    entry = runtime.iterators.pop(id(iterator), None) if iterator is not None else None
    if entry is not None and entry.iterator() is iterator:
        runtime.filled.update(cache for cache in (ref() for ref in entry.caches) if cache is not None)


def reading() -> bool:
    """True while an iterator over a pipeline with caches may still fill them (`read()` has work)."""
    return bool(_session.runtime().iterators)


def read(inputs: Sequence[Any], count: int) -> None:
    """The iterator among `inputs` (an op's or a function call's) delivered `count` more elements;
    once it delivered as many as its dataset holds, it read everything: its caches are filled."""
    iterators = _session.runtime().iterators
    found = [tensor for tensor in inputs if id(tensor) in iterators]
    if len(found) != 1 or not count:
        return  # no iterator with caches, or several: which one delivered is unknown
    entry = iterators[id(found[0])]
    if entry.iterator() is not found[0] or entry.size is None:
        return
    entry.delivered += count
    if entry.delivered >= entry.size:
        exhausted(found[0])


def read_in_call(inputs: Sequence[Any], records: Sequence[Any]) -> None:
    """A function call with `inputs` ran the nodes `records`: each read op among them delivered one
    element of the iterator it takes, unless control flow runs them a number of times its graph
    does not say."""
    ops = [record.op for record in records]
    if not any(op in _CONTROL_FLOW for op in ops):
        read(inputs, sum(op in READS for op in ops))


def cardinality(variant: Any, elements: Any) -> None:
    """A `DatasetCardinality` op said the dataset whose variant tensor is `variant` holds `elements`
    elements (negative: infinite or unknown)."""
    cardinalities = _session.runtime().cardinalities
    if len(cardinalities) >= _LIMIT:
        del cardinalities[next(iter(cardinalities))]
    cardinalities[id(variant)] = (weakref.ref(variant), int(elements))


def _size(variant: Any) -> Optional[int]:
    entry = _session.runtime().cardinalities.get(id(variant))
    return entry[1] if entry is not None and entry[0]() is variant and entry[1] >= 0 else None


def pipeline_of(variant: Any, own: tuple[str, ...] = (), iterator: Any = None) -> Optional[_pipelines.Pipeline]:
    """The tf.data functions an iterator over the dataset whose variant tensor is `variant`
    instantiates (None if no Python dataset holds it); `own`: the iterator op's own functions;
    `iterator`: the new iterator's resource handle (its caches fill when it reaches the end)."""
    dataset = _tensorflow.dataset_of_variant(variant, depth=1)
    if dataset is None:
        return _pipelines.Pipeline((), own) if own else None
    return _pipeline(dataset, own, iterator, variant)


def _pipeline(dataset: Any, own: tuple[str, ...] = (), iterator: Any = None,
              variant: Any = None) -> _pipelines.Pipeline:
    """`pipeline_of()` of a Python dataset (`variant`: its tensor, whose size a `DatasetCardinality` op
    may have said). The input of a copy to another device (`prefetch_to_device`) is a pipeline of its
    own, on its source device: the copy's generator makes its iterator there, through a remote call."""
    runtime = _session.runtime()
    found: dict[str, tuple[str, ...]] = {}
    maps: list[str] = []
    caches: list[Any] = []
    more: dict[str, int] = {}  # function -> rewrites of its graph by datasets made over it
    uncertain: list[str] = []  # functions a parallel interleave's threads instantiate
    unreadable: list[str] = []  # why functions an iterator instantiates cannot be read
    todo: list[tuple[Any, int, bool]] = [(dataset, 0, True)]  # (dataset, rewrites above it, read whole)
    seen: set[int] = set()
    generator = False
    elsewhere: list[tuple[_pipelines.Pipeline, str]] = []
    while todo:
        current, above, whole = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        functions = _functions(current)
        found.update(functions)
        reason = _tensorflow.unreadable_functions(current)
        if reason:
            unreadable.append(reason)
        for name, _ in functions if above else ():
            more[name] = max(more.get(name, 0), above)
        if _tensorflow.is_parallel_interleave(current):
            uncertain += [inner for name, _ in functions for inner in _pipelines.dataset_function_names([name])[1:]]
        above += _tensorflow.rewrites_input_graph(current)
        if _tensorflow.is_map_dataset(current):
            maps += [name for name, kinds in functions if not kinds]
        generator = generator or _tensorflow.is_generator_dataset(current)  # tf.data's rewrites skip these
        if _tensorflow.is_cache_dataset(current):
            if whole:
                caches.append(current)
            if current in runtime.filled:
                continue  # served from the cache: nothing upstream is instantiated
        source = _tensorflow.copied_from(current)
        if source is not None:
            elsewhere += [(_pipeline(child), source) for child in _tensorflow.dataset_inputs(current)]
            continue
        whole = whole and _tensorflow.reads_inputs_to_end(current)
        todo += [(child, above, whole) for child in _tensorflow.dataset_inputs(current)]
    if iterator is not None and caches:
        if len(runtime.iterators) >= _LIMIT:
            del runtime.iterators[next(iter(runtime.iterators))]
        runtime.iterators[id(iterator)] = _Reading(iterator, caches, _size(variant) if variant is not None else None)
    options = dataset.options().experimental_optimization
    allowed = options.apply_default_optimizations is not False or any(
        getattr(options, name, None) is True for name in _pipelines.OPTIMIZATIONS)
    return _pipelines.Pipeline(tuple(found), own, allowed and not generator,
                           tuple((name, kinds) for name, kinds in found.items() if any(kinds)), tuple(maps),
                           tuple(sorted(more.items())),
                           "; ".join([_PARALLEL_INTERLEAVE.format(", ".join(dict.fromkeys(uncertain)))]
                                     * bool(uncertain) + list(dict.fromkeys(unreadable))),
                           tuple(dict.fromkeys(uncertain)), tuple(elsewhere))
