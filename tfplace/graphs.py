"""Function placement from TensorFlow's graph collection: "place" records for every node
of every function TensorFlow places while a capture is open.

While at least one capture is open, TensorFlow's eager context collects the
graphs of the functions it instantiates (`enable_graph_collection`);
`collect()` takes them (`export_run_metadata`, which also empties the
collection) and gives each open log one record per placed node. The
single-op functions TensorFlow builds to run eager ops are left out: their op
already has its "execute" record. TensorBoard's `tf.summary.trace_on(graph=True)`
reads the same collection: the functions a capture takes are missing from its
trace (with a warning), and collection stays on for it after the capture.

Example:
    >>> import tensorflow as tf
    >>> from tfplace import graphs
    >>> from tfplace.placement_log import PlacementLog
    >>> x = tf.ones(2)           # collection needs the runtime started
    >>> log = PlacementLog()
    >>> graphs.attach(log)
    >>> _ = tf.function(lambda v: v * 2.0)(x)
    >>> graphs.detach(log)
    >>> [(r.op, r.kind) for r in log.records if r.op == "Mul"]
    [('Mul', 'place')]
"""

from __future__ import annotations

import re
import threading
import warnings
from typing import Any

from tensorflow.python.eager import context
from tensorflow.python.ops import summary_ops_v2

from tfplace import kernels, tfstate
from tfplace.devices import canonical_name
from tfplace.placement_log import PlacementLog
from tfplace.records import PLUMBING, PlacementRecord
from tfplace.sources import user_stacklevel

__all__ = ["attach", "detach", "collect", "start"]

_lock = threading.RLock()
_logs: list[PlacementLog] = []  # the open captures' logs, in every thread
_collecting = False


def _tensorboard_tracing() -> bool:
    """True while `tf.summary.trace_on(graph=True)` collects function graphs for TensorBoard."""
    trace = getattr(summary_ops_v2, "_current_trace_context", None)
    return bool(trace and trace.graph and not trace.profiler)


def start() -> None:
    """Starts graph collection if a capture is open and the runtime has started (it never starts the runtime)."""
    global _collecting
    if _collecting or not _logs:
        return
    with _lock:
        if not _collecting and _logs and tfstate.runtime_started():
            context.context().enable_graph_collection()
            _collecting = True


def attach(log: PlacementLog) -> None:
    """Gives `log` the "place" records of every function placed from now until `detach(log)`."""
    with _lock:
        _logs.append(log)
        start()


def detach(log: PlacementLog) -> None:
    """Collects what is pending, then stops feeding `log` (and collecting, after the last log)."""
    global _collecting
    with _lock:
        collect()
        _logs.remove(log)
        if not _logs and _collecting:
            if not _tensorboard_tracing():  # TensorBoard's trace keeps collecting after the capture
                context.context().disable_graph_collection()
            _collecting = False


_NUMBERED = re.compile(r"_\d+$")


def _is_eager_op_wrapper(function_graphs: Any) -> bool:
    """True for the function TensorFlow wraps around one eager op.

    Its nodes are that op, named after it and pinned to a full device name, and
    its arguments are named after the op's inputs (`a`, `b` for MatMul;
    `inputs_0`, ... for a list), where a user's function names them after its
    Python parameters.
    """
    graph = function_graphs.pre_optimization_graph
    nodes = [n for n in graph.node if n.op not in PLUMBING]
    if not nodes or not all(n.name == n.op and n.device.startswith("/job:") for n in nodes):
        return False
    ops = {kernels.op_type(n.op) for n in nodes}
    inputs = kernels.input_names(ops.pop()) if len(ops) == 1 else frozenset()
    return all(_NUMBERED.sub("", n.name).replace("__", "_") in inputs
               for n in graph.node if n.op in ("_Arg", "_DeviceArg"))


def _records(function_graphs: Any) -> list[PlacementRecord]:
    placed = function_graphs.post_optimization_graph.node or [
        n for g in function_graphs.partition_graphs for n in g.node]
    return [PlacementRecord(kernels.op_type(n.op), n.name, canonical_name(n.device), "place")
            for n in placed if n.device]


def collect() -> int:
    """Hands the functions placed since the last call to every open log; returns how many there were."""
    with _lock:
        if not _collecting:
            return 0
        metadata = context.context().export_run_metadata()
        functions = [f for f in metadata.function_graphs if not _is_eager_op_wrapper(f)]
        if functions and _tensorboard_tracing():
            warnings.warn(
                "tfplace: a placement capture and tf.summary.trace_on(graph=True) both read TensorFlow's "
                "collection of function graphs, and reading it empties it: trace_export will not show the "
                "functions placed while the capture was open. Trace for TensorBoard "
                "outside the capture.", RuntimeWarning, stacklevel=user_stacklevel())
        for function_graphs in functions:
            records = _records(function_graphs)
            for log in _logs:
                log.add_places(records)
        return len(functions)
