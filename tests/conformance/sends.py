"""The oracle for function transfers: cross-device `_Send` edges in TensorFlow's partitioned graphs.

It reads the graphs TensorFlow hands graph collection (teeing the export tfplace makes, since
reading the collection empties it) and counts, per function call, the `_Send` nodes whose
`send_device` and `recv_device` differ, on its own: no tfplace code decides what counts. Control
edges count (the partitioner's dummy `.../ctrl/_N` scalar: a transfer of 0 bytes, as the contract
says). Left out: host-memory values (`_HostSend`/`_HostRecv`, resource handles, strings). A function's edges count
once per call: they are attributed to the call after which TensorFlow reported the function's graphs (an op on
DTensor's device is such a call, keyed by its inputs' shapes: DTensor runs it as per-device functions).
The functions graph collection never reports (tf.data's, per instantiation) are read from the partitions
TensorFlow's own graph dumper writes (`dumped_sends`).

Example (inside a test, around a capture):
    with SendOracle() as oracle, tfplace.capture_placement() as log, oracle.calls():
        f(x)
    assert oracle.finish() == len([c for c in log.copies if c.kind == "function"])
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Optional

import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.client import session as _session_lib

from tfplace import _tensorflow

_HOST_TYPES = {types_pb2.DT_RESOURCE, types_pb2.DT_STRING}


_PLUMBING = frozenset({"_Arg", "_Retval", "_DeviceArg", "_DeviceRetval"})


def is_eager_wrapper(graph: Any) -> bool:
    """The one-op function TensorFlow runs an eager op in (its op named like its type): not a function the
    program called (an eager op reading a tensor of another task receives it inside this wrapper)."""
    nodes = [n for n in graph.node if n.op not in _PLUMBING]
    return bool(nodes) and all(n.name == n.op for n in nodes)


def cross_device_sends(function_graphs: Any) -> list[Any]:
    """The `_Send` nodes of one function's partitions that move a value of the program between devices."""
    if is_eager_wrapper(function_graphs.pre_optimization_graph):
        return []
    return _sends(function_graphs.partition_graphs)


def _sends(partitions: Any) -> list[Any]:
    host_recvs = {(node.attr["tensor_name"].s, node.attr["recv_device"].s)
                  for partition in partitions for node in partition.node
                  if node.op == "_HostRecv"}
    found = []
    for partition in partitions:
        for node in partition.node:
            if node.op != "_Send" or node.attr["send_device"].s == node.attr["recv_device"].s:
                continue
            if node.attr["T"].type in _HOST_TYPES:
                continue
            if (node.attr["tensor_name"].s, node.attr["recv_device"].s) in host_recvs:
                continue
            found.append(node)
    return found


