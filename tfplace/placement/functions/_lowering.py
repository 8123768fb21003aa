"""The graph TensorFlow 2.21's placer sees for a function, computed from the graph as written.

Graph collection (`enable_graph_collection()`, `function_graphs[i].pre_optimization_graph`)
reports a function before the PRE_PLACEMENT passes; the placer log (`name: (Op): device`)
names the nodes after them. This module replays those passes in pure Python over protos,
creating nodes in TensorFlow's order, so the `prefix/_N` names of `Graph::NewName` (one
counter per graph) come out as in the log:

* `LowerFunctionalOpsPass` (lower_functional_ops.cc) walks node ids upwards, nodes it adds
  included: it lowers `If`/`StatelessIf`, `Case`/`StatelessCase` and `While`/`StatelessWhile`
  marked `_lower_using_switch_merge` (lower_if_op.cc, lower_case_op.cc, lower_while_op.cc) and
  inlines `PartitionedCall`/`StatefulPartitionedCall` and direct function calls
  (lower_function_call_op.cc, inline_function_utils.cc). It leaves nodes marked for XLA
  (`_XlaMustCompile`, `_xla_compile_id`, `_tpu_replicate`), calls of functions marked
  `_noinline` or `api_implements`, `SymbolicGradient` and tf.data ops' function attrs alone.
* `AccumulateNV2RemovePass`, `ParallelConcatRemovePass` (`<node>/Internal/_N`) and
  `IsolatePlacerInspectionRequiredOpsPass` (Identity nodes around calls left in the graph
  that return resources).

Not replayed: TPU/XLA-cluster passes, device propagation for TPU, and session settings that
turn lowering off (single-threaded executor, TFRT, `disable_functional_ops_lowering`).

A function called in the graph is instantiated as function.cc and graph_constructor.cc do
(`tfplace.placement.functions._instantiation`), over `tensorflow::Graph`'s node ids and names
(`tfplace.placement.functions._placer_graph`).

`PlacerNode.origin` is the node of the graph as written: `"name"` for the graph's own nodes,
`"function:name"` for a node inlined from library function `function`, `""` for nodes the
passes add. `requested` is the NodeDef device. TensorFlow pins `_Arg` nodes to their input's
device and the Func/<call>/input identities they feed request it: pass `arg_devices` (the
devices the placer log prints for the `_Arg` lines) to get those too.

Example:
    >>> from google.protobuf import text_format
    >>> from tensorflow.core.framework import function_pb2, graph_pb2
    >>> lib = text_format.Parse('''function { signature { name: "double"
    ...   input_arg { name: "x" type: DT_FLOAT } output_arg { name: "y" type: DT_FLOAT } }
    ...   node_def { name: "mul" op: "Mul" input: "x" input: "x" attr { key: "T" value { type: DT_FLOAT } } }
    ...   ret { key: "y" value: "mul:z:0" } }''', function_pb2.FunctionDefLibrary())
    >>> outer = text_format.Parse('''signature { name: "outer"
    ...   input_arg { name: "a" type: DT_FLOAT } output_arg { name: "b" type: DT_FLOAT } }
    ...   node_def { name: "call" op: "PartitionedCall" input: "a"
    ...     attr { key: "Tin" value { list { type: DT_FLOAT } } }
    ...     attr { key: "Tout" value { list { type: DT_FLOAT } } }
    ...     attr { key: "f" value { func { name: "double" } } } }
    ...   ret { key: "b" value: "call:output:0" }''', function_pb2.FunctionDef())
    >>> from tfplace.placement.functions._instantiation import function_graph_def
    >>> [(n.name, n.op) for n in placer_nodes(function_graph_def(outer, lib))]  # doctest: +NORMALIZE_WHITESPACE
    [('a', '_Arg'), ('b_RetVal', '_Retval'), ('Func/call/input/_0', 'Identity'), ('call/mul', 'Mul'),
     ('Func/call/output/_1', 'Identity'), ('Func/call/output_control_node/_2', 'NoOp'), ('call', 'NoOp')]
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Optional, Sequence

from tensorflow.core.framework import attr_value_pb2, function_pb2, graph_pb2, types_pb2

from tfplace.placement.functions._instantiation import arg_types, flag, instantiate
from tfplace.placement.functions._placer_graph import CONTROL, Graph, Node, body_node_device
from tfplace.placement.ops import _kernels

__all__ = ["PlacerNode", "placer_nodes"]

_ARGS, _RETS = ("_Arg", "_DeviceArg"), ("_Retval", "_DeviceRetval")
_CALLS = ("PartitionedCall", "StatefulPartitionedCall")
_IF, _CASE, _WHILE = ("If", "StatelessIf"), ("Case", "StatelessCase"), ("While", "StatelessWhile")


class PlacerNode(NamedTuple):
    """One node as TensorFlow's placer sees it (see the module docstring for `origin`);
    `dtypes` are its type attributes, e.g. `(("T", "float32"),)`."""
    name: str
    op: str
    requested: str
    inputs: tuple[str, ...]
    origin: str
    dtypes: tuple[tuple[str, str], ...] = ()
    calls: str = ""  # the function a call TensorFlow does not inline calls (`_noinline`, `api_implements`)


def _for_xla(node: Node) -> bool:
    """Marked for XLA: LowerFunctionalOpsPass leaves it alone."""
    return (flag(node.attr, "_XlaMustCompile")
            or any(node.attr[key].s for key in ("_xla_compile_id", "_tpu_replicate") if key in node.attr))


def kept(function: function_pb2.FunctionDef) -> bool:
    """TensorFlow keeps a call of `function` as a call (inline_function_utils.cc ValidateInlining refuses
    `_noinline` and `api_implements`): it places the function on its own (`tfplace.placement.functions._kept_calls`)."""
    return flag(function.attr, "_noinline") or "api_implements" in function.attr


def _inline(graph: Graph, caller: Node, keep_fetchable: bool) -> None:
    """lower_function_call_op.cc RewriteFunctionCallNode + inline_function_utils.cc InlineFunctionBody."""
    if caller.op == "SymbolicGradient":
        return
    if caller.op in _CALLS and "f" not in caller.attr:
        raise ValueError(f"{caller.op} node {caller.name!r}: expected an attr 'f' naming the function")
    function_name = caller.attr["f"].func.name if caller.op in _CALLS else caller.op
    if function_name not in graph.library:
        raise ValueError(f"node {caller.name!r} ({caller.op}) calls {function_name!r}, which is not in the library")
    function_def = graph.library[function_name]
    if kept(function_def):
        return  # ValidateInlining refuses: the call stays a call
    multi_device = caller.op in _CALLS or flag(caller.attr, "_lower_as_multi_device_function")
    body = instantiate(function_def, caller.attr, graph.library)
    if sum(node.op in _ARGS for node in body) != len(caller.inputs):
        return  # ValidateInlining refuses: inputs do not match the arguments
    if not all(caller.inputs):
        raise ValueError(f"node {caller.name!r}: an input of the call is not connected")
    call_device, prefix = caller.device, f"Func/{caller.name}/"
    input_control_node = None
    if caller.controls or not caller.inputs:  # a call without inputs has one from the graph's source node
        input_control_node = graph.add(graph.new_name(prefix + "input_control_node"), "NoOp", device=call_device,
                                       controls=[edge.source for edge in caller.controls])
    inputs = []
    for edge in caller.inputs:
        device = (edge.source.assigned or edge.source.device) if multi_device else call_device
        inputs.append(graph.add(graph.new_name(prefix + "input"), "Identity", device=device,
                                inputs=[(edge.source, edge.output)]))
    clones: dict[int, Node] = {}  # body index -> its node in the graph
    arguments = {i: inputs[node.attrs["index"].i] for i, node in enumerate(body) if node.op in _ARGS}
    returns = []
    for i, node in enumerate(body):
        if node.op in _ARGS:
            continue
        if node.op in _RETS:
            returns.append((node.attrs["index"].i, node.inputs[0], node.control_inputs))
            continue
        device = body_node_device(node.device, call_device) if multi_device else call_device
        clones[i] = graph.add(f"{caller.name}/{node.name}", node.op, device=device, attr=node.attrs,
                              origin=f"{function_name}:{node.name}")
        if input_control_node is not None and (not node.inputs and not node.control_inputs
                                               or _is_call(node.op, graph.library) and not node.control_inputs):
            graph.edge(input_control_node, CONTROL, clones[i], CONTROL)
    node_of = {**clones, **arguments}
    for i, clone in clones.items():
        for slot, (source, output) in enumerate(body[i].inputs):
            graph.edge(node_of[source], 0 if source in arguments else output, clone, slot)
        for source in body[i].control_inputs:
            graph.edge(node_of[source], CONTROL, clone, CONTROL)
    if input_control_node is not None:
        for identity in inputs:
            graph.edge(input_control_node, CONTROL, identity, CONTROL)
    outputs = []
    for _, (source, output), controls in sorted(returns, key=lambda r: r[0]):
        produced = (node_of[source], 0 if source in arguments else output)
        outputs.append(graph.add(graph.new_name(prefix + "output"), "Identity",
                                 device="" if multi_device else call_device,
                                 inputs=[produced], controls=[node_of[c] for c in controls]))
    output_control_node = graph.add(graph.new_name(prefix + "output_control_node"), "NoOp", device=call_device)
    if multi_device:
        by_name = {body[i].name: node for i, node in clones.items()}
        for returned in function_def.control_ret.values():
            if returned not in by_name:
                raise ValueError(f"function {function_name!r}: control output {returned!r} is not a node of it")
            graph.edge(by_name[returned], CONTROL, output_control_node, CONTROL)
    else:
        for identity in outputs:
            graph.edge(identity, CONTROL, output_control_node, CONTROL)
    if not output_control_node.controls and input_control_node is not None:
        graph.edge(input_control_node, CONTROL, output_control_node, CONTROL)
    graph.rewire_outputs(caller, lambda k: (outputs[k], 0), output_control_node)
    if keep_fetchable and outputs:
        graph.add(caller.name, "IdentityN", device=caller.device, inputs=[(o, 0) for o in outputs],
                  controls=[output_control_node])
    else:
        graph.add(caller.name, "NoOp", device=caller.device, controls=[output_control_node])
    graph.remove(caller)


def _is_call(op: str, library: Mapping) -> bool:
    return op in _CALLS or op == "SymbolicGradient" or op in library


def _call_node(graph: Graph, name: str, function: attr_value_pb2.NameAttrList, device: str,
               inputs: list[tuple[Node, int]]) -> Node:
    """A direct call of `function` that the lowering of control flow adds (lowered again later)."""
    attrs = dict(function.attr.items())
    attrs["_lower_as_multi_device_function"] = attr_value_pb2.AttrValue(b=True)
    return graph.add(name, function.name, device=device, attr=attrs, inputs=inputs)


def _output_types(graph: Graph, function: attr_value_pb2.NameAttrList, where: Node) -> list[int]:
    if function.name not in graph.library:
        raise ValueError(f"node {where.name!r} ({where.op}) needs function {function.name!r}, "
                         "which is not in the library")
    return sum(arg_types(graph.library[function.name].signature.output_arg, function.attr), [])


def _need(node: Node, *attrs: str) -> None:
    missing = [a for a in attrs if a not in node.attr]
    if missing or not node.inputs or not all(node.inputs):
        raise ValueError(f"{node.op} node {node.name!r}: expected the attrs {list(attrs)} and connected inputs, "
                         f"missing {missing or 'an input'}")


def _lower_cond(graph: Graph, node: Node, keep_fetchable: bool) -> None:
    """lower_if_op.cc CondBuilder (If) and lower_case_op.cc CaseBuilder (Case): the NewName calls in
    TensorFlow's order."""
    case = node.op in _CASE
    _need(node, *(("branches",) if case else ("then_branch", "else_branch")))
    functions = list(node.attr["branches"].list.func) if case else [node.attr["then_branch"].func,
                                                                      node.attr["else_branch"].func]
    names = [graph.new_name(f"{node.name}/branch{b}") for b in range(len(functions))] if case else \
        [graph.new_name(f"{node.name}/then"), graph.new_name(f"{node.name}/else")]
    predicate = (node.inputs[0].source, node.inputs[0].output)
    if case:
        head = graph.add(graph.new_name(f"{node.name}/branch_index"), "_SwitchN", device=node.device,
                         inputs=[predicate, predicate])
        pivots = [graph.add(graph.new_name(f"{node.name}/pivot_{b}"), "Identity", device=node.device,
                            inputs=[(head, b)]) for b in range(len(functions))]
    else:
        head = graph.add(graph.new_name(f"{node.name}/switch_pred"), "Switch", device=node.device,
                         inputs=[predicate, predicate])
        pivot_false = graph.add(graph.new_name(f"{node.name}/pivot_f"), "Identity", device=node.device,
                                inputs=[(head, 0)])
        pivots = [graph.add(graph.new_name(f"{node.name}/pivot_t"), "Identity", device=node.device, inputs=[(head, 1)]),
                  pivot_false]
    switches = [graph.add(graph.new_name(f"{node.name}/{edge.source.name}"), "_SwitchN" if case else "Switch",
                          device=edge.source.device, inputs=[(edge.source, edge.output), predicate])
                for edge in node.inputs[1:]]
    for edge in node.controls:
        graph.edge(edge.source, CONTROL, head, CONTROL)
    branch_output = (lambda b: b) if case else (lambda b: 1 - b)  # the then branch reads Switch output 1
    calls = []
    for b, (name, function) in enumerate(zip(names, functions)):
        calls.append(_call_node(graph, name, function, node.device, [(s, branch_output(b)) for s in switches]))
        graph.edge(pivots[b], CONTROL, calls[-1], CONTROL)
    merges = [graph.add(graph.new_name(f"{node.name}/{'merge' if case else 'output'}"), "Merge", device=node.device,
                        inputs=[(call, i) for call in calls])
              for i in range(len(_output_types(graph, functions[0], node)))]
    executed = graph.add(graph.new_name(f"{node.name}/branch_executed"), "Merge", device=node.device,
                         inputs=[(p, 0) for p in pivots], controls=calls)
    if keep_fetchable and merges:
        graph.add(node.name, "IdentityN", device=node.device, inputs=[(m, 0) for m in merges], controls=[executed])
    else:
        graph.add(node.name, "NoOp", device=node.device, controls=[executed])
    graph.rewire_outputs(node, lambda k: (merges[k], 0), executed)
    graph.remove(node)


