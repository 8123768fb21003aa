"""What a `tf.compat.v1.Session` placed and ran: its graph's nodes as its placer printed them, each run's
executions and the transfers between devices inside it.

A Session places its whole graph (every node, fetched or not) at its first run, and again at the first run
after the graph grew; each run then executes the part its fetches need, after Grappler, split into one
partition graph per device. No op callback or graph collection sees any of it: `run()` here asks the
run for its partition graphs (`RunOptions(output_partition_graphs=True)`) the first time a Session runs a
(graph, fetches, feeds) combination, and reads from them:

* where each node the run needs was placed: the placer's nodes (`_lowering.placer_nodes` of the graph)
  on the devices their partitions give them; a node Grappler folded away is "removed" (`_placed`);
* what each run executes (`runs`) and what crosses devices (`_Send` between partitions: the same oracle as
  functions, `_transfers.function_transfers`), kept per combination for the runs after it.

Nodes the Session placed that no run of the block needed (its placer printed them; no partition says
where) are not recorded unless the placer's rule leaves no doubt: `Ran.unseen` says how many and which. A
Session made, or run, while nothing listened may have placed its graph before the block: its runs are
recorded, its placement is not, and `unseen` says so.

Example:
    >>> import tensorflow as tf
    >>> from tfplace.placement.taking import _sessions
    >>> graph = tf.Graph()
    >>> with graph.as_default():
    ...     c = tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)), name="c")
    >>> sorted(_sessions.needed(graph.as_graph_def(), ["c"], ()))
    ['c', 'ones', 'ones_1']
"""

from __future__ import annotations

import itertools
import warnings
from collections import Counter
from typing import Any, Iterable, NamedTuple, Optional, Sequence

from tensorflow import nest
from tensorflow.core.protobuf import config_pb2

from tfplace import _tensorflow
from tfplace._devices import requested_name
from tfplace.placement.functions import _lowering, _placed, _transfers
from tfplace.placement.ops import _kernel_table, _kernels
from tfplace.placement.records import _groups
from tfplace.placement.records._records import ARGUMENT_OPS, CopyRecord, Kind, Origin, PlacementRecord
from tfplace.placement.session import _session
from tfplace.placement.session._sources import stack_user_line, user_line, user_stacklevel
from tfplace.placement.taking import _events
from tfplace.placement.taking._callback import thread_hooks

__all__ = ["Ran", "made", "disagreements", "Run", "needed", "SESSION_GRAPH", "run", "init", "unasked_run",
           "unasked_partial_run", "unasked_callable", "SESSION_EVENT"]

SESSION_GRAPH = "a tf.compat.v1.Session's graph"  # what a transfer's `function` says
SESSION_EVENT = "tfplace_session_run"  # a run's event in a timed block's profile: stats `source`, `session`
_KNOWN = 256  # (graph version, fetches, feeds) combinations kept per Session


class Ran(NamedTuple):
    """One run: `records` the nodes TensorFlow placed at it (the graph's, when it placed it; else none),
    `runs` ((device, op, category), count) of what it executed, `transfers` what crossed devices inside
    it, `unseen` why some placement is not recorded ("" when all is)."""

    records: tuple[PlacementRecord, ...] = ()
    runs: tuple[tuple[tuple[str, str, str], int], ...] = ()
    transfers: tuple[CopyRecord, ...] = ()
    unseen: str = ""


_NUMBERS = itertools.count(1)


class _State:
    """What tfplace knows of one Session: the graph version it last placed (-1: none yet; None: unknown,
    the Session was made or ran while nothing listened), what each combination it ran executes, and in
    which listening period (`Runtime.listening`) it was last seen."""

    def __init__(self, placed: Optional[int]) -> None:
        self.placed = placed
        self.known: dict[tuple, Ran] = {}
        self.seen = _session.runtime().listening
        self.number = next(_NUMBERS)  # the Session's, for a profile's runs (an `id()` is reused once freed)


def made(session: Any) -> None:
    """`session` was made while a capture or guard listened: its first run places its graph."""
    _session.runtime().sessions[session] = _State(-1)


def _state(session: Any, version: int) -> _State:
    """What is known of `session` now: between two listening periods it may have run unseen, placing its
    graph (a first run, or a grown graph): then where it placed it last is unknown."""
    runtime = _session.runtime()
    state = runtime.sessions.get(session)
    if state is None:
        state = runtime.sessions[session] = _State(None)
    elif state.seen != runtime.listening:
        if state.placed is not None and state.placed != version:
            state.placed = None
        state.seen = runtime.listening
    return state


