"""The records of a function TensorFlow placed: each node the placer saw on the device it has after
Grappler, and an XLA function's nodes compiled whole.

* `placed_records(nodes, placed)`: a node Grappler fused or rewrote (`MatMul`+`BiasAdd`+`Relu` into
  `_FusedMatMul`, `x * x` into `Square`) keeps its own op type and gets the device of the node that
  absorbed it; a node Grappler removed (a folded constant, an elided `Identity`) is "removed", on
  "" since nothing records where it was placed.
* `compiled_records(function, device)`: XLA functions (`jit_compile=True`) are compiled whole on the
  device of the call, never placed; `compiled_runs(function, device)`: what each call of one executes.
* `noted(record, note)`: a record with its node's line, origin and requester.
* `places_nothing(function)`: a function without nodes, arguments or results (TensorFlow places nothing).

Example:
    >>> from tfplace.placement.functions import _placed
    >>> from tfplace.placement.records._records import PlacementRecord
    >>> record = PlacementRecord("MatMul", "m", "/device:CPU:0", "place", "train.py:4")
    >>> _placed.without_sources([record])[0].source
    ''
"""

from __future__ import annotations

import functools
import re
from typing import Any, Iterable, Optional, Sequence

from tensorflow.core.framework import function_pb2

from tfplace import _tensorflow
from tfplace._devices import canonical_name, requested_name
from tfplace.placement.functions import _function_sources, _instantiation
from tfplace.placement.functions._lowering import PlacerNode
from tfplace.placement.ops import _kernels
from tfplace.placement.records import _groups, _origins
from tfplace.placement.records._records import ARGUMENT_OPS, Kind, Origin, PlacementRecord

__all__ = ["placed_records", "noted", "without_sources", "function_def", "places_nothing", "is_xla",
           "compiled_records"]


# Grappler names a node it rewrites "<Optimizer>/<Rewrite>_<original name>[/<part>]".
_REWRITTEN = re.compile(r"^[A-Z][A-Za-z]*/[A-Z][A-Za-z]*_(.+)$")


def _producer(tensor: str) -> str:
    return tensor.lstrip("^").split(":", 1)[0]


def placed_records(nodes: list[PlacerNode], placed: Iterable[Any]) -> list[PlacementRecord]:
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


def noted(record: PlacementRecord, note: "_function_sources.Note") -> PlacementRecord:
    """`record` with what the code that made its node says: its line, origin and who asked for its device."""
    return record._replace(source=note.line, origin=Origin(_origins.of_op(record.op, note.origin)),
                           requested_by=note.requested_by if record.requested else "")


def without_sources(records: Sequence[PlacementRecord]) -> Sequence[PlacementRecord]:
    """`records` with no source lines, for a capture that did not ask for them."""
    if not any(r.source for r in records):
        return records
    return [r._replace(source="") if r.source else r for r in records]


def function_def(name: str, library: Optional[function_pb2.FunctionDefLibrary]) -> Optional[function_pb2.FunctionDef]:
    """The definition of function `name`: from `library` when it holds it, else from the eager context
    (None if unknown)."""
    if library is not None:
        for function in library.function:
            if function.signature.name == name:
                return function
    try:
        return _tensorflow.function_def(name)
    except Exception:  # pylint: disable=broad-except  # not registered in this context
        return None


def places_nothing(name: str) -> bool:
    """True for a function without nodes, arguments or results (only Python side effects when traced):
    TensorFlow has nothing of it to place, at its first call or later."""
    definition = function_def(name, None)
    return definition is not None and not definition.node_def and not definition.signature.input_arg \
        and not definition.signature.output_arg


@functools.lru_cache(maxsize=1024)
def is_xla(function: str) -> bool:
    """True if the eager function `function` (e.g. "__inference_f_12") is compiled by XLA."""
    definition = function_def(function, None)
    return definition is not None and definition.attr["_XlaMustCompile"].b


@functools.lru_cache(maxsize=256)
def compiled_runs(function: str, device: str) -> tuple[tuple[tuple[str, str, str], int], ...]:
    """What one call of an XLA function on `device` executes: each of its compiled nodes once, as ((device, op,
    category), count) pairs (a compiled function's nodes run inside one XLA cluster, once per call)."""
    runs: dict[tuple[str, str, str], int] = {}
    for record in compiled_records(function, device):
        if record.op not in ARGUMENT_OPS:
            key = (record.device, record.op, _groups.category(record))
            runs[key] = runs.get(key, 0) + 1
    return tuple(runs.items())


@functools.lru_cache(maxsize=256)
def compiled_records(function: str, device: str) -> tuple[PlacementRecord, ...]:
    """"compiled" records of an XLA function's nodes, all on `device` (XLA places a function whole)."""
    definition = function_def(function, None)
    if definition is None:
        return ()
    graph = _instantiation.function_graph_def(definition, function_pb2.FunctionDefLibrary())
    device = canonical_name(device)
    notes = _function_sources.notes(function)
    return tuple(noted(PlacementRecord(_kernels.op_type(n.op), n.name, device, Kind.COMPILED,
                                        requested=requested_name(n.device), dtypes=_kernels.node_dtypes(n.attr)),
                        notes.get(n.name, _function_sources.Note()))
                 for n in graph.node)