def _lower_while(graph: Graph, node: Node, keep_fetchable: bool) -> None:
    """lower_while_op.cc LowerWhileHelper: resource loop variables get a constant Enter and nothing else."""
    _need(node, "cond", "body", "T", "parallel_iterations")
    if node.attr["parallel_iterations"].i < 1:
        raise ValueError(f"{node.op} node {node.name!r}: expected parallel_iterations > 0")
    cond_name, body_name = graph.new_name(f"{node.name}/cond"), graph.new_name(f"{node.name}/body")
    resource = [t == types_pb2.DT_RESOURCE for t in node.attr["T"].list.type]
    enters = [graph.add(graph.new_name(f"{node.name}/enter"), "Enter", device=edge.source.device,
                        assigned=edge.source.assigned, inputs=[(edge.source, edge.output)]) for edge in node.inputs]
    if node.controls:
        control = graph.add(graph.new_name(f"{node.name}/LoopControlInputs"), "NoOp", device=node.device,
                            controls=[edge.source for edge in node.controls])
        for enter in enters:
            graph.edge(control, CONTROL, enter, CONTROL)
    merges = {i: graph.add(graph.new_name(f"{node.name}/merge"), "Merge", device=enter.device, assigned=enter.assigned,
                           inputs=[(enter, 0), (enter, 0)]) for i, enter in enumerate(enters) if not resource[i]}
    if not merges:
        raise ValueError(f"While node {node.name!r}: expected at least one non-resource loop variable")
    cond = _call_node(graph, cond_name, node.attr["cond"].func, node.device,
                      [(enters[i], 0) if resource[i] else (merges[i], 0) for i in range(len(enters))])
    graph.edge(next(iter(merges.values())), CONTROL, cond, CONTROL)
    loop_cond = graph.add(graph.new_name(f"{node.name}/LoopCond"), "LoopCond", device=node.device, inputs=[(cond, 0)])
    switches = {i: graph.add(graph.new_name(f"{node.name}/{node.inputs[i].source.name}_switch"), "Switch",
                             device=merge.device, assigned=merge.assigned, inputs=[(merge, 0), (loop_cond, 0)])
                for i, merge in merges.items()}
    body = _call_node(graph, body_name, node.attr["body"].func, node.device,
                      [(enters[i], 0) if resource[i] else (switches[i], 1) for i in range(len(enters))])
    first = next(iter(switches.values()))
    body_control = graph.add(graph.new_name(f"{node.name}/loop_body_control"), "Identity", device=node.device,
                             inputs=[(first, 1)])
    graph.edge(body_control, CONTROL, body, CONTROL)
    exits = {i: graph.add(graph.new_name(f"{node.name}/exit"), "Exit", device=switch.device, assigned=switch.assigned,
                          inputs=[(switch, 0)]) for i, switch in switches.items()}
    executed = graph.add(graph.new_name(f"{node.name}/LoopExecuted"), "NoOp", device=node.device,
                         controls=list(exits.values()))

    def output(k: int) -> tuple[Node, int]:
        return (enters[k].inputs[0].source, enters[k].inputs[0].output) if resource[k] else (exits[k], 0)
    if keep_fetchable:
        graph.add(node.name, "IdentityN", device=node.device, inputs=[output(k) for k in range(len(enters))])
    else:
        graph.add(node.name, "NoOp", device=node.device, controls=[executed])
    for i, merge in merges.items():
        next_iteration = graph.add(graph.new_name(f"{node.name}/next_iteration"), "NextIteration", device=merge.device,
                                   assigned=merge.assigned, inputs=[(body, i)], controls=[body])
        graph.edge(next_iteration, 0, merge, 1)
    graph.rewire_outputs(node, output, executed)
    graph.remove(node)