def disagreements(config: Any) -> str:
    """What a Session given its own `ConfigProto` does not share with the process's configuration
    (`tfplace.configure()`, `tf.config`): one line, "" when nothing differs. A Session made without a
    config takes the process's."""
    if config is None:
        return ""
    found = []
    cpus = _tensorflow.logical_cpus()
    if cpus > 1 and config.device_count.get("CPU", 1) != cpus:
        found.append(f"it has {config.device_count.get('CPU', 1)} CPU device(s), not the {cpus} logical CPUs of "
                     f"configure(logical_cpus={cpus}) or tf.config (set ConfigProto(device_count={{'CPU': {cpus}}}))")
    if _tensorflow.log_placement() and not config.log_device_placement:
        found.append("TensorFlow does not log its placement (ConfigProto(log_device_placement=True) does)")
    if _tensorflow.soft_placement() != config.allow_soft_placement:
        found.append(f"its soft placement is {config.allow_soft_placement}, the process's "
                     f"{_tensorflow.soft_placement()} (ConfigProto(allow_soft_placement=...))")
    return ("tfplace: a tf.compat.v1.Session made with its own ConfigProto does not take the process's "
            "configuration: " + "; ".join(found)) if found else ""


def _names(things: Iterable[Any]) -> tuple[str, ...]:
    return tuple(getattr(thing, "name", None) or str(thing) for thing in things)


def needed(graph_def: Any, fetches: Sequence[str], feeds: Iterable[str]) -> set[str]:
    """The nodes of `graph_def` a run of `fetches` (tensor or node names) executes, given the `feeds`
    (tensor names): what DirectSession's pruning keeps."""
    inputs = {node.name: list(node.input) for node in graph_def.node}
    fed = set(feeds)
    todo = [name.partition(":")[0].lstrip("^") for name in fetches]
    found: set[str] = set()
    while todo:
        name = todo.pop()
        if name in found or name not in inputs:
            continue
        found.add(name)
        for tensor in inputs[name]:
            full = tensor if ":" in tensor or tensor.startswith("^") else tensor + ":0"
            if full not in fed:
                todo.append(tensor.lstrip("^").partition(":")[0])
    return found


def _line(operation: Any) -> str:
    """The user's line that made a graph's operation ("" for one imported from a saved graph: no stack)."""
    stack = getattr(operation, "traceback", None)
    return stack_user_line(stack) if stack else ""


# Ops TensorFlow's placer puts beside their input (its heuristic B: metadata and identities): left unseen.
_BESIDE_INPUT = frozenset({"Identity", "IdentityN", "Shape", "ShapeN", "Size", "Rank", "Reshape"})


def _unrun(nodes: Sequence[Any], keep: set[str], known: dict[str, str],
           graph_def: Any) -> list[tuple[Any, PlacementRecord]]:
    """The nodes no run needed (a fed placeholder, a tensor never fetched) that TensorFlow's placer puts by
    a rule that leaves no doubt (placer.cc): one that asks for an existing device with a kernel there for
    its dtypes; a "generator" (no input, one consumer) beside its one consumer; else, asking for nothing,
    the first device of the machine with a kernel for it (GPU:0 before CPU:0). A node colocated with
    another (`_class`), reading a resource, or of a kind the placer puts beside its input, stays unseen."""
    table = _kernel_table.live()
    devices = _tensorflow.logical_device_names()
    attrs = {node.name: node.attr for node in graph_def.node}
    consumers: dict[str, list[str]] = {}
    for node in nodes:
        for tensor in node.inputs:
            consumers.setdefault(tensor.lstrip("^").partition(":")[0], []).append(node.name)
    found = []
    for node in nodes:
        if node.origin in keep or node.op in _BESIDE_INPUT or "_class" in attrs.get(node.origin, {}) \
                or _kernels.resource_inputs(node.op) or any(kind == "resource" for _, kind in node.dtypes):
            continue
        requested = requested_name(node.requested) if node.requested else ""
        if requested:
            choices = [requested] if requested in devices else []
        elif not node.inputs and len(consumers.get(node.name, ())) == 1:  # a generator: beside its consumer
            choices = [known[consumers[node.name][0]]] if consumers[node.name][0] in known else []
        else:
            choices = sorted(devices, key=lambda d: (0 if "/device:GPU:" in d else 1, d))[:1] if not node.inputs else []
        for device in choices:
            kind = device.rpartition("/device:")[2].rpartition(":")[0]
            if table.supports(node.op, kind, node.dtypes):
                found.append((node, PlacementRecord(node.op, node.name, device, Kind.PLACE, requested=requested,
                                                    dtypes=node.dtypes, origin=Origin.USER)))
    return found


