"""The `tf.data` functions of a pipeline and their records: what an iterator instantiates.

`tf.data` functions (`map`, `filter`, generators, a dataset loop inside a `tf.function`) never reach
graph collection: TensorFlow instantiates them when an iterator is made, on the iterator's device,
after adding one `FakeSinkN` identity per result. `dataset_placement()` rebuilds them from the function
library; a `Pipeline` names the functions an iterator instantiates (from a placed graph's dataset
ops, or from the Python dataset: `tfplace.placement.functions._datasets`).

Example:
    >>> from tfplace.placement.functions import _pipelines
    >>> _pipelines.Pipeline(("__inference_Dataset_map_f_12",)).rewritten
    True
"""

from __future__ import annotations

import functools
from typing import Any, Iterable, NamedTuple, Optional

from tensorflow.core.framework import function_pb2, graph_pb2, types_pb2

from tfplace import _tensorflow
from tfplace._devices import canonical_name, requested_name
from tfplace.placement.functions import _function_sources, _instantiation, _lowering, _transfers
from tfplace.placement.functions._placed import function_def
from tfplace.placement.records._records import ARGUMENT_OPS, CopyRecord, Kind, Origin, PlacementRecord

__all__ = ["Pipeline", "dataset_placement", "dataset_function_names", "iterator_placement", "uncertain_records",
           "graph_datasets",
           "ITERATOR_OPS", "MAP_OPS", "OPTIMIZATIONS"]


_HOST_TYPES = frozenset({types_pb2.DT_STRING, types_pb2.DT_RESOURCE})  # values a kernel keeps on the host
# Ops whose function attributes are tf.data functions, instantiated when an iterator is made.
def _is_dataset_op(op: str) -> bool:
    return "Dataset" in op or op in ("MapDefun",)


def _function_attrs(node: Any) -> list[str]:
    names = []
    for key in sorted(node.attr):
        value = node.attr[key]
        if value.WhichOneof("value") == "func":
            names.append(value.func.name)
    return names


# tf.data optimizations an option can turn on (tf.data.experimental.OptimizationOptions).
OPTIMIZATIONS = ("filter_fusion", "filter_parallelization", "inject_prefetch", "seq_interleave_prefetch",
                 "map_and_batch_fusion", "map_and_filter_fusion", "map_fusion", "map_parallelization",
                 "noop_elimination", "parallel_batch", "shuffle_and_repeat_fusion")


def _graph_options_allow_rewrites(node: Any) -> bool:
    from tensorflow.core.framework import dataset_options_pb2

    options = dataset_options_pb2.Options.FromString(node.attr["serialized_options"].s).optimization_options
    if options.WhichOneof("optional_apply_default_optimizations") and not options.apply_default_optimizations:
        return any(options.WhichOneof(f"optional_{name}") and getattr(options, name) for name in OPTIMIZATIONS)
    return True


def graph_datasets(graph: graph_pb2.GraphDef, placed: list[Any]) -> list[tuple["Pipeline", str]]:
    """The tf.data functions a function's graph instantiates (in its nodes or its bodies), each with the
    device it is instantiated on: the pipeline's, and one per per-device generator of a `MultiDeviceIterator`
    (a distributed dataset iterated inside the function), on that generator's device, once: TensorFlow
    instantiates a function once per device while an instantiation of it is alive (a `for` loop over a
    distributed dataset makes two iterators over the same generators)."""
    devices = {n.name: n.device for n in placed}
    groups: dict[str, dict[str, Any]] = {}  # device -> its datasets' functions: a replica's are on its device
    shards: list[tuple[Pipeline, str]] = []
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    for node in nodes:
        if not _is_dataset_op(node.op):
            continue
        if node.op == "GeneratorDataset" and _is_shard_generator(node, graph.library):
            shard = (_shard_pipeline(node), devices.get(node.name, ""))
            if shard not in shards:  # a second iterator over it: the runtime's instantiation is reused
                shards.append(shard)
            continue
        group = groups.setdefault(devices.get(node.name, ""), {"names": [], "own": [], "maps": [], "rewritten": True})
        if node.op in ITERATOR_OPS:
            group["own"] += _function_attrs(node)
        else:
            group["names"] += _function_attrs(node)
            if node.op in MAP_OPS and not node.attr["Targuments"].list.type:
                group["maps"] += _function_attrs(node)
        if node.op == "OptionsDataset":
            group["rewritten"] = group["rewritten"] and _graph_options_allow_rewrites(node)
        elif node.op == "GeneratorDataset":  # cannot be serialized: tf.data's rewrites skip the pipeline
            group["rewritten"] = False
    device = next((d for d in groups if d), "") or _tensorflow.device_name() or "/device:CPU:0"
    if "" in groups:  # the datasets of bodies no placer line names: with the first placed ones
        body = groups.pop("")
        group = groups.setdefault(device, {"names": [], "own": [], "maps": [], "rewritten": True})
        for key in ("names", "own", "maps"):
            group[key] += body[key]
        group["rewritten"] = group["rewritten"] and body["rewritten"]
    found = [(Pipeline(tuple(g["names"]), tuple(g["own"]), g["rewritten"], maps=tuple(g["maps"])), where)
             for where, g in groups.items() if g["names"] or g["own"]]
    return found + [(pipeline, where or device) for pipeline, where in shards]