def _internal_rewrite(graph: Graph, node: Node) -> None:
    """AccumulateNV2RemovePass (outside loops) and ParallelConcatRemovePass."""
    def make(op: str, inputs: Sequence[tuple[Node, int]] = (), controls: Sequence[Node] = ()) -> Node:
        return graph.add(graph.new_name(f"{node.name}/Internal"), op, device=node.device, inputs=inputs,
                         controls=controls)
    data = [(edge.source, edge.output) for edge in node.inputs if edge]
    if node.op == "ParallelConcat":
        start = make("_ParallelConcatStart", controls=[edge.source for edge in node.controls])
        updates = [make("_ParallelConcatUpdate", [(start, 0), d]) for d in data]
        last = graph.add(node.name, "Identity", device=node.device, inputs=[(start, 0)], controls=updates)
    else:
        variable = make("TemporaryVariable")
        fill = make("Fill", [(make("Shape", data[:1]), 0), (make("Const"), 0)])
        initialized = make("Assign", [(variable, 0), (fill, 0)], controls=[edge.source for edge in node.controls])
        adds = [make("AssignAdd", [(initialized, 0), d]) for d in data]
        last = graph.add(node.name, "DestroyTemporaryVariable", device=node.device, inputs=[(initialized, 0)],
                         controls=adds)
    graph.rewire_outputs(node, lambda k: (last, 0), last)
    graph.remove(node)