class Run:
    """One `Session.run` while something listens: `options` and `metadata` to run it with, then
    `finish()` what it placed and ran."""

    def __init__(self, session: Any, fetches: Any, feed_dict: Any, options: Any, run_metadata: Any) -> None:
        self.session = session
        self.graph = session.graph
        self.fetches = _names(nest.flatten(fetches))
        self.feeds = _names(nest.flatten(list(feed_dict))) if feed_dict else ()
        self.version = self.graph.version
        self.state = _state(session, self.version)
        self.key = (self.version, self.fetches, tuple(sorted(self.feeds)))
        self.placing = self.state.placed is not None and self.state.placed != self.version
        self.asked = self.placing or self.key not in self.state.known
        self.user_metadata = run_metadata
        self.user_wanted = bool(options is not None and options.output_partition_graphs)
        self.options, self.metadata = options, run_metadata
        if self.asked:
            self.options = config_pb2.RunOptions()
            if options is not None:
                self.options.CopyFrom(options)
            self.options.output_partition_graphs = True
            self.metadata = run_metadata if run_metadata is not None else config_pb2.RunMetadata()

    def finish(self, line: str) -> Ran:
        """What the run placed and ran (`line`: the user's line of the run)."""
        state = self.state
        if self.asked:
            found = self._read(line)
            if self.user_metadata is not None and not self.user_wanted:
                del self.user_metadata.partition_graphs[:]  # the user's RunMetadata as they asked for it
            if len(state.known) >= _KNOWN:
                state.known.pop(next(iter(state.known)))
            state.known[self.key] = found._replace(records=())
        else:
            found = state.known[self.key]
            if found.transfers and found.transfers[0].call != line:  # the same run from another line
                found = state.known[self.key] = found._replace(
                    transfers=tuple(t._replace(call=line, source=line if t.node == "(fetched)" else t.source)
                                    for t in found.transfers))
        if self.placing:
            state.placed = self.version
            return found
        unseen = "" if state.placed is not None else (
            f"the block ran a tf.compat.v1.Session that was made or ran while no capture or guard listened (at "
            f"{line}): a Session places its graph at its first run and after the graph grows, so whether it placed "
            "it before the block is unknown and its nodes' placement is not recorded (its runs and transfers are). "
            "Open the capture before the Session is made, around its runs")
        return found._replace(records=(), unseen=unseen)

    def _sized(self, transfer: CopyRecord) -> CopyRecord:
        """`transfer` naming the tensor as the graph does (a fed tensor, not the run's `_arg_` node), with its
        bytes where its shape is static."""
        name = transfer.tensor
        for feed in self.feeds:
            if name.startswith("_arg_" + feed.replace(":", "_") + "_"):
                name = feed
        try:
            tensor = self.graph.get_tensor_by_name(name)
        except (KeyError, ValueError):
            return transfer
        shape = tensor.shape
        size = shape.num_elements() * tensor.dtype.size if shape.is_fully_defined() else None
        return transfer._replace(tensor=name, bytes=transfer.bytes if size is None else size)

    def _read(self, line: str) -> Ran:
        graph_def = self.graph.as_graph_def()
        partitions = list(self.metadata.partition_graphs)
        keep = needed(graph_def, self.fetches, self.feeds)
        nodes = _lowering.placer_nodes(graph_def)
        ran = [node for node in nodes if node.origin in keep]
        operations = {op.name: op for op in self.graph.get_operations()}
        sources = {node.name: _line(operations.get(node.origin)) for node in ran}
        records = [record._replace(source=sources.get(record.name, ""), origin=Origin.USER)
                   for record in _placed.placed_records(ran, [n for p in partitions for n in p.node])]
        runs = Counter((r.device, r.op, _groups.category(r)) for r in records
                       if r.kind == Kind.PLACE and r.op not in ARGUMENT_OPS)
        moved = _transfers.function_transfers(partitions, {n.name: n for n in nodes}, sources,
                                              devices={r.name: r.device for r in records})
        transfers = tuple(self._sized(t)._replace(function=SESSION_GRAPH, call=line) for t in moved)
        # a fetched value goes to the client's device: the run's `_retval_` node, made by the run itself
        transfers = tuple(t._replace(node="(fetched)", source=line) if t.node.startswith("_retval_") else t
                          for t in transfers)
        unseen = ""
        if self.placing:
            predicted = _unrun(nodes, keep, {r.name: r.device for r in records if r.device}, graph_def)
            records += [record._replace(source=_line(operations.get(node.origin))) for node, record in predicted]
            done = {node.name for node, _ in predicted}
            others = [node.name for node in nodes if node.origin not in keep and node.name not in done]
            if others:
                shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
                unseen = (f"a tf.compat.v1.Session placed {len(others)} node(s) of its graph that no run of the "
                          f"block needed ({shown}, at {line}): TensorFlow's log prints where; no partition of a "
                          "run says it, so they are not recorded")
        return Ran(tuple(records) if self.placing else (), tuple(runs.items()), transfers, unseen)


