"""A FunctionDef as TensorFlow instantiates it: its nodes in the order TensorFlow gives them ids.

`instantiate()` follows function.cc's `InstantiateFunction` (an `_Arg` node per input element
named after the input, the body, an `<output>_RetVal` node per output element; `_DeviceArg`/
`_DeviceRetval` for int32 with `experimental_ints_on_device`), then graph_constructor.cc's
`GraphConstructor::Convert`, which numbers nodes in topological order, lowest index first.
`function_graph_def()` writes that as the GraphDef `tfplace.placement.functions._lowering.placer_nodes` reads,
for the functions graph collection does not report (tf.data's).

Example:
    >>> from google.protobuf import text_format
    >>> from tensorflow.core.framework import function_pb2
    >>> double = text_format.Parse('''signature { name: "double"
    ...   input_arg { name: "x" type: DT_FLOAT } output_arg { name: "y" type: DT_FLOAT } }
    ...   node_def { name: "mul" op: "Mul" input: "x" input: "x" attr { key: "T" value { type: DT_FLOAT } } }
    ...   ret { key: "y" value: "mul:z:0" }''', function_pb2.FunctionDef())
    >>> [(node.name, node.op, node.inputs) for node in instantiate(double, {}, {})]
    [('x', '_Arg', ()), ('mul', 'Mul', ((0, 0), (0, 0))), ('y_RetVal', '_Retval', ((1, 0),))]
"""

from __future__ import annotations

import functools
import heapq
from typing import Any, Mapping, NamedTuple, Optional

from tensorflow.core.framework import attr_value_pb2, function_pb2, graph_pb2, types_pb2

from tfplace import _tensorflow

__all__ = ["InstantiatedNode", "instantiate", "function_graph_def", "flag", "arg_types"]

_NEXT_ITERATIONS = ("NextIteration", "RefNextIteration")
_MERGES = ("Merge", "RefMerge")


class InstantiatedNode(NamedTuple):
    """A node of an instantiated function: its `inputs` are (node index, output) pairs and its
    `control_inputs` node indices, in the list `instantiate()` returns."""

    name: str
    op: str
    device: str
    attrs: dict[str, Any]
    inputs: tuple[tuple[int, int], ...]
    control_inputs: tuple[int, ...]


def flag(attrs: Mapping, key: str) -> bool:
    """The boolean attribute `key` of a node or function (False when absent or not a boolean)."""
    value = attrs.get(key)
    return value is not None and value.WhichOneof("value") == "b" and value.b


def arg_types(args: Any, attrs: Mapping, defaults: Mapping = {}) -> list[list[int]]:
    """The element types of each input or output argument of a signature, given the node's attributes
    (`defaults`: the op's defaults for attributes the node leaves out)."""
    def attr(key: str) -> Any:
        return attrs[key] if key in attrs else defaults.get(key, attr_value_pb2.AttrValue())
    types = []
    for arg in args:
        base = arg.type or attr(arg.type_attr).type
        if arg.number_attr:
            types.append([base] * attr(arg.number_attr).i)
        elif arg.type_list_attr:
            types.append(list(attr(arg.type_list_attr).list.type))
        else:
            types.append([base])
    return types


def _output_ranges(op: str, attrs: Mapping, library: Mapping) -> tuple[tuple[str, tuple[int, int]], ...]:
    """For each named output of `op` (a registered op or a library function): (its first flat output
    index, its element count)."""
    if op in library:
        args, defaults = library[op].signature.output_arg, {}
    else:
        fixed = _fixed_ranges(op)
        if fixed is not None:
            return fixed
        op_def = _tensorflow.op_def(op)
        if op_def is None:
            raise ValueError(f"op {op!r} is neither registered nor a library function")
        args, defaults = op_def.output_arg, {a.name: a.default_value for a in op_def.attr}
    ranges, start = [], 0
    for arg, types in zip(args, arg_types(args, attrs, defaults)):
        ranges.append((arg.name, (start, len(types))))
        start += len(types)
    return tuple(ranges)