def _isolate(graph: Graph, node: Node, names: set) -> None:
    """isolate_placer_inspection_required_ops_pass.cc, for a call left in the graph that returns a resource."""
    def unique(name: str) -> str:
        candidate, k = name, 0
        while candidate in names:
            candidate, k = f"{name}_{k}", k + 1
        names.add(candidate)
        return candidate
    for slot, edge in enumerate(list(node.inputs)):
        graph.edge(graph.add(unique(f"{edge.source.name}_{node.name}"), "Identity",
                             inputs=[(edge.source, edge.output)]), 0, node, slot)
    used = set()
    for edge in sorted((edge for edge in node.outputs if edge.slot != CONTROL), key=lambda edge: edge.id):
        used.add(edge.output)
        graph.edge(graph.add(unique(f"{node.name}_{edge.destination.name}"), "Identity",
                             inputs=[(node, edge.output)]), 0, edge.destination, edge.slot)
    for k in range(len(_output_types(graph, node.attr["f"].func, node))):
        if k not in used:
            graph.add(unique(node.name), "Identity", inputs=[(node, k)])


def placer_nodes(graph_def: graph_pb2.GraphDef, *,
                 arg_devices: Optional[Mapping[str, str]] = None) -> list[PlacerNode]:
    """The nodes TensorFlow's placer sees for a function whose pre-optimization graph is
    `graph_def` (its library included), in node-id order.

    Args:
      graph_def: a `pre_optimization_graph` from graph collection, or `function_graph_def(...)`.
      arg_devices: optional `_Arg` node name -> the device TensorFlow pinned it to (the device
        the placer log prints for it); only the `requested` device of nodes fed by it depends on it.

    Raises:
      ValueError: naming the node, for a graph the passes cannot lower (an unknown input or
        function, a While without its attrs, ...).
    """
    graph = Graph(graph_def.library)
    by_name: dict[str, Node] = {}
    for node_def in graph_def.node:
        assigned = (arg_devices or {}).get(node_def.name, "") if node_def.op in _ARGS else ""
        by_name[node_def.name] = graph.add(node_def.name, node_def.op, device=node_def.device, attr=node_def.attr,
                                           origin=node_def.name, assigned=assigned)
    for node_def in graph_def.node:
        for slot, reference in enumerate(i for i in node_def.input if not i.startswith("^")):
            source, _, output = reference.partition(":")
            if source not in by_name:
                raise ValueError(f"node {node_def.name!r}: input {reference!r} is not a node of the graph")
            graph.edge(by_name[source], int(output or 0), by_name[node_def.name], slot)
        for reference in (i[1:] for i in node_def.input if i.startswith("^")):
            if reference not in by_name:
                raise ValueError(f"node {node_def.name!r}: control input {reference!r} is not a node of the graph")
            graph.edge(by_name[reference], CONTROL, by_name[node_def.name], CONTROL)
    keep_fetchable = not any(node.op in _ARGS + _RETS for node in graph.nodes if node)
    node: Optional[Node]  # `graph.nodes` holds None where a node was removed
    for node in [node for node in graph.nodes if node and node.op == "AccumulateNV2"]:
        _internal_rewrite(graph, node)
    i = 2
    while i < len(graph.nodes):  # LowerFunctionalOpsPass: nodes added while it runs included
        node, i = graph.nodes[i], i + 1
        if node is None or _for_xla(node):
            continue
        if _is_call(node.op, graph.library):
            _inline(graph, node, keep_fetchable)
        elif flag(node.attr, "_lower_using_switch_merge"):
            if node.op in _IF + _CASE:
                _lower_cond(graph, node, keep_fetchable)
            elif node.op in _WHILE:
                _lower_while(graph, node, keep_fetchable)
    for node in [node for node in graph.nodes if node and node.op == "ParallelConcat"]:
        _internal_rewrite(graph, node)
    names = {node.name for node in graph.nodes if node}
    for node in [node for node in graph.nodes if node and node.op in _CALLS]:  # IsolatePlacerInspectionRequiredOpsPass
        if node.attr.get("f") and node.attr["f"].func.name in graph.library and \
                types_pb2.DT_RESOURCE in _output_types(graph, node.attr["f"].func, node):
            _isolate(graph, node, names)
    placed = []
    for node in graph.nodes:
        if node is None:
            continue
        data = [edge.source.name + (f":{edge.output}" if edge.output else "") for edge in node.inputs if edge]
        controls = sorted("^" + edge.source.name for edge in node.controls)
        called = node.attr["f"].func.name if node.op in _CALLS and "f" in node.attr else node.op
        function = graph.library.get(called)
        placed.append(PlacerNode(node.name, node.op, node.device, tuple(data + controls), node.origin,
                                 _kernels.node_dtypes(node.attr), called if function is not None and kept(function)
                                 else ""))
    return placed
