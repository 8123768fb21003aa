"""Function placement as TensorFlow's placer decided it: "place", "removed" and "compiled"
records for every function TensorFlow runs while a capture is open.

* Functions TensorFlow instantiates for eager calls (`tf.function`s, Keras
  steps, SavedModel functions, strategy steps) come from TensorFlow's graph
  collection (`enable_graph_collection`): each one's graph as written and its
  graph after placement and Grappler. The placer saw neither: it saw the graph
  as written after the pre-placement passes (control flow lowered, nested
  calls inlined), which `tfplace.placement._lowering` rebuilds under the names
  TensorFlow's placer log prints. Each of those nodes gets the device it has
  after Grappler; a node Grappler fused or rewrote (`MatMul`+`BiasAdd`+`Relu`
  into `_FusedMatMul`, `x * x` into `Square`) keeps its own op type and gets
  the device of the node that absorbed it; a node Grappler removed (a folded
  constant, an elided `Identity`) is "removed", on "" since nothing records
  where it was placed.
* `tf.data` functions (`map`, `filter`, generators, a dataset loop inside a
  `tf.function`) never reach graph collection: TensorFlow instantiates them
  when an iterator is made, on the iterator's device, after adding one
  `FakeSinkN` identity per result. `dataset_records()` rebuilds them from the
  function library.
* XLA functions (`jit_compile=True`) are compiled whole on the device of the
  call, never placed: `compiled_records()`.

Collection runs only while a capture is open; reading it empties it, so
TensorBoard's `tf.summary.trace_on(graph=True)` misses the functions a capture
takes (with a warning) and collection stays on for it after the capture.

Example:
    >>> import tensorflow as tf
    >>> from tfplace.placement import _graphs, _session
    >>> from tfplace.placement._log import PlacementLog
    >>> x = tf.ones(2)           # collection needs the runtime started
    >>> log = PlacementLog()
    >>> with _session.hold():    # captures and guards hold the capture session
    ...     _graphs.attach(log)
    ...     _ = tf.function(lambda v: v * v)(x)
    ...     _graphs.detach(log)
    >>> [(r.op, r.kind) for r in log.records if r.op == "Mul"]   # Grappler runs Square
    [('Mul', 'place')]
"""

from __future__ import annotations

import functools
import re
from collections import Counter
import threading
import warnings
from typing import Any, Iterable, NamedTuple, Optional, Sequence

from tensorflow.core.framework import function_pb2, graph_pb2

from tfplace import _tensorflow
from tfplace._devices import canonical_name, requested_name
from tfplace.placement import _function_sources, _groups, _origins, _kernels, _lowering, _session, _transfers
from tfplace.placement._log import PlacementLog
from tfplace.placement._records import ARGUMENT_OPS, CopyRecord, Kind, Origin, PlacementRecord
from tfplace.placement._sources import user_stacklevel

__all__ = ["attach", "detach", "collect", "Placed", "start", "without_sources", "is_xla", "compiled_records",
           "dataset_records", "dataset_function_names", "iterator_records", "Pipeline", "ITERATOR_OPS", "MAP_OPS", "OPTIMIZATIONS"]

# Graph collection's state is the capture session's (`tfplace.placement._session`): the open
# captures' logs and the guards (which read what `collect()` returns), in every thread, with whether
# they keep sources and the thread that opened them (`logs`); graphs a call in another thread placed,
# collected before that thread's own callback asked (`pending`: the functions traced with their
# nodes, the graphs; oldest first, until that call collects them); functions whose graphs
# TensorFlow's collection merged with another thread's (`merged`); whether collection is on
# (`collecting`), or waits for the runtime to start (`waiting`: the op callback starts it).
_PENDING_LIMIT = 64
_MERGED = ("TensorFlow placed functions of several threads at the same time, and its graph collection merged their "
           "graphs into one, with nodes of several functions under the same names: the nodes of {} cannot be told "
           "apart, so this log lacks them. Call each tf.function once before starting the threads (or one thread at "
           "a time) to record them")


def start() -> None:
    """Starts graph collection if a capture is open and the runtime has started (it never starts the runtime)."""
    session = _session.current()
    if session is None or session.collecting or not session.logs:
        return
    with session.graph_lock:
        if not session.collecting and session.logs and _tensorflow.runtime_started():
            _tensorflow.enable_graph_collection()
            session.collecting = True
        session.waiting = not session.collecting


