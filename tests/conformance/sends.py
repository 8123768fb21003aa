"""The oracle for function transfers: cross-device `_Send` edges in TensorFlow's partitioned graphs.

It reads the graphs TensorFlow hands graph collection (teeing the export tfplace makes, since
reading the collection empties it) and counts, per function call, the `_Send` nodes whose
`send_device` and `recv_device` differ, on its own: no tfplace code decides what counts. Left
out, as the contract says: control edges (the partitioner's dummy `.../ctrl/_N` scalar),
host-memory values (`_HostSend`/`_HostRecv`, resource handles, strings). A function's edges count once per
call: they are attributed to the call after which TensorFlow reported the function's graphs.

Example (inside a test, around a capture):
    with SendOracle() as oracle, tfplace.capture_placement() as log:
        f(x)
    assert oracle.total == len([c for c in log.copies if c.kind == "function"])
"""

from __future__ import annotations

import re
from typing import Any

import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow.python.framework import op_callbacks

from tfplace import _tensorflow

_CONTROL = re.compile(r"/ctrl/_\d+$")
_HOST_TYPES = {types_pb2.DT_RESOURCE, types_pb2.DT_STRING}


def cross_device_sends(function_graphs: Any) -> list[Any]:
    """The `_Send` nodes of one function's partitions that move a value of the program between devices."""
    host_recvs = {(node.attr["tensor_name"].s, node.attr["recv_device"].s)
                  for partition in function_graphs.partition_graphs for node in partition.node
                  if node.op == "_HostRecv"}
    found = []
    for partition in function_graphs.partition_graphs:
        for node in partition.node:
            if node.op != "_Send" or node.attr["send_device"].s == node.attr["recv_device"].s:
                continue
            if _CONTROL.search(node.input[0]) or node.attr["T"].type in _HOST_TYPES:
                continue
            if (node.attr["tensor_name"].s, node.attr["recv_device"].s) in host_recvs:
                continue
            found.append(node)
    return found


class SendOracle:
    """Counts the cross-device edges of every function call made while it is open (see above)."""

    def __init__(self) -> None:
        self.pending = 0
        self.per_call: dict[tuple[str, str], int] = {}
        self.calls = 0
        self.total = 0
        self.sends: list[Any] = []

    def _export(self) -> Any:
        metadata = self._original()
        for function_graphs in metadata.function_graphs:
            sends = cross_device_sends(function_graphs)
            self.sends += sends
            self.pending += len(sends)
        return metadata

    def _callback(self, op_type: Any, inputs: Any, attrs: Any, outputs: Any, op_name: Any = None,
                  graph: Any = None) -> None:
        name = op_type.decode() if isinstance(op_type, bytes) else op_type
        if graph is not None or not name.startswith("__"):
            return None
        key = (name, outputs[0].device if outputs else "")
        if self.pending:
            self.per_call[key] = self.per_call.get(key, 0) + self.pending
            self.pending = 0
        self.calls += 1
        self.total += self.per_call.get(key, 0)
        return None

    def __enter__(self) -> "SendOracle":
        self._original = _tensorflow.export_run_metadata
        _tensorflow.export_run_metadata = self._export
        op_callbacks.add_op_callback(self._callback)
        return self

    def __exit__(self, *exc: Any) -> None:
        op_callbacks.remove_op_callback(self._callback)
        _tensorflow.export_run_metadata = self._original

    def finish(self) -> int:
        """The total, with the edges of functions reported after the last call (counted once)."""
        return self.total + self.pending


__all__ = ["SendOracle", "cross_device_sends", "tf"]