class SendOracle:
    """Counts the cross-device edges of every function call made while it watches (see above).

    `with oracle:` tees the exports (open it before the capture, so that it also sees the export
    the capture makes when it closes); `with oracle.calls():` counts function calls (open it inside
    the capture, so that its op callback runs after tfplace's, which exports the graphs a call placed).
    """

    def __init__(self) -> None:
        self.pending = 0
        self.per_call: dict[tuple, int] = {}
        self.calls_seen = 0
        self.total = 0
        self.sends: list[Any] = []
        self.sizes: dict[str, Optional[int]] = {}  # producer tensor -> bytes, where its shape is static
        self.exported: set[tuple[str, ...]] = set()  # each partition graph collection handed over, by node names

    def _export(self) -> Any:
        metadata = self._original()
        for function_graphs in metadata.function_graphs:
            sends = cross_device_sends(function_graphs)
            self.sends += sends
            self.pending += len(sends)
            if sends:
                self.sizes.update(_sizes(function_graphs.post_optimization_graph, sends))
            self.exported.update(_signature(partition) for partition in function_graphs.partition_graphs)
        return metadata

    def _callback(self, op_type: Any, inputs: Any, attrs: Any, outputs: Any, op_name: Any = None,
                  graph: Any = None) -> None:
        name = op_type.decode() if isinstance(op_type, bytes) else op_type
        device = outputs[0].device if outputs else (inputs[0].device if inputs else "")
        custom = "/device:CUSTOM:" in device  # DTensor runs any op there as per-device functions
        if graph is not None or not (name.startswith("__") or custom):
            return None
        key = (name, device, tuple(str(t.shape) for t in inputs) if custom else ())
        if self.pending:
            self.per_call[key] = self.per_call.get(key, 0) + self.pending
            self.pending = 0
        self.calls_seen += 1
        self.total += self.per_call.get(key, 0)
        return None

    def _session_runs(self) -> Any:
        """`Session.run` asking every run for its partition graphs (a Session places and partitions its graph
        itself): their cross-device edges, one per run, with their bytes from the graph's static shapes."""
        original = _session_lib.BaseSession.run

        def run(session: Any, fetches: Any, feed_dict: Any = None, options: Any = None,
                run_metadata: Any = None) -> Any:
            asked = config_pb2.RunOptions()
            if options is not None:
                asked.CopyFrom(options)
            asked.output_partition_graphs = True
            metadata = run_metadata if run_metadata is not None else config_pb2.RunMetadata()
            result = original(session, fetches, feed_dict, asked, metadata)
            sends = _sends(metadata.partition_graphs)
            self.total += len(sends)
            for send in sends:
                name = send.input[0] if ":" in send.input[0] else send.input[0] + ":0"
                try:
                    tensor = session.graph.get_tensor_by_name(name)
                except (KeyError, ValueError):
                    continue
                shape = tensor.shape
                self.sizes[name] = shape.num_elements() * tensor.dtype.size if shape.is_fully_defined() else None
            return result

        return original, run

    def __enter__(self) -> "SendOracle":
        self._original = _tensorflow.export_run_metadata
        _tensorflow.export_run_metadata = self._export
        self._session_run, _session_lib.BaseSession.run = self._session_runs()
        return self

    def __exit__(self, *exc: Any) -> None:
        _tensorflow.export_run_metadata = self._original
        _session_lib.BaseSession.run = self._session_run

    @contextlib.contextmanager
    def calls(self) -> Iterator[None]:
        """Counts the calls of the block: its op callback goes on the thread's list beside the capture's
        (`add_op_callback` would also swap TensorFlow's execute path, which the capture wraps)."""
        callbacks = _tensorflow.op_callbacks()
        callbacks.append(self._callback)
        try:
            yield
        finally:
            callbacks.remove(self._callback)

    def finish(self) -> int:
        """The total, with the edges of functions reported after the last call (counted once)."""
        return self.total + self.pending


def _signature(partition: Any) -> tuple[str, ...]:
    return tuple(sorted(node.name for node in partition.node))


DUMPED = "after_partition_passes"  # the last stage TensorFlow's graph dumper writes of a function's partitions


def dumped_sends(directory: str, before: frozenset = frozenset(), exported: frozenset = frozenset()) -> int:
    """Cross-device `_Send` edges of the functions that never reach graph collection (tf.data's, which an
    iterator instantiates), one per instantiation, from the partitions TensorFlow's graph dumper wrote
    (`TF_DUMP_GRAPH_PREFIX=directory`, `TF_DUMP_GRAPH_NAME_FILTER='*'`): files in `before` (written before
    the block) and instantiations with a partition graph collection handed over (`exported`) left out."""
    from google.protobuf import text_format
    from tensorflow.core.framework import graph_pb2

    instances: dict[tuple[str, int], list[Any]] = {}
    counts: dict[str, int] = {}
    for name in sorted(os.listdir(directory), key=lambda n: (n.split(".")[0], n)):
        if name in before or "_partition__" not in name or not name.endswith(f".{DUMPED}.pbtxt"):
            continue
        function, _, partition = name.split(".")[0].partition("_partition__")
        occurrence = counts[name.split(".")[0]] = counts.get(name.split(".")[0], -1) + 1
        graph = graph_pb2.GraphDef()
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            text_format.Parse(f.read(), graph)
        instances.setdefault((function, occurrence), []).append(graph)
    total = 0
    for partitions in instances.values():
        if any(_signature(partition) in exported for partition in partitions):
            continue  # a function graph collection reported: counted per call by `SendOracle`
        total += len(_sends(partitions))
    return total


def _sizes(graph: Any, sends: list[Any]) -> dict[str, Optional[int]]:
    """Bytes of each sent tensor whose shape TensorFlow's shape inference knows (importing the graph runs it)."""
    imported = tf.Graph()
    try:
        with imported.as_default():
            tf.graph_util.import_graph_def(graph, name="")
    except Exception:  # pylint: disable=broad-except
        return {}
    found: dict[str, Optional[int]] = {}
    for send in sends:
        tensor = send.input[0] if ":" in send.input[0] else send.input[0] + ":0"
        try:
            shape = imported.get_tensor_by_name(tensor).shape
        except (KeyError, ValueError):
            continue
        dtype = tf.dtypes.as_dtype(send.attr["T"].type)
        found[tensor] = shape.num_elements() * dtype.size if shape.is_fully_defined() and dtype.is_numpy_compatible \
            and dtype != tf.string else None
    return found


__all__ = ["SendOracle", "cross_device_sends", "dumped_sends"]