def attach(log: object, *, sources: bool = False) -> None:
    """Gives `log` the records of every function placed from now until `detach(log)` (with the
    lines of the nodes traced while a sources capture was open, when `sources`); any other object
    (a guard) keeps collection on until it is detached. Call it while holding the capture session."""
    session = _session.current()
    if session is None:
        raise RuntimeError("tfplace.placement._graphs.attach received a log while no capture session was held: "
                           "allowed only inside `with _session.hold():` (captures and guards hold it)")
    with session.graph_lock:
        session.logs.append((log, sources, threading.get_ident()))
        start()


def detach(log: object) -> None:
    """Collects what this thread's calls placed and no callback collected yet (functions placed since the
    last function call: their records, and their transfers, which ran at least once) for the logs this
    thread opened, then stops feeding `log` (and collecting, after the last log)."""
    session = _session.current()
    if session is None:
        return
    with session.graph_lock:
        pending = collect()
        here = threading.get_ident()
        for other, sources, thread in session.logs if pending.functions else ():
            if isinstance(other, PlacementLog) and thread == here:
                other.add(pending.instantiated if sources else without_sources(pending.instantiated), pending.transfers)
        session.logs[:] = [entry for entry in session.logs if entry[0] is not log]
        session.waiting = session.waiting and bool(session.logs)
        if not session.logs and session.collecting:
            if not _tensorflow.tensorboard_tracing():  # TensorBoard's trace keeps collecting after the capture
                _tensorflow.disable_graph_collection()
            session.collecting = False


def _is_eager_op_wrapper(graph: graph_pb2.GraphDef) -> bool:
    """True for the function TensorFlow wraps around one eager op (or several, collected together).

    Its node is that op, named after its type and pinned to a full device name,
    and its arguments and results are named after the op's inputs and outputs
    (`a`, `b`, `product_RetVal` for MatMul), where a user's function names
    them after its Python parameters. When an eager op fails, the next
    wrapper's nodes are collected with its own.
    """
    nodes = [n for n in graph.node if n.op not in ARGUMENT_OPS]
    if not nodes or not all(n.name == n.op and n.device.startswith("/job:") for n in nodes):
        return False
    ops = {_kernels.op_type(n.op) for n in nodes}
    return all(any(_kernels.is_wrapper_plumbing(n.name, op) for op in ops) for n in graph.node if n.op in ARGUMENT_OPS)


# Grappler names a node it rewrites "<Optimizer>/<Rewrite>_<original name>[/<part>]".
_REWRITTEN = re.compile(r"^[A-Z][A-Za-z]*/[A-Z][A-Za-z]*_(.+)$")


def _producer(tensor: str) -> str:
    return tensor.lstrip("^").split(":", 1)[0]


def placed_records(nodes: list[_lowering.PlacerNode], placed: Iterable[Any]) -> list[PlacementRecord]:
    """The placer's nodes, each on its device after Grappler (`placed`: the NodeDefs that ran)."""
    after = {n.name: n for n in placed}
    devices: dict[str, str] = {}
    for name, node in after.items():
        match = _REWRITTEN.match(name)
        if match:
            original = match[1]
            while original and original not in after:
                devices.setdefault(original, node.device)
                original = original.rpartition("/")[0]
    rewritten = {n.name for n in nodes if n.name in after and _kernels.op_type(after[n.name].op) != n.op}
    consumers: dict[str, list[str]] = {}
    for node in nodes:
        for tensor in node.inputs:
            if not tensor.startswith("^"):
                consumers.setdefault(_producer(tensor), []).append(node.name)
    absorbed: dict[str, str] = {}  # node -> the rewritten node that absorbed it
    op_of = {n.name: n.op for n in nodes}
    missing = [n.name for n in nodes if n.name not in after and n.name not in devices]
    changed = True
    while changed:  # MatMul -> BiasAdd -> Relu (a _FusedMatMul named Relu): both absorbed into Relu
        changed = False
        for name in missing:
            if name in absorbed:
                continue
            for consumer in consumers.get(name, ()):
                root = consumer if consumer in rewritten else absorbed.get(consumer)
                if root is None or not _absorbs(after[root], op_of[name]):
                    continue
                absorbed[name] = root
                changed = True
                break
    records = []
    for node in nodes:
        hit = after.get(node.name)
        requested = requested_name(node.requested)
        if hit is not None:
            records.append(PlacementRecord(node.op, node.name, canonical_name(hit.device), Kind.PLACE,
                                           requested=requested, dtypes=node.dtypes))
            continue
        device = devices.get(node.name) or (after[absorbed[node.name]].device if node.name in absorbed else "")
        kind = Kind.PLACE if device else Kind.REMOVED
        records.append(PlacementRecord(node.op, node.name, canonical_name(device) if device else "", kind,
                                       requested=requested, dtypes=node.dtypes))
    return records