# What `tfplace.placement.taking._hooks` puts in TensorFlow's place while something listens: listeners hear of each run
# as an `Event.SESSION` whose `about` is its `Ran`.


def _tell(hooks: Sequence[Any], ran: Ran) -> None:
    for hook in hooks:
        hook.records(_events.EventKey(_events.Event.SESSION, ran), ran.records)


def run(session: Any, fetches: Any, feed_dict: Any = None, options: Any = None, run_metadata: Any = None) -> Any:
    """`Session.run` while hooks listen: the run asked for what it placed and ran (`Run`)."""
    hooks = thread_hooks()
    if not hooks:
        return _tensorflow.SESSION_PUBLIC_RUN.original(session, fetches, feed_dict, options, run_metadata)
    asked = Run(session, fetches, feed_dict, options, run_metadata)
    thread = hooks[0].session.thread  # while set, the run records itself: `unasked_run` stays quiet
    thread.session_run = True
    line = user_line()
    try:  # in a timed block's profile, the run names its Session and line: one loop is one Session's runs of a line
        with _tensorflow.trace_me(SESSION_EVENT, source=line or "", session=asked.state.number):
            result = _tensorflow.SESSION_PUBLIC_RUN.original(session, fetches, feed_dict, asked.options,
                                                             asked.metadata)
    except Exception as error:
        if asked.placing:  # TensorFlow may have placed the graph before the run failed: unknown, so said,
            asked.state.placed = asked.version  # and not taken as placed again by the next run
            _tell(hooks, Ran(unseen=f"a tf.compat.v1.Session's run at {user_line() or 'an unknown line'} failed "
                                    f"({type(error).__name__}): what its Session placed for it is not recorded"))
        raise
    finally:
        thread.session_run = False
    _tell(hooks, asked.finish(line))
    return result


def init(session: Any, target: Any = "", graph: Any = None, config: Any = None) -> None:
    """A Session made while hooks listen: its first run places its graph; what its own config does not share
    with the process's configuration is said once."""
    _tensorflow.SESSION_INIT.original(session, target, graph, config)
    made(session)
    differs = disagreements(config)
    warned = _session.runtime().warned
    if differs and differs not in warned:
        warned.add(differs)
        warnings.warn(differs, RuntimeWarning, stacklevel=user_stacklevel())


def _unasked(session: Any, how: str) -> None:
    """A Session ran its graph where it could not be asked what it placed (`how`): none of it is recorded."""
    hooks = thread_hooks()
    if not hooks or getattr(hooks[0].session.thread, "session_run", False):
        return
    graph = getattr(session, "graph", None)
    nodes = len(graph.get_operations()) if graph is not None else 0
    _tell(hooks, Ran(unseen=(
        f"the block ran a tf.compat.v1.Session's graph ({nodes} node(s), at {user_line() or 'an unknown line'}) "
        f"through {how}: the Session places and runs it where tfplace's hooks do not reach, so none of its nodes "
        "(nor their transfers) is recorded; TensorFlow's own log has them (ConfigProto(log_device_placement=True), "
        "or configure(log_placement=True) for a Session made without a config). Session.run is recorded")))


def unasked_run(session: Any, *args: Any) -> Any:
    """`BaseSession._call_tf_sessionrun`: a callable from `make_callable` (under `run`, quiet)."""
    _unasked(session, "a callable")
    return _tensorflow.SESSION_RUN.original(session, *args)


def unasked_partial_run(session: Any, *args: Any) -> Any:
    """`BaseSession._call_tf_sessionprun`: a step of `partial_run`."""
    _unasked(session, "a partial run")
    return _tensorflow.SESSION_PARTIAL_RUN.original(session, *args)


def unasked_callable(runner: Any, *args: Any, **kwargs: Any) -> Any:
    """`BaseSession._Callable.__call__`: a callable made from options."""
    _unasked(_tensorflow.callable_session(runner), "a callable")
    return _tensorflow.SESSION_CALLABLE.original(runner, *args, **kwargs)
