"""Function placement as TensorFlow's placer decided it: "place", "removed" and "compiled"
records for every function TensorFlow runs while a capture is open.

* Functions TensorFlow instantiates for eager calls (`tf.function`s, Keras
  steps, SavedModel functions, strategy steps) come from TensorFlow's graph
  collection (`enable_graph_collection`): each one's graph as written and its
  graph after placement and Grappler. The placer saw neither: it saw the graph
  as written after the pre-placement passes (control flow lowered, nested
  calls inlined), which `tfplace.placement.functions._lowering` rebuilds under the names
  TensorFlow's placer log prints; `tfplace.placement.functions._placed` gives each of
  those nodes the device it has after Grappler.
* The `tf.data` functions a placed function's dataset ops instantiate come from
  the function library (`tfplace.placement.functions._pipelines`).

A capture alone (no guard, no memory census) has a function's own records made when its log is
read (`Later`): lowering is most of what collecting costs, and many logs are never read.

Collection runs only while a capture is open; reading it empties it, so
TensorBoard's `tf.summary.trace_on(graph=True)` misses the functions a capture
takes (with a warning) and collection stays on for it after the capture.

Example:
    >>> import tensorflow as tf
    >>> from tfplace.placement.functions import _graphs
    >>> from tfplace.placement.session import _session
    >>> from tfplace.placement.records._recorder import Recorder
    >>> x = tf.ones(2)           # collection needs the runtime started
    >>> log = Recorder()
    >>> with _session.hold():    # captures and guards hold the capture session
    ...     _graphs.attach(log)
    ...     _ = tf.function(lambda v: v * v)(x)
    ...     _graphs.detach(log)
    >>> [(r.op, r.kind) for r in log.records if r.op == "Mul"]   # Grappler runs Square
    [('Mul', 'place')]
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections import Counter
from typing import Any, Mapping, NamedTuple, Optional, Sequence, Union

from tensorflow.core.framework import graph_pb2

from tfplace import _tensorflow
from tfplace._devices import canonical_name
from tfplace.placement.functions import _dtensor, _function_sources, _instances, _kept_calls, _lowering, _pipelines, _placed, _transfers
from tfplace.placement.records import _groups
from tfplace.placement.ops import _kernels
from tfplace.placement.session import _session
from tfplace.placement.records._recorder import Recorder
from tfplace.placement.records._records import ARGUMENT_OPS, CopyRecord, Kind, Origin, PlacementRecord
from tfplace.placement.session._sources import user_stacklevel

__all__ = ["attach", "detach", "collect", "collect_dtensor", "Placed", "Later", "start"]

# Graph collection's state is the capture session's (`tfplace.placement.session._session`): the open
# captures' logs and the guards (which read what `collect()` returns), in every thread, with whether
# they keep sources and the thread that opened them (`logs`); graphs a call in another thread placed,
# collected before that thread's own callback asked (`pending`: the functions traced with their
# nodes, the graphs; oldest first, until that call collects them); functions whose graphs
# TensorFlow's collection merged with another thread's (`merged`); whether collection is on
# (`collecting`), or waits for the runtime to start (`waiting`: the op callback starts it).
_PENDING_LIMIT = 64
_UNMADE_LIMIT = 64  # `Later`s whose graphs wait to be read, at most (the oldest are made first)
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
            _await_runtime(session, False)
            _tensorflow.enable_graph_collection()
            session.collecting = True
        session.waiting = not session.collecting
        _await_runtime(session, session.waiting)


def _initialized(context: Any) -> None:
    """`Context.ensure_initialized` while collection waits for the runtime: it starts right after the
    runtime does, before the first op runs (an op on DTensor's device has no tracing that would start it)."""
    _tensorflow.ENSURE_INITIALIZED.original(context)
    session = _session.current()
    if session is not None and session.waiting:
        start()


def _await_runtime(session: _session.Session, waiting: bool) -> None:
    if waiting != session.awaiting_runtime:
        session.awaiting_runtime = waiting
        if waiting:
            _tensorflow.ENSURE_INITIALIZED.install(_initialized)
        else:
            _tensorflow.ENSURE_INITIALIZED.remove()


def attach(log: object, *, sources: bool = False) -> None:
    """Gives `log` the records of every function placed from now until `detach(log)` (with the
    lines of the nodes traced while a sources capture was open, when `sources`); any other object
    (a guard) keeps collection on until it is detached. Call it while holding the capture session."""
    session = _session.current()
    if session is None:
        raise RuntimeError("tfplace.placement.functions._graphs.attach received a log while no capture session was held: "
                           "allowed only inside `with _session.hold():` (captures and guards hold it)")
    with session.graph_lock:
        session.logs.append((log, sources, threading.get_ident()))
        start()


def in_flight_elsewhere(session: _session.Session) -> frozenset:
    """The functions other threads are calling now (their graphs wait for those threads' collections)."""
    me = threading.get_ident()
    return frozenset(name for thread, name in tuple(session.in_flight.items()) if thread != me)


def detach(log: object) -> None:
    """Collects what this thread's calls placed and no callback collected yet (functions placed since the
    last function call: their records, and their transfers, which ran at least once) for the logs this
    thread opened, then stops feeding `log` (and collecting, after the last log)."""
    session = _session.current()
    if session is None:
        return
    with session.graph_lock:
        here = threading.get_ident()
        pending = collect(elsewhere=in_flight_elsewhere(session))
        for other, sources, thread in session.logs if pending.functions else ():
            if isinstance(other, Recorder) and thread == here:
                other.add(pending.instantiated if sources else _placed.without_sources(pending.instantiated), pending.transfers)
        session.logs[:] = [entry for entry in session.logs if entry[0] is not log]
        session.waiting = session.waiting and bool(session.logs)
        _await_runtime(session, session.waiting)
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


def _placed_nodes(function_graphs: Any) -> list[Any]:
    """The nodes of one placed function as they ran (after placement and Grappler)."""
    return list(function_graphs.post_optimization_graph.node) or [
        n for g in function_graphs.partition_graphs for n in g.node]


def _notes_now(graph: graph_pb2.GraphDef, called: str) -> Optional[tuple[Mapping, Mapping]]:
    """The notes one placed function's records take (`_function_sources`): its own nodes' and those of the
    functions it inlines, read as it is placed (notes are forgotten, oldest first); None while none was watched."""
    if not _function_sources.watched():
        return None
    top = _function_sources.notes_of_graph([n.name for n in graph.node if n.op not in ARGUMENT_OPS], called)
    return top, {f.signature.name: _function_sources.notes(f.signature.name) for f in graph.library.function}


def _function_records(function_graphs: Any, notes: Optional[tuple[Mapping, Mapping]]) -> tuple[
        list[PlacementRecord], list[CopyRecord], Counter]:
    """The "place"/"removed" records of one placed function (with `notes`, from `_notes_now`), its implicit
    transfers (`tfplace.placement.functions._transfers`) and how many of its nodes run per call, by (device, op)
    (removed nodes, arguments and results left out)."""
    graph = function_graphs.pre_optimization_graph
    nodes = _lowering.placer_nodes(graph)
    records = _placed.placed_records(nodes, [n for n in _placed_nodes(function_graphs) if n.device])
    if notes is not None:
        found = _function_sources.node_notes(nodes, *notes)  # one per record, empty where unknown
        records = [_placed.noted(record, note) for record, note in zip(records, found)]
    else:
        records = [_placed.noted(record, _function_sources.Note()) for record in records]
    transfers = _transfers.function_transfers(  # only a function on two devices or more has any
        function_graphs.partition_graphs, {n.name: n for n in nodes}, {r.name: r.source for r in records if r.source},
        graph=function_graphs.post_optimization_graph, devices={r.name: r.device for r in records}) \
        if len(function_graphs.partition_graphs) > 1 else []
    kept, moved = _kept_calls.kept_calls(function_graphs.post_optimization_graph, graph)
    records += kept
    transfers += moved
    runs = Counter((r.device, r.op, _groups.category(r)) for r in records if r.kind == Kind.PLACE and r.op not in ARGUMENT_OPS)
    return records, transfers, runs


def _function_datasets(function_graphs: Any) -> tuple[list[PlacementRecord], list[CopyRecord]]:
    """The records and transfers of the tf.data functions one placed function instantiates (read as it is
    placed: they may name functions of TensorFlow's library, which outlive no call)."""
    graph = function_graphs.pre_optimization_graph
    datasets: list[PlacementRecord] = []
    moved: list[CopyRecord] = []
    for pipeline, device in _pipelines.graph_datasets(graph, _placed_nodes(function_graphs)):
        found, copies = _pipelines.dataset_placement(pipeline, device, graph.library)
        datasets += found
        moved += copies
    return datasets, moved


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
      dataset_transfers: the transfers of the tf.data functions they instantiate, once (each names
        its function; see `tfplace.placement.functions._transfers.placed_transfers`).
      datasets: the records of the tf.data functions one call instantiates (with source lines): an
        iterator a function makes (a dataset iterated inside it) instantiates its dataset's functions
        again at every call, and TensorFlow places them again.
    """

    functions: int = 0
    records: tuple[PlacementRecord, ...] = ()
    transfers: tuple[CopyRecord, ...] = ()
    runs: tuple[tuple[tuple[str, str, str], int], ...] = ()
    instantiated: tuple[PlacementRecord, ...] = ()
    unseen: str = ""
    dataset_transfers: tuple[CopyRecord, ...] = ()
    datasets: tuple[PlacementRecord, ...] = ()


class Later:
    """What `collect(later=True)` found, with `Placed`'s fields: the functions' own nodes' records, transfers
    and runs made when first read (lowering a function is most of what collecting costs, and a capture's
    log is often never read); what cannot wait (the functions' notes and their tf.data functions, which
    TensorFlow's library may forget) is read at once. `moves`: whether a call can move anything (a
    function on two devices or more, or its tf.data functions' transfers): `transfers` is read without
    making anything where none can. Making it twice (two threads) makes the same records."""

    def __init__(self, parts: list[tuple[Any, Any, list[PlacementRecord]]], names: Sequence[str],
                 instantiated: Sequence[PlacementRecord], unseen: str, dataset_transfers: tuple[CopyRecord, ...]) -> None:
        self.functions = len(parts)
        self.unseen = unseen
        self.dataset_transfers = dataset_transfers
        self.datasets = _datasets_of(parts)
        self.moves = bool(dataset_transfers) or any(len(graphs.partition_graphs) > 1
                                                    or _kept_calls.present(graphs.post_optimization_graph)
                                                    for graphs, _, _ in parts)
        self._made: Optional[Placed] = None
        self._parts: Optional[tuple] = (parts, tuple(names), tuple(instantiated))

    def placed(self) -> Placed:
        """Every field, made now if not yet."""
        made, waiting = self._made, self._parts
        if made is None:
            if waiting is None:  # another thread made it meanwhile (it sets `_made` before it drops `_parts`)
                return self._made
            made = self._made = _assembled(*waiting, self.unseen, self.dataset_transfers)
            self._parts = None
        return made

    @property
    def made(self) -> bool:
        return self._made is not None

    @property
    def records(self) -> tuple[PlacementRecord, ...]:
        return self.placed().records

    @property
    def transfers(self) -> tuple[CopyRecord, ...]:
        return self.placed().transfers if self.moves or self._made is not None else ()

    @property
    def runs(self) -> tuple[tuple[tuple[str, str, str], int], ...]:
        return self.placed().runs

    @property
    def instantiated(self) -> tuple[PlacementRecord, ...]:
        return self.placed().instantiated


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


def collect(called: str = "", elsewhere: frozenset = frozenset(), call: Optional[tuple] = None,
            later: bool = False) -> Union[Placed, Later]:
    """The functions TensorFlow placed for the call of `called` since the last collection; `elsewhere`:
    the functions other threads are calling now, whose graphs wait for those threads' collections.
    The caller hands the records to its captures (`Placed.instantiated`).

    `call`: the call's kernel (function, device, its arguments' devices), as TensorFlow caches it. A
    kernel already collected in this session places nothing (TensorFlow places a function when it makes
    its kernel), so while no graph waits for a thread its collection is skipped: reading the collection
    first waits for every op in flight (in a cluster, the step's own collectives), which would end the
    overlap of one step's Python with the last step's work.

    `later`: the functions' own records are made when first read (`Later`)."""
    session = _session.current()
    if session is None:
        return Placed()
    with session.graph_lock:
        if not session.collecting:
            return Placed()
        if call is not None:
            if call in session.collected and not session.pending and not session.merged:
                return Placed()
            if len(session.collected) > 100_000:  # bounded: a kernel forgotten is only collected again
                session.collected.clear()
            session.collected.add(call)
        functions = _ours(session, called, elsewhere)
        if functions and _tensorflow.tensorboard_tracing():
            warnings.warn(
                "tfplace: a placement capture and tf.summary.trace_on(graph=True) both read TensorFlow's "
                "collection of function graphs, and reading it empties it: trace_export will not show the "
                "functions placed while the capture was open. Trace for TensorBoard "
                "outside the capture.", RuntimeWarning, stacklevel=user_stacklevel())
        unseen = _MERGED.format(called) if called in session.merged else ""
        session.merged.discard(called)
        return _placed_by(functions, called, unseen=unseen, later=later)


def _placed_by(functions: list[Any], called: str, names: Sequence[str] = (),
               instantiated: Sequence[PlacementRecord] = (), unseen: str = "", later: bool = False) -> Union[Placed, Later]:
    """What the placed `functions` hold, for the call of `called`; `names`: the function each one is, for
    its transfers (the call's own name where none is given); `instantiated`: records made before theirs;
    `later`: their own records made when first read (`Later`)."""
    parts = []
    dataset_transfers: list[CopyRecord] = []
    for function_graphs in functions:
        datasets, moved = _function_datasets(function_graphs)
        parts.append((function_graphs, _notes_now(function_graphs.pre_optimization_graph, called), datasets))
        dataset_transfers += moved
    found = Later(parts, names, instantiated, unseen, tuple(dataset_transfers))
    if not later:
        return found.placed()
    unmade = _session.runtime().unmade
    unmade.append(weakref.ref(found))
    while len(unmade) > _UNMADE_LIMIT:  # bounded: the graphs of a few functions wait, the oldest are made
        oldest = unmade.popleft()()
        if oldest is not None:
            oldest.placed()
    return found


def _datasets_of(parts: Sequence[tuple[Any, Any, list[PlacementRecord]]]) -> tuple[PlacementRecord, ...]:
    """The records of the tf.data functions one call of the placed functions (`parts`) instantiates."""
    return tuple(record for _, _, datasets in parts for record in datasets)


def _assembled(parts: Sequence[tuple[Any, Any, list[PlacementRecord]]], names: Sequence[str],
               instantiated: Sequence[PlacementRecord], unseen: str, dataset_transfers: tuple[CopyRecord, ...]) -> Placed:
    """`Placed` from each function's graphs, notes and tf.data functions' records (`_placed_by`)."""
    every: list[PlacementRecord] = []
    made: list[PlacementRecord] = list(instantiated)
    transfers: list[CopyRecord] = []
    runs: Counter = Counter()
    for index, (function_graphs, notes, datasets) in enumerate(parts):
        own, moved, ran = _function_records(function_graphs, notes)
        every += own
        made += own + datasets
        transfers += [copy if copy.function else copy._replace(function=names[index]) for copy in moved] \
            if names else moved
        runs.update(ran)
    return Placed(len(parts), tuple(every), tuple(transfers), tuple(runs.items()), tuple(made), unseen,
                  dataset_transfers, _datasets_of(parts))


def collect_dtensor(op: str, origin: str) -> _dtensor.Ran:
    """What a call of `op` on DTensor's device placed since the last collection (`tfplace.placement.functions._dtensor`):
    the nodes and transfers of its per-device functions, taken apart where TensorFlow's collection merged
    them (DTensor's threads place them at once), the constants DTensor made on each device for it
    (`Const`, executed from C++: no hook sees them), and the per-device calls ("execute" records)."""
    session = _session.current()
    if session is None:
        return _dtensor.Ran(Placed())
    with session.graph_lock:
        if not session.collecting:
            return _dtensor.Ran(Placed())
        fresh = list(_tensorflow.export_run_metadata().function_graphs)
        wrapper = [bool(f.pre_optimization_graph.node) and _is_eager_op_wrapper(f.pre_optimization_graph) for f in fresh]
        constants = [PlacementRecord("Const", "", canonical_name(n.device), Kind.EXECUTE, origin=Origin.FRAMEWORK)
                     for f, is_wrapper in zip(fresh, wrapper) if is_wrapper
                     for n in f.pre_optimization_graph.node if n.op == "Const"]
        found = _instances.split([f for f, is_wrapper in zip(fresh, wrapper) if not is_wrapper])
        names = [_dtensor.function_name(op, instance) for instance in found]
        return _dtensor.Ran(_placed_by(found, op, names, constants),
                            tuple(_dtensor.execute_record(name, i.device, origin) for name, i in zip(names, found)))