def _absorbs(fused: Any, op: str) -> bool:
    """Whether the node Grappler rewrote, `fused`, holds a node of type `op` that fed it: a fusion
    names what it absorbed (`_FusedMatMul` with `fused_ops` BiasAdd, Relu holds a MatMul, a
    BiasAdd, a Relu; an `Identity` it reads through was removed, not fused, and its device is
    unknown). A rewrite that does not name what it absorbed (a `Sub` turned `SquaredDifference`)
    holds nothing of what fed it: a removed input's device stays unknown rather than guessed."""
    if "fused_ops" not in fused.attr:
        return False
    names = [name.decode() for name in fused.attr["fused_ops"].list.s]
    base = _kernels.op_type(fused.op)
    return op in names or op == (base[len("_Fused"):] if base.startswith("_Fused") else base)


def _noted(record: PlacementRecord, note: "_function_sources.Note") -> PlacementRecord:
    """`record` with what the code that made its node says: its line, origin and who asked for its device."""
    return record._replace(source=note.line, origin=_origins.of_op(record.op, note.origin),
                           requested_by=note.requested_by if record.requested else "")


def without_sources(records: Sequence[PlacementRecord]) -> Sequence[PlacementRecord]:
    """`records` with no source lines, for a capture that did not ask for them."""
    if not any(r.source for r in records):
        return records
    return [r._replace(source="") if r.source else r for r in records]


def _function_records(function_graphs: Any, called: str = "") -> tuple[
        list[PlacementRecord], list[PlacementRecord], list[CopyRecord], Counter]:
    """The "place"/"removed" records of one placed function, those of the tf.data functions it
    instantiates, its implicit transfers (`tfplace.placement._transfers`) and how many of its nodes run per call,
    by (device, op): removed nodes, arguments and results left out."""
    graph = function_graphs.pre_optimization_graph
    placed = list(function_graphs.post_optimization_graph.node) or [
        n for g in function_graphs.partition_graphs for n in g.node]
    nodes = _lowering.placer_nodes(graph)
    records = placed_records(nodes, [n for n in placed if n.device])
    devices = len(function_graphs.partition_graphs)
    if _function_sources.watched():
        top = _function_sources.notes_of_graph([n.name for n in graph.node if n.op not in ARGUMENT_OPS], called)
        notes = _function_sources.node_notes(nodes, top)  # one per record, empty where unknown
        records = [_noted(record, note) for record, note in zip(records, notes)]
    else:
        records = [_noted(record, _function_sources.Note()) for record in records]
    transfers = _transfers.function_transfers(  # only a function on two devices or more has any
        function_graphs.partition_graphs, {n.name: n for n in nodes}, {r.name: r.source for r in records if r.source},
        graph=function_graphs.post_optimization_graph, devices={r.name: r.device for r in records}) \
        if devices > 1 else []
    runs = Counter((r.device, r.op, _groups.category(r)) for r in records if r.kind == Kind.PLACE and r.op not in ARGUMENT_OPS)
    pipeline, device = _graph_datasets(graph, placed)
    datasets = dataset_records(pipeline, device, graph.library) if pipeline is not None else []
    return records, datasets, transfers, runs


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


def _graph_datasets(graph: graph_pb2.GraphDef, placed: list[Any]) -> tuple[Optional["Pipeline"], str]:
    """The tf.data functions a function's graph instantiates (in its nodes or its bodies), and their device."""
    devices = {n.name: n.device for n in placed}
    names: list[str] = []
    own: list[str] = []
    maps: list[str] = []
    rewritten = True
    device = ""
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    for node in nodes:
        if not _is_dataset_op(node.op):
            continue
        if node.op in ITERATOR_OPS:
            own += _function_attrs(node)
        else:
            names += _function_attrs(node)
            if node.op in MAP_OPS and not node.attr["Targuments"].list.type:
                maps += _function_attrs(node)
        if node.op == "OptionsDataset":
            rewritten = rewritten and _graph_options_allow_rewrites(node)
        elif node.op == "GeneratorDataset":  # cannot be serialized: tf.data's rewrites skip the pipeline
            rewritten = False
        device = device or devices.get(node.name, "")
    if not names and not own:
        return None, ""
    pipeline = Pipeline(tuple(names), tuple(own), rewritten, maps=tuple(maps))
    return pipeline, device or _tensorflow.device_name() or "/device:CPU:0"