def _is_shard_generator(node: Any, library: function_pb2.FunctionDefLibrary) -> bool:
    """A `MultiDeviceIterator`'s per-device generator: its init function reaches the source device
    through a `RemoteCall`."""
    init = function_def(node.attr["init_func"].func.name, library)
    return init is not None and any(n.op == "RemoteCall" for n in init.node_def)


def _shard_pipeline(node: Any) -> "Pipeline":
    """What making a per-device generator's iterator instantiates on its device: its init and finalize
    functions (its next function runs through the source iterator). Their captured inputs (the last
    arguments: the source's device name and string handle) are strings, kept on the host."""
    functions, captures = [], []
    for role in ("init_func", "finalize_func"):
        name = node.attr[role].func.name
        kinds = tuple("host" if dtype in _HOST_TYPES else "" for dtype in node.attr[f"T{role}_args"].list.type)
        functions.append(name)
        captures.append((name, kinds))
    return Pipeline(tuple(functions), rewritten=False, captures=tuple(captures))


# Ops that instantiate the tf.data functions of the dataset they get (their own function attributes,
# such as ReduceDataset's `f`, are not part of that dataset's graph).
ITERATOR_OPS = frozenset({"MakeIterator", "ReduceDataset", "DatasetToSingleElement", "MultiDeviceIteratorInit"})
MAP_OPS = frozenset({"MapDataset", "ParallelMapDataset", "ParallelMapDatasetV2"})


class Pipeline(NamedTuple):
    """What an iterator instantiates: a dataset's functions and the iterator op's own.

    Attributes:
      functions: the dataset's functions (`map`, `filter`, generators ...).
      own: the iterator op's own functions (`ReduceDataset`'s reducer).
      rewritten: tf.data's graph rewrites run over the dataset (its options
        allow them and it holds no generator dataset), leaving one
        `FakeSink<i>` Identity per result in each of its functions.
      captures: (function, kinds) where a function's captured inputs (its
        last arguments) are not on the iterator's device: "host" (host-memory
        types go to CPU:0) or a resource's device, "" for the iterator's.
      maps: functions of `map` datasets without captured inputs: the
        rewrites drop the identity ones.
      more_rewrites: (function, count) for functions upstream of datasets that
        rewrite their input's graph when they are made (`AutoShardDataset`, which
        `experimental_distribute_dataset` adds): each leaves one more set of
        `FakeSink`s, whatever the options say.
      unseen: why some of the functions its iterators run are instantiated where
        tfplace cannot count them ("" when none are).
      uncertain: those functions (a parallel interleave's inner datasets' functions, which
        TensorFlow's own threads instantiate a varying number of times); their records are in
        `iterator_placement()` once per iterator, and in `uncertain_records()`.
      elsewhere: (pipeline, device) of the inputs a copy to another device reads (`prefetch_to_device`):
        its generator makes their iterator on their source device.
    """

    functions: tuple[str, ...]
    own: tuple[str, ...] = ()
    rewritten: bool = True
    captures: tuple[tuple[str, tuple[str, ...]], ...] = ()
    maps: tuple[str, ...] = ()
    more_rewrites: tuple[tuple[str, int], ...] = ()
    unseen: str = ""
    uncertain: tuple[str, ...] = ()
    elsewhere: tuple[tuple["Pipeline", str], ...] = ()


def dataset_function_names(names: Iterable[str],
                           library: Optional[function_pb2.FunctionDefLibrary] = None) -> list[str]:
    """`names` and every tf.data function their bodies use (a `flat_map` making a generator dataset)."""
    todo, seen = list(names), dict[str, None]()
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        function = function_def(name, library)
        seen[name] = None
        if function is not None:
            todo += [f for n in function.node_def if _is_dataset_op(n.op) for f in _function_attrs(n)]
    return list(seen)


