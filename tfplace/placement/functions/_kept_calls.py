"""Functions TensorFlow does not inline: a call of a function with the attribute `_noinline` or
`api_implements` (tf_keras' GRU and LSTM call their CPU and GPU implementations so, with their gradients)
stays a `PartitionedCall` node of its caller, and TensorFlow places the called function on its own when
that node first runs: the function's nodes on the call's device unless they ask for another, its own
placer block in TensorFlow's log. Graph collection reports only the caller; this module makes the called
function's records from its definition, as `tfplace.placement.functions._pipelines` does for tf.data's functions,
following calls it keeps in turn.

Example:
    >>> from tfplace.placement.functions._kept_calls import present
    >>> from tensorflow.core.framework import graph_pb2
    >>> graph = graph_pb2.GraphDef()
    >>> _ = graph.node.add(name="call", op="PartitionedCall")
    >>> present(graph)
    True
"""

from __future__ import annotations

from typing import Any, Mapping

from tensorflow.core.framework import function_pb2

from tfplace._devices import canonical_name, requested_name
from tfplace.placement.functions import _function_sources, _instantiation, _lowering, _placed, _transfers
from tfplace.placement.records._records import CopyRecord, Kind, PlacementRecord

__all__ = ["kept_calls", "present"]

_CALLS = ("PartitionedCall", "StatefulPartitionedCall")

_DEPTH = 16  # calls kept inside calls kept, followed this deep


def kept_calls(graph: Any, before: Any) -> tuple[list[PlacementRecord], list[CopyRecord]]:
    """The "place" records and implicit transfers of the functions that the call nodes left in a function's
    graph after Grappler (`graph`, its `post_optimization_graph`: every call TensorFlow could inline is
    inlined by then) make TensorFlow place, once per call node. Grappler may have specialized a called
    function (`..._specialized_for_...`, kept in no library graph collection reports): it is made again from
    the function in `before` (the `pre_optimization_graph`) as Grappler makes it (`_specialized`)."""
    after = {f.signature.name: f for f in graph.library.function}
    original = {f.signature.name: f for f in before.library.function}
    calls_before = {node.name: node for node in before.node}
    records: list[PlacementRecord] = []
    transfers: list[CopyRecord] = []
    for node in graph.node:
        if not node.device or _instantiation.flag(node.attr, "_XlaMustCompile"):
            continue
        called = node.attr["f"].func.name if node.op in _CALLS and "f" in node.attr else node.op
        library = before.library
        if called in after:
            function, library = after[called], graph.library
        elif called in original:
            function = original[called]
        elif _base(node) in original and node.name in calls_before:
            function = _specialized(original[_base(node)], calls_before[node.name], node, before)
        else:
            continue
        found, moved = _place(function, canonical_name(node.device), {**original, **after}, library, 0)
        records += found
        transfers += moved
    return records, transfers


def present(graph: Any) -> bool:
    """Whether a function's graph after Grappler keeps a call (whose function may run on other devices)."""
    functions = {f.signature.name for f in graph.library.function}
    return any((node.op in _CALLS or node.op in functions) and not _instantiation.flag(node.attr, "_XlaMustCompile")
               for node in graph.node)


def _place(function: function_pb2.FunctionDef, device: str, functions: Mapping[str, function_pb2.FunctionDef],
           library: function_pb2.FunctionDefLibrary, depth: int) -> tuple[list[PlacementRecord], list[CopyRecord]]:
    """The records and transfers of `function` placed for a call on `device`, and of the calls it keeps."""
    name = function.signature.name
    graph = _instantiation.function_graph_def(function, library)
    inner = _lowering.placer_nodes(graph)
    notes = _function_sources.node_notes(inner, _function_sources.notes(name.split("_specialized")[0]))
    placed = []
    for each, note in zip(inner, notes):
        requested = requested_name(each.requested)
        placed.append(_placed.noted(PlacementRecord(each.op, each.name, requested or device, Kind.PLACE,
                                                    requested=requested, dtypes=each.dtypes), note))
    records: list[PlacementRecord] = list(placed)
    transfers = _transfers.placed_transfers(name, graph, inner, [record.device for record in placed], notes)
    if depth < _DEPTH:
        for each, record in zip(inner, placed):
            if each.calls in functions:
                found, moved = _place(functions[each.calls], record.device, functions, library, depth + 1)
                records += found
                transfers += moved
    return records, transfers


def _base(node: Any) -> str:
    """The function a Grappler-specialized call node's function was made from."""
    name = node.attr["f"].func.name if node.op in _CALLS and "f" in node.attr else node.op
    return name.split("_specialized_for_")[0]


def _forwarded(name: str, nodes: Mapping[str, Any]) -> str:
    """What node `name` forwards through `Identity` nodes (itself when it is no `Identity`)."""
    for _ in range(32):
        node = nodes.get(name)
        if node is None or node.op != "Identity" or not node.input:
            break
        name = node.input[0].split(":")[0]
    return name


def _specialized(function: function_pb2.FunctionDef, call_before: Any, call_after: Any,
                 before: Any) -> function_pb2.FunctionDef:
    """`function` as Grappler specializes it for one call (function_optimizer.cc): each argument the call
    fed from a constant (one Grappler folded: the inputs the call lost after Grappler) becomes that constant,
    named after the argument; each output no node of `before` (the caller's graph) read is gone."""
    made = function_pb2.FunctionDef()
    made.CopyFrom(function)
    made.signature.name = _base(call_after) + "_specialized"  # its notes are those of the function it was made from
    nodes = {node.name: node for node in before.node}
    # Grappler keeps a pushed-down constant as a control input of the call
    after_inputs = {reference.split(":")[0] for reference in call_after.input if not reference.startswith("^")}
    data = [reference for reference in call_before.input if not reference.startswith("^")]
    left = len([reference for reference in call_after.input if not reference.startswith("^")])
    # the inputs the call lost: neither they nor what they forward (Grappler bypasses an Identity) feed it now
    lost = [index for index, reference in enumerate(data[:len(function.signature.input_arg)])
            if not {reference.split(":")[0], _forwarded(reference.split(":")[0], nodes)} & after_inputs]
    if len(lost) != len(data) - left:
        lost = []  # not Grappler's specialization as this module knows it: the function as written
    for index in reversed(lost):
        producer = data[index].split(":")[0]
        argument = made.signature.input_arg[index]
        constant = made.node_def.add(name=argument.name, op="Const")
        constant.attr["dtype"].type = argument.type
        if producer in nodes and nodes[producer].op == "Const":
            constant.attr["value"].CopyFrom(nodes[producer].attr["value"])
        else:  # folded by Grappler: its value is not at hand, its type is
            constant.attr["value"].tensor.dtype = argument.type
        for node in made.node_def:
            node.input[:] = [f"{argument.name}:output:0" if reference == argument.name else reference
                             for reference in node.input]
        for key, value in list(made.ret.items()):
            if value == argument.name:
                made.ret[key] = f"{argument.name}:output:0"
        del made.signature.input_arg[index]
    read = {int(reference.split(":")[1]) if ":" in reference else 0 for node in before.node for reference in node.input
            if reference.split(":")[0] == call_before.name and not reference.startswith("^")}
    for index in reversed(range(len(made.signature.output_arg))):
        if index not in read:
            del made.ret[made.signature.output_arg[index].name]
            del made.signature.output_arg[index]
    return made