def _function_def(name: str, library: Optional[function_pb2.FunctionDefLibrary]) -> Optional[function_pb2.FunctionDef]:
    if library is not None:
        for function in library.function:
            if function.signature.name == name:
                return function
    try:
        return _tensorflow.function_def(name)
    except Exception:  # pylint: disable=broad-except  # not registered in this context
        return None


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
    """

    functions: tuple[str, ...]
    own: tuple[str, ...] = ()
    rewritten: bool = True
    captures: tuple[tuple[str, tuple[str, ...]], ...] = ()
    maps: tuple[str, ...] = ()
    more_rewrites: tuple[tuple[str, int], ...] = ()
    unseen: str = ""


def dataset_function_names(names: Iterable[str], library: Optional[function_pb2.FunctionDefLibrary] = None) -> list[str]:
    """`names` and every tf.data function their bodies use (a `flat_map` making a generator dataset)."""
    todo, seen = list(names), dict[str, None]()
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        function = _function_def(name, library)
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
def iterator_records(pipeline: Pipeline, device: str) -> tuple[PlacementRecord, ...]:
    """`dataset_records()` of an eager iterator's pipeline (cached: functions never change)."""
    return tuple(dataset_records(pipeline, device))


def dataset_records(pipeline: Pipeline, device: str,
                    library: Optional[function_pb2.FunctionDefLibrary] = None) -> list[PlacementRecord]:
    """"place" records of the tf.data functions an iterator instantiates on `device`."""
    device = canonical_name(device)
    records: list[PlacementRecord] = []
    full_library = function_pb2.FunctionDefLibrary()
    if library is not None:
        full_library.CopyFrom(library)
    own, maps, more = set(pipeline.own), set(pipeline.maps), dict(pipeline.more_rewrites)
    captures = dict(pipeline.captures)
    host = device.rpartition("/device:")[0] + "/device:CPU:0"
    for name in dataset_function_names(pipeline.functions + pipeline.own, library):
        function = _function_def(name, library)
        if function is None or (pipeline.rewritten and name in maps and _identity_map(function)):
            continue
        kinds = captures.get(name, ())
        arguments = [a.name for a in function.signature.input_arg]
        arg_devices = {arg: (host if kind == "host" else canonical_name(kind)) for arg, kind in
                       zip(arguments[len(arguments) - len(kinds):], kinds) if kind}
        graph = _lowering.function_graph_def(function, _library_for(function, full_library),
                                            fake_sinks=int(pipeline.rewritten and name not in own) + more.get(name, 0))
        nodes = _lowering.placer_nodes(graph)
        notes = _function_sources.node_notes(nodes, _function_sources.notes(name))
        for node, note in zip(nodes, notes):
            requested = requested_name(node.requested)
            where = arg_devices.get(node.name, "") if node.op == "_Arg" else ""
            records.append(PlacementRecord(node.op, node.name, where or requested or device, Kind.PLACE, note.line,
                                           requested=requested, dtypes=node.dtypes,
                                           requested_by=note.requested_by if requested else "", origin=Origin.INPUT))
    return records


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
                    found = _function_def(name, None)
                    if found is not None:
                        library.function.add().CopyFrom(found)
                        known.add(name)
                        todo.append(found)
    return library


@functools.lru_cache(maxsize=1024)
def is_xla(function: str) -> bool:
    """True if the eager function `function` (e.g. "__inference_f_12") is compiled by XLA."""
    definition = _function_def(function, None)
    return definition is not None and definition.attr["_XlaMustCompile"].b


