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
import time
import warnings
from typing import Any, Optional, Union

from tfplace import _tensorflow
from tfplace._devices import canonical_name
from tfplace.placement.functions import _collected, _dtensor, _function_sources, _instances, _placed
from tfplace.placement.records._recorder import Recorder
from tfplace.placement.records._records import ARGUMENT_OPS, Kind, Origin, PlacementRecord
from tfplace.placement.session import _session
from tfplace.placement.session._sources import user_stacklevel

__all__ = ["attach", "awaits", "detach", "collect", "collect_dtensor", "start"]

# Graph collection's state is the capture session's (`tfplace.placement.session._session`): the open
# captures' logs and the guards (which read what `collect()` returns), in every thread, with whether
# they keep sources and the thread that opened them (`logs`); graphs a call in another thread placed,
# collected before that thread's own callback asked (`pending`: the functions traced with their
# nodes, the graphs; oldest first, until that call collects them); graphs as written whose placed
# graph another thread's collection holds (`unplaced`, for `unplaced_for` collections); functions whose
# transfers another thread's call took and lost (`merged`); per log, the functions whose first call found
# no graph while other threads called (`awaited`: they may come with a later collection; the log is
# incomplete at its end for those that did not); whether collection is on
# (`collecting`), or waits for the runtime to start (`waiting`: the op callback starts it).
_PENDING_LIMIT = 64
_UNPLACED_COLLECTIONS = 16
# A capture ending while it awaits a first call's graphs, and other threads are calling functions, collects
# again every `_AWAIT_POLL` s for up to `_AWAIT_SECONDS` s: the graphs come with one of those calls.
_AWAIT_SECONDS = 1.0
_AWAIT_POLL = 0.002
_MERGED = ("TensorFlow placed functions of several threads at the same time, and its graph collection gave the "
           "graphs of {} to another thread's call, which ended later: this log lacks its nodes. Call each tf.function "
           "once before starting the threads (or one thread at a time) to record them")


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
        raise RuntimeError("tfplace.placement.functions._graphs.attach received a log while no capture session "
                           "was held: allowed only inside `with _session.hold():` (captures and guards hold it)")
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
    thread opened, then stops feeding `log` (and collecting, after the last log). A function whose first
    call in the block found no graph, and whose graph has not come since, makes `log` incomplete, after
    waiting up to `_AWAIT_SECONDS` while other threads' calls, with which it may come, are in flight."""
    session = _session.current()
    if session is None:
        return
    deadline = time.monotonic() + _AWAIT_SECONDS
    with session.graph_lock:
        _collect_for_logs(session)
        while session.awaited.get(id(log)) and in_flight_elsewhere(session) and time.monotonic() < deadline:
            session.graph_lock.release()  # the graphs it awaits come with a call another thread is making
            try:
                time.sleep(_AWAIT_POLL)
            finally:
                session.graph_lock.acquire()
            _collect_for_logs(session)
        missing = session.awaited.pop(id(log), set())
        if missing and isinstance(log, Recorder):
            log.mark_incomplete(_MERGED.format(", ".join(sorted(missing))), stacklevel=user_stacklevel())
        session.logs[:] = [entry for entry in session.logs if entry[0] is not log]
        session.waiting = session.waiting and bool(session.logs)
        _await_runtime(session, session.waiting)
        if not session.logs and session.collecting:
            if not _tensorflow.tensorboard_tracing():  # TensorBoard's trace keeps collecting after the capture
                _tensorflow.disable_graph_collection()
            session.collecting = False


def _collect_for_logs(session: _session.Session) -> None:
    """Collects what this thread's calls placed and no callback collected yet for the logs this thread opened."""
    here = threading.get_ident()
    pending = collect(elsewhere=in_flight_elsewhere(session))
    for other, sources, thread in session.logs if pending.functions else ():
        if isinstance(other, Recorder) and thread == here:
            other.add(pending.instantiated if sources else _placed.without_sources(pending.instantiated),
                      pending.transfers)