def _identity_map(function: function_pb2.FunctionDef) -> bool:
    """True for `map(lambda *x: x)`: tf.data's rewrites drop such a map (noop_elimination.cc), so
    its function is never instantiated. Stateless, each result its own argument through Identity nodes."""
    if function.signature.is_stateful or len(function.signature.output_arg) != len(function.signature.input_arg):
        return False
    nodes = {n.name: n for n in function.node_def}
    for output, argument in zip(function.signature.output_arg, function.signature.input_arg):
        tensor = function.ret[output.name]
        while tensor.split(":", 1)[0] in nodes:
            node = nodes[tensor.split(":", 1)[0]]
            if node.op != "Identity":
                return False
            tensor = node.input[0]
        if tensor != argument.name:
            return False
    return True


@functools.lru_cache(maxsize=256)
def iterator_placement(pipeline: Pipeline, device: str) -> tuple[tuple[PlacementRecord, ...], tuple[CopyRecord, ...]]:
    """`dataset_placement()` of an eager iterator's pipeline (cached: functions never change)."""
    records, transfers = dataset_placement(pipeline, device)
    return tuple(records), tuple(transfers)


@functools.lru_cache(maxsize=256)
def uncertain_records(pipeline: Pipeline, device: str) -> tuple[PlacementRecord, ...]:
    """The records of `iterator_placement()` that are the pipeline's `uncertain` functions' nodes."""
    return tuple(dataset_placement(pipeline, device, only=frozenset(pipeline.uncertain))[0])


def dataset_placement(pipeline: Pipeline, device: str, library: Optional[function_pb2.FunctionDefLibrary] = None,
                      only: Optional[frozenset] = None) -> tuple[list[PlacementRecord], list[CopyRecord]]:
    """"place" records of the tf.data functions an iterator instantiates on `device` (those named in
    `only`, when given), and their implicit transfers (`tfplace.placement.functions._transfers.placed_transfers`:
    one per instantiation, each function naming itself)."""
    device = canonical_name(device)
    records: list[PlacementRecord] = []
    transfers: list[CopyRecord] = []
    full_library = function_pb2.FunctionDefLibrary()
    if library is not None:
        full_library.CopyFrom(library)
    own, maps, more = set(pipeline.own), set(pipeline.maps), dict(pipeline.more_rewrites)
    for name, count in pipeline.more_rewrites:  # a rewrite of the input graph rewrites the functions theirs call too
        for nested in dataset_function_names([name], library)[1:]:
            more[nested] = max(more.get(nested, 0), count)
    captures = dict(pipeline.captures)
    host = device.rpartition("/device:")[0] + "/device:CPU:0"
    for name in dataset_function_names(pipeline.functions + pipeline.own, library):
        function = function_def(name, library) if only is None or name in only else None
        if function is None or (pipeline.rewritten and name in maps and _identity_map(function)):
            continue
        kinds = captures.get(name, ())
        arguments = [a.name for a in function.signature.input_arg]
        arg_devices = {arg: (host if kind == "host" else canonical_name(kind)) for arg, kind in
                       zip(arguments[len(arguments) - len(kinds):], kinds) if kind}
        graph = _instantiation.function_graph_def(function, _library_for(function, full_library),
                                            fake_sinks=int(pipeline.rewritten and name not in own) + more.get(name, 0))
        nodes = _lowering.placer_nodes(graph)
        notes = _function_sources.node_notes(nodes, _function_sources.notes(name))
        placed = []
        # the iterator op's own function (`ReduceDataset`'s reducer) is instantiated for the host: its arguments
        # and results on the op's device, its body on the host CPU
        body = host if name in own else device
        for node, note in zip(nodes, notes):
            requested = requested_name(node.requested)
            where = arg_devices.get(node.name, "") if node.op == "_Arg" else ""
            default = device if node.op in ARGUMENT_OPS else body
            placed.append(PlacementRecord(node.op, node.name, where or requested or default, Kind.PLACE, note.line,
                                          requested=requested, dtypes=node.dtypes,
                                          requested_by=note.requested_by if requested else "", origin=Origin.INPUT))
        records += placed
        transfers += _transfers.placed_transfers(name, graph, nodes, [record.device for record in placed], notes)
    for inner, where in pipeline.elsewhere:
        found, moved = dataset_placement(inner, where, library, only)
        records += found
        transfers += moved
    return records, transfers


def _library_for(function: function_pb2.FunctionDef,
                 library: function_pb2.FunctionDefLibrary) -> function_pb2.FunctionDefLibrary:
    """`library` plus the functions `function`'s control flow calls, from the eager context."""
    known = {f.signature.name for f in library.function}
    todo = [function]
    while todo:
        current = todo.pop()
        for node in current.node_def:
            for name in _function_attrs(node):
                if name not in known and not _is_dataset_op(node.op):
                    found = function_def(name, None)
                    if found is not None:
                        library.function.add().CopyFrom(found)
                        known.add(name)
                        todo.append(found)
    return library