@functools.lru_cache(maxsize=256)
def compiled_records(function: str, device: str) -> tuple[PlacementRecord, ...]:
    """"compiled" records of an XLA function's nodes, all on `device` (XLA places a function whole)."""
    definition = _function_def(function, None)
    if definition is None:
        return ()
    graph = _lowering.function_graph_def(definition, function_pb2.FunctionDefLibrary())
    device = canonical_name(device)
    notes = _function_sources.notes(function)
    return tuple(_noted(PlacementRecord(_kernels.op_type(n.op), n.name, device, Kind.COMPILED,
                                        requested=requested_name(n.device), dtypes=_kernels.node_dtypes(n.attr)),
                        notes.get(n.name, _function_sources.Note()))
                 for n in graph.node)


class Placed(NamedTuple):
    """What `collect()` found: the functions TensorFlow placed since the last call.

    Attributes:
      functions: how many.
      records: their nodes' records, with source lines where known (the tf.data functions
        they instantiate left out).
      transfers: their implicit transfers, `CopyRecord(kind="function")` templates
        (one call's worth; `function` and `call` empty).
      runs: ((device, op, category), count) of the nodes one call runs (each node once: a loop
        body's nodes run at least that often).
      instantiated: what a capture records: `records` with those of the tf.data functions they
        instantiate (with source lines; a capture without sources drops them).
      unseen: why the call's own placement cannot be recorded ("" when it can): its graph was
        merged with another thread's by TensorFlow's collection.
    """

    functions: int = 0
    records: tuple[PlacementRecord, ...] = ()
    transfers: tuple[CopyRecord, ...] = ()
    runs: tuple[tuple[tuple[str, str, str], int], ...] = ()
    instantiated: tuple[PlacementRecord, ...] = ()
    unseen: str = ""


def _ours(session: _session.Session, called: str, elsewhere: frozenset) -> list[Any]:
    """The graphs TensorFlow placed since the last collection that belong to the call of `called`: a graph
    whose nodes are those of a function another thread is calling now (`elsewhere`), and not `called`'s,
    waits for that thread's collection; graphs that waited for `called` come back."""
    fresh = [f for f in _tensorflow.export_run_metadata().function_graphs
             if f.pre_optimization_graph.node and not _is_eager_op_wrapper(f.pre_optimization_graph)]
    pending = session.pending
    mine = [graphs for owners, graphs in pending if called in owners]
    pending[:] = [(owners, graphs) for owners, graphs in pending if called not in owners]
    for graphs in fresh:
        names = [n.name for n in graphs.pre_optimization_graph.node]
        if len(set(names)) < len(names):  # several threads' functions merged into one graph
            session.merged.update({called, *elsewhere} - {""})
            continue
        owners = frozenset(_function_sources.functions_with_nodes(
            [n.name for n in graphs.pre_optimization_graph.node if n.op not in ARGUMENT_OPS]))
        if called not in owners and owners & elsewhere:
            pending.append((owners, graphs))
        else:
            mine.append(graphs)
    del pending[:-_PENDING_LIMIT]  # a call that never collects (a thread without a capture) leaves them
    return mine


def collect(called: str = "", elsewhere: frozenset = frozenset()) -> Placed:
    """The functions TensorFlow placed for the call of `called` since the last collection; `elsewhere`:
    the functions other threads are calling now, whose graphs wait for those threads' collections.
    The caller hands the records to its captures (`Placed.instantiated`)."""
    session = _session.current()
    if session is None:
        return Placed()
    with session.graph_lock:
        if not session.collecting:
            return Placed()
        functions = _ours(session, called, elsewhere)
        if functions and _tensorflow.tensorboard_tracing():
            warnings.warn(
                "tfplace: a placement capture and tf.summary.trace_on(graph=True) both read TensorFlow's "
                "collection of function graphs, and reading it empties it: trace_export will not show the "
                "functions placed while the capture was open. Trace for TensorBoard "
                "outside the capture.", RuntimeWarning, stacklevel=user_stacklevel())
        every: list[PlacementRecord] = []
        instantiated: list[PlacementRecord] = []
        transfers: list[CopyRecord] = []
        runs: Counter = Counter()
        for function_graphs in functions:
            own, datasets, moved, ran = _function_records(function_graphs, called)
            every += own
            instantiated += own + datasets
            transfers += moved
            runs.update(ran)
        unseen = _MERGED.format(called) if called in session.merged else ""
        session.merged.discard(called)
        return Placed(len(functions), tuple(every), tuple(transfers), tuple(runs.items()), tuple(instantiated), unseen)