def _taken_apart(session: _session.Session, collected: Any) -> list[tuple[Any, bool]]:
    """The functions of collected entries that are not eager ops' wrappers, each with whether it is whole.
    Entries that merged several threads' functions (names repeat in the graph as written or in the placed
    graph), entries with only a placed graph (its graph as written went to another thread's collection) and
    the graphs as written that waited for their placed graph (`session.unplaced`) are taken apart together
    (`_instances.split`); a function of them on several devices is whole only if its partition per device
    came with it."""
    found: list[tuple[Any, bool]] = []
    merged = list(session.unplaced)
    for graphs in collected:
        names = [n.name for n in graphs.pre_optimization_graph.node]
        placed = [n.name for n in graphs.post_optimization_graph.node]
        if not names and not placed:
            continue
        if names and len(set(names)) == len(names) and len(set(placed)) == len(placed):
            found.append((graphs, True))
        else:
            merged.append(graphs)
    if len(merged) > len(session.unplaced):
        session.unplaced[:], session.unplaced_for = [], 0
        for instance in _instances.split(merged, session.unplaced):
            devices = {n.device for n in instance.post_optimization_graph.node if n.device}
            found.append((instance, len(devices) <= max(1, len(instance.partition_graphs))))
        del session.unplaced[:-_PENDING_LIMIT]
    elif session.unplaced:  # their placed graphs come with one of the next collections, or never
        session.unplaced_for += 1
        if session.unplaced_for > _UNPLACED_COLLECTIONS:
            session.unplaced[:] = []
    return [(graphs, whole) for graphs, whole in found
            if not _collected.is_eager_op_wrapper(graphs.pre_optimization_graph)]


def _awaited(session: _session.Session, here: int) -> tuple[set[str], set[str]]:
    """The functions whose graphs the logs of this thread (`here`) await, and those other threads' logs await."""
    mine: set[str] = set()
    others: set[str] = set()
    for log, _, thread in session.logs if session.awaited else ():
        (mine if thread == here else others).update(session.awaited.get(id(log), ()))
    return mine, others


def _ours(session: _session.Session, called: str, elsewhere: frozenset, waits: tuple[set[str], set[str]],
          first: bool = True) -> list[Any]:
    """The graphs TensorFlow placed since the last collection that belong to the call of `called` (or, with
    no call, to a capture's end): a graph whose nodes are those of a function another thread is calling now
    (`elsewhere`), or whose graph a log awaits (`waits`: this thread's logs', the other threads'), and not
    `called`'s, waits for that function's next call or the end of the capture that awaits it (its runs and
    transfers are never another function's); the graphs that waited for `called` (at a capture's end: for
    the functions this thread awaits) come back, and this thread's logs await them no more. While threads
    place functions at once, a graph of another function `called` does not call is never `called`'s: its
    own call ended before TensorFlow's collection gave it up, and it waits in case that function runs again.

    Functions with the same nodes (each thread's `tf.function` of the same code) place graphs no node tells
    apart: a call takes one of them per function it wants (none for a call of a kernel collected before,
    `first` False, unless its log awaits its graph), and leaves the others to the functions of the same nodes
    that other threads call or await."""
    pending = session.pending
    wanted = {called} if called else waits[0]
    others = elsewhere | waits[0] | waits[1]
    # functions traced since a graph began to wait may have its nodes too
    waited = [(owners | frozenset(_function_sources.functions_with_nodes(_node_names(graphs))), graphs)
              for owners, graphs in pending]
    found = [(owners, graphs) for owners, graphs in waited if owners & wanted]  # (owners, graphs) this call may take
    pending[:] = [(owners, graphs) for owners, graphs in waited if not owners & wanted]
    taken = _taken_apart(session, _tensorflow.export_run_metadata().function_graphs)
    at_once = bool(elsewhere) or any(isinstance(graphs, _instances.Instance) for graphs, _ in taken)
    calls = {f.signature.name for graphs, _ in taken for f in graphs.pre_optimization_graph.library.function}
    for graphs, whole in taken:
        owners = frozenset(_function_sources.functions_with_nodes(_node_names(graphs)))
        if not whole:  # its transfers are in partitions another thread's collection holds
            session.merged.update((owners or {called, *elsewhere}) - {""})
            continue
        if not owners & wanted and (owners & others or at_once and owners and not owners & calls):
            pending.append((owners, graphs))
        else:
            found.append((owners, graphs))
    mine: list[Any] = []
    came: set[str] = set()
    # per node names that functions other threads call or await share, the graphs taken: one per function that
    # awaits its graph, or whose kernel is new (a kernel collected before places nothing)
    shared: dict[tuple[str, ...], int] = {}
    for owners, graphs in found:
        if owners & wanted and owners - wanted & others:
            nodes = _node_names(graphs)
            if shared.get(nodes, 0) >= (len(owners & wanted) if first or not called else 0):
                pending.append((owners, graphs))
                continue
            shared[nodes] = shared.get(nodes, 0) + 1
            owners = owners & wanted
        mine.append(graphs)
        came.update(owners)
    del pending[:-_PENDING_LIMIT]  # a call that never collects (a thread without a capture) leaves them
    if came & waits[0]:
        here = threading.get_ident()
        for log, _, thread in session.logs:
            if thread == here and id(log) in session.awaited:
                session.awaited[id(log)] -= came
                if not session.awaited[id(log)]:  # while none is awaited, later calls skip collection
                    del session.awaited[id(log)]
    return mine