@functools.lru_cache(maxsize=4096)
def _fixed_ranges(op: str) -> Optional[tuple[tuple[str, tuple[int, int]], ...]]:
    """`_output_ranges` of a registered op whose outputs are one element each whatever its attributes
    (most ops), found once; None for the others."""
    op_def = _tensorflow.op_def(op)
    if op_def is None or any(arg.number_attr or arg.type_list_attr for arg in op_def.output_arg):
        return None
    return tuple((arg.name, (index, 1)) for index, arg in enumerate(op_def.output_arg))


def instantiate(function_def: function_pb2.FunctionDef, attrs: Mapping,
                library: Mapping[str, function_pb2.FunctionDef]) -> list[InstantiatedNode]:
    """The nodes of `function_def` instantiated with the caller's `attrs`, in the node-id order
    TensorFlow gives them (function.cc InstantiateFunction, then graph_constructor.cc)."""
    signature, function_name = function_def.signature, function_def.signature.name
    ints_on_device = flag(function_def.attr, "experimental_ints_on_device")
    nodes: list[InstantiatedNode] = []
    tensors: dict[str, list[tuple[int, int]]] = {}  # an input string ("mul:z:0", "x") -> (node index, output)s

    def argument_op(kind: str, dtype: int) -> str:
        return ("_Device" if ints_on_device and dtype == types_pb2.DT_INT32 else "_") + kind

    def tensors_of(reference: str, reader: str) -> list[tuple[int, int]]:
        if reference not in tensors:
            raise ValueError(f"function {function_name!r}: {reader} reads {reference!r}, which is not in the function")
        return tensors[reference]

    for position, (arg, types) in enumerate(zip(signature.input_arg, arg_types(signature.input_arg, attrs))):
        first = len(nodes)
        for i, dtype in enumerate(types):
            tensors[f"{arg.name}:{i}"] = [(len(nodes), 0)]
            node_attrs = {"T": attr_value_pb2.AttrValue(type=dtype), "index": attr_value_pb2.AttrValue(i=len(nodes))}
            if len(types) == 1 and position in function_def.arg_attr:  # its attributes (`_output_shapes`), as TF's
                node_attrs.update(function_def.arg_attr[position].attr)
            nodes.append(InstantiatedNode(arg.name + (f"_{i}" if len(types) > 1 else ""), argument_op("Arg", dtype),
                                          "", node_attrs, (), ()))
        tensors[arg.name] = [(first + i, 0) for i in range(len(types))]
    body_start = len(nodes)
    for k, node_def in enumerate(function_def.node_def):
        for output, (start, count) in _output_ranges(node_def.op, node_def.attr, library):
            tensors[f"{node_def.name}:{output}"] = [(body_start + k, start + j) for j in range(count)]
            for j in range(count):
                tensors[f"{node_def.name}:{output}:{j}"] = [(body_start + k, start + j)]
        tensors.setdefault(node_def.name, [(body_start + k, 0)])
    index_of = {node_def.name: body_start + k for k, node_def in enumerate(function_def.node_def)}
    index_of.update((a.name, tensors[a.name][0][0]) for a in signature.input_arg if tensors[a.name])
    for node_def in function_def.node_def:
        reader = f"node {node_def.name!r}"
        data = tuple(t for i in node_def.input if not i.startswith("^") for t in tensors_of(i, reader))
        control = tuple(index_of[i[1:]] if i[1:] in index_of else tensors_of(i[1:], reader)[0][0]
                        for i in node_def.input if i.startswith("^"))
        nodes.append(InstantiatedNode(node_def.name, node_def.op, node_def.device, dict(node_def.attr), data, control))
    index = 0
    for arg, types in zip(signature.output_arg, arg_types(signature.output_arg, attrs)):
        sources = tensors_of(function_def.ret[arg.name], f"output {arg.name!r}")
        for i, (dtype, source) in enumerate(zip(types, sources)):
            node_attrs = {"T": attr_value_pb2.AttrValue(type=dtype), "index": attr_value_pb2.AttrValue(i=index)}
            nodes.append(InstantiatedNode(f"{arg.name}_RetVal" + (f"_{i}" if len(types) > 1 else ""),
                                          argument_op("Retval", dtype), "", node_attrs, (source,), ()))
            index += 1
    return _in_id_order(nodes, function_name)