def _node_names(graphs: Any) -> tuple[str, ...]:
    """The names of a collected function's nodes as written, its arguments and results left out, sorted."""
    return tuple(sorted(n.name for n in graphs.pre_optimization_graph.node if n.op not in ARGUMENT_OPS))


def awaits(session: _session.Session, called: str) -> bool:
    """Whether a log of this thread awaits the graphs of `called` (its first call found none)."""
    return called in _awaited(session, threading.get_ident())[0]


def collect(called: str = "", elsewhere: frozenset = frozenset(), call: Optional[tuple] = None,
            later: bool = False) -> Union[_collected.Placed, _collected.Later]:
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
        return _collected.Placed()
    with session.graph_lock:
        if not session.collecting:
            return _collected.Placed()
        first = call is not None and call not in session.collected
        if call is not None:
            if not first and not (session.pending or session.unplaced or session.merged or session.awaited):
                return _collected.Placed()
            if len(session.collected) > 100_000:  # bounded: a kernel forgotten is only collected again
                session.collected.clear()
            session.collected.add(call)
        waits = _awaited(session, threading.get_ident())
        functions = _ours(session, called, elsewhere, waits, first or call is None or called in waits[0])
        if first and not functions and elsewhere and _function_sources.notes(called):
            # traced in a capture, first called now while other threads call: another thread's collection,
            # or a later one of this thread's, holds its graphs; the log is incomplete if they never come
            here = threading.get_ident()
            for log, _, thread in session.logs:
                if thread == here and isinstance(log, Recorder):
                    session.awaited.setdefault(id(log), set()).add(called)
        if functions and _tensorflow.tensorboard_tracing():
            warnings.warn(
                "tfplace: a placement capture and tf.summary.trace_on(graph=True) both read TensorFlow's "
                "collection of function graphs, and reading it empties it: trace_export will not show the "
                "functions placed while the capture was open. Trace for TensorBoard "
                "outside the capture.", RuntimeWarning, stacklevel=user_stacklevel())
        unseen = _MERGED.format(called) if called in session.merged else ""
        session.merged.discard(called)
        return _collected.placed_by(functions, called, unseen=unseen, later=later)


def collect_dtensor(op: str, origin: str) -> _dtensor.Ran:
    """What a call of `op` on DTensor's device placed since the last collection
    (`tfplace.placement.functions._dtensor`): the nodes and transfers of its per-device functions, taken apart
    where TensorFlow's collection merged them (DTensor's threads place them at once), the constants DTensor made on
    each device for it (`Const`, executed from C++: no hook sees them), the per-device calls ("execute" records) and
    the copies of their arguments."""
    session = _session.current()
    if session is None:
        return _dtensor.Ran(_collected.Placed())
    with session.graph_lock:
        if not session.collecting:
            return _dtensor.Ran(_collected.Placed())
        fresh = list(_tensorflow.export_run_metadata().function_graphs)
        wrapper = [bool(f.pre_optimization_graph.node) and _collected.is_eager_op_wrapper(f.pre_optimization_graph)
                   for f in fresh]
        constants = [PlacementRecord("Const", "", canonical_name(n.device), Kind.EXECUTE, origin=Origin.FRAMEWORK)
                     for f, is_wrapper in zip(fresh, wrapper) if is_wrapper
                     for n in f.pre_optimization_graph.node if n.op == "Const"]
        found = _instances.split([f for f, is_wrapper in zip(fresh, wrapper) if not is_wrapper])
        names = [_dtensor.function_name(op, instance) for instance in found]
        return _dtensor.Ran(_collected.placed_by(found, op, names, constants),
                            tuple(_dtensor.execute_record(name, i.device, origin) for name, i in zip(names, found)),
                            tuple(c for name, i in zip(names, found) for c in _dtensor.argument_copies(name, i)))