def _in_id_order(nodes: list[InstantiatedNode], function_name: str) -> list[InstantiatedNode]:
    """GraphConstructor::Convert: Kahn's algorithm, always taking the lowest ready index; a Merge fed by
    a NextIteration waits for one data input only. Inputs are renumbered to the new order."""
    next_iterations = {i for i, node in enumerate(nodes) if node.op in _NEXT_ITERATIONS}
    waiting_for: list[int] = []
    consumers: list[list[int]] = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        count = len(node.inputs) + len(node.control_inputs)
        if node.op in _MERGES and any(source in next_iterations for source, _ in node.inputs):
            count = len(node.control_inputs) + 1
        waiting_for.append(count)
        for source in [source for source, _ in node.inputs] + list(node.control_inputs):
            consumers[source].append(i)
    ready, order = [i for i, count in enumerate(waiting_for) if count == 0], []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for consumer in consumers[i]:
            if i not in next_iterations or nodes[consumer].op not in _MERGES:
                waiting_for[consumer] -= 1
                if waiting_for[consumer] == 0:
                    heapq.heappush(ready, consumer)
    if len(order) < len(nodes):
        raise ValueError(f"function {function_name!r}: {len(nodes) - len(order)} nodes are in a cycle")
    position = {old: new for new, old in enumerate(order)}
    renumbered = []
    for node in (nodes[i] for i in order):
        renumbered.append(InstantiatedNode(
            node.name, node.op, node.device, node.attrs,
            tuple([(position[source], output) for source, output in node.inputs]),
            tuple(sorted({position[c] for c in node.control_inputs})) if node.control_inputs else ()))
    return renumbered


def _with_sinks(function_def: function_pb2.FunctionDef, rewrites: int) -> function_pb2.FunctionDef:
    """A copy of `function_def` with the `FakeSink<i>` Identity per output each of `rewrites` tf.data rewrites
    leaves in it."""
    function_def = function_pb2.FunctionDef.FromString(function_def.SerializeToString())
    for _ in range(rewrites):
        for i, output in enumerate(function_def.signature.output_arg):
            taken = {n.name for n in function_def.node_def}
            name, k = f"FakeSink{i}", len(taken) + 1  # grappler's SetUniqueFunctionNodeName
            while name in taken:
                name, k = f"FakeSink{i}/_{k}", k + 1
            sink = function_def.node_def.add(name=name, op="Identity", input=[function_def.ret[output.name]])
            sink.attr["T"].type = output.type
    return function_def


def function_graph_def(function_def: function_pb2.FunctionDef, library: function_pb2.FunctionDefLibrary,
                       *, fake_sinks: int = 0) -> graph_pb2.GraphDef:
    """The GraphDef TensorFlow builds from a FunctionDef to instantiate it (the form
    `placer_nodes` reads), for functions that graph collection does not report (tf.data functions).

    `fake_sinks`: how many of tf.data's graph rewrites went through the function's dataset
    (rewrite_utils.cc AddFakeSinks): each leaves one `FakeSink<i>` Identity per output in it and in every
    function of its library, named uniquely (`FakeSink0/_7` when a first rewrite left a `FakeSink0`).
    """
    functions = {f.signature.name: f for f in library.function}
    if fake_sinks:  # added for tf.data's rewrites to every function of the library, the branches of a `tf.cond`
        function_def = _with_sinks(function_def, fake_sinks)  # too (inlined where the function is instantiated)
        functions = {name: _with_sinks(f, fake_sinks) for name, f in functions.items()}
    nodes = instantiate(function_def, {}, functions)
    graph = graph_pb2.GraphDef()
    graph.library.CopyFrom(library)
    if fake_sinks:  # the branches lowering inlines are the library's: with their sinks
        del graph.library.function[:]
        graph.library.function.extend(functions.values())
    for node in nodes:
        node_def = graph.node.add(name=node.name, op=node.op, device=node.device)
        node_def.input.extend(nodes[source].name + (f":{output}" if output else "") for source, output in node.inputs)
        node_def.input.extend(sorted({"^" + nodes[c].name for c in node.control_inputs}))
        for key, value in node.attrs.items():
            node_def.attr[key].CopyFrom(value)
    return graph
