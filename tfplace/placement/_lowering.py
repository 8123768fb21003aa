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

A FunctionDef becomes a graph as in function.cc and graph_constructor.cc (`function_graph_def`):
`_Arg` nodes named after the inputs, the body, `<output>_RetVal` nodes, node ids in
topological order, lowest index first.

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
    >>> [(n.name, n.op) for n in placer_nodes(function_graph_def(outer, lib))]  # doctest: +NORMALIZE_WHITESPACE
    [('a', '_Arg'), ('b_RetVal', '_Retval'), ('Func/call/input/_0', 'Identity'), ('call/mul', 'Mul'),
     ('Func/call/output/_1', 'Identity'), ('Func/call/output_control_node/_2', 'NoOp'), ('call', 'NoOp')]
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import Any, Mapping, NamedTuple, Optional

from tensorflow.core.framework import attr_value_pb2, function_pb2, graph_pb2, types_pb2

from tfplace import _tensorflow
from tfplace.placement import _kernels

__all__ = ["PlacerNode", "placer_nodes", "function_graph_def"]

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


class _Edge(NamedTuple):
    src: "_Node"
    out: int   # -1: control edge
    dst: "_Node"
    slot: int  # -1: control edge
    id: int


@dataclasses.dataclass(eq=False)
class _Node:
    id: int
    name: str
    op: str
    device: str      # requested
    attr: dict
    origin: str
    assigned: str    # set before placement: pinned `_Arg`s and the loop nodes that copy the pin
    ins: list = dataclasses.field(default_factory=list)   # data edges by input slot
    ctrl: list = dataclasses.field(default_factory=list)  # control edges in
    outs: list = dataclasses.field(default_factory=list)  # all edges out


class _Graph:
    """Just enough of tensorflow::Graph: node ids, edges and the `NewName` counter."""

    def __init__(self, library: function_pb2.FunctionDefLibrary):
        self.nodes: list[Optional[_Node]] = [None, None]  # ids 0 and 1: _SOURCE, _SINK
        self.lib = {f.signature.name: f for f in library.function}
        self.counter = self.edges = 0

    def new_name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}/_{self.counter - 1}"

    def add(self, name, op, *, device="", attr=None, inputs=(), ctrl=(), origin="", assigned=""):
        node = _Node(len(self.nodes), name, op, device, dict(attr or {}), origin, assigned)
        self.nodes.append(node)
        for slot, (src, out) in enumerate(inputs):
            self.edge(src, out, node, slot)
        for src in ctrl:
            self.edge(src, -1, node, -1)
        return node

    def edge(self, src, out, dst, slot):
        if slot < 0:
            if any(e.src is src for e in dst.ctrl):
                return
            e = _Edge(src, -1, dst, -1, self.edges)
            dst.ctrl.append(e)
        else:
            dst.ins.extend([None] * (slot + 1 - len(dst.ins)))
            if dst.ins[slot] is not None:
                self.drop(dst.ins[slot])
            e = dst.ins[slot] = _Edge(src, out, dst, slot, self.edges)
        self.edges += 1
        src.outs.append(e)

    def drop(self, e):
        e.src.outs.remove(e)
        if e.slot < 0:
            e.dst.ctrl.remove(e)
        else:
            e.dst.ins[e.slot] = None

    def remove(self, node):
        for e in [*node.outs, *node.ctrl, *(e for e in node.ins if e)]:
            self.drop(e)
        self.nodes[node.id] = None

    def rewire_outputs(self, old, data_src, ctrl_src):
        """Moves `old`'s consumers: data edge k to `data_src(k)`, control edges to `ctrl_src`."""
        for e in list(old.outs):
            if e.slot < 0:
                self.edge(ctrl_src, -1, e.dst, -1)
            else:
                self.edge(*data_src(e.out), e.dst, e.slot)


def _flag(attr: Mapping, key: str) -> bool:
    value = attr.get(key)
    return value is not None and value.WhichOneof("value") == "b" and value.b


def _xla(node: _Node) -> bool:
    return (_flag(node.attr, "_XlaMustCompile")
            or any(node.attr[k].s for k in ("_xla_compile_id", "_tpu_replicate") if k in node.attr))


def _arg_types(args, attr: Mapping, defaults: Mapping = {}) -> list[list[int]]:
    """Element types of each input/output arg of a signature, given the node's attrs."""
    def get(key):
        return attr[key] if key in attr else defaults.get(key, attr_value_pb2.AttrValue())
    result = []
    for arg in args:
        base = arg.type or get(arg.type_attr).type
        if arg.number_attr:
            result.append([base] * get(arg.number_attr).i)
        elif arg.type_list_attr:
            result.append(list(get(arg.type_list_attr).list.type))
        else:
            result.append([base])
    return result


def _output_sizes(op: str, attr: Mapping, lib: Mapping) -> dict[str, tuple[int, int]]:
    """For each named output of `op`: (first flat output index, element count)."""
    if op in lib:
        args, defaults = lib[op].signature.output_arg, {}
    else:
        op_def = _tensorflow.op_def(op)
        if op_def is None:
            raise ValueError(f"op {op!r} is neither registered nor a library function")
        args, defaults = op_def.output_arg, {a.name: a.default_value for a in op_def.attr}
    sizes, start = {}, 0
    for arg, types in zip(args, _arg_types(args, attr, defaults)):
        sizes[arg.name] = (start, len(types))
        start += len(types)
    return sizes


def _instantiate(fdef: function_pb2.FunctionDef, attr: Mapping, lib: Mapping):
    """function.cc InstantiateFunction, then graph_constructor.cc's node order.

    Returns (name, op, device, attrs, data inputs [(index, output)], control inputs [index])
    per node, in the node-id order TensorFlow gives them."""
    sig, fname = fdef.signature, fdef.signature.name
    ints_on_device = _flag(fdef.attr, "experimental_ints_on_device")
    specs: list[Any] = []
    refs: dict[str, list] = {}  # refs: input string -> [(spec index, output)]

    def arg_op(kind, dtype):
        return ("_Device" if ints_on_device and dtype == types_pb2.DT_INT32 else "_") + kind

    for arg, types in zip(sig.input_arg, _arg_types(sig.input_arg, attr)):
        first = len(specs)
        for i, dtype in enumerate(types):
            refs[f"{arg.name}:{i}"] = [(len(specs), 0)]
            attrs = {"T": attr_value_pb2.AttrValue(type=dtype), "index": attr_value_pb2.AttrValue(i=len(specs))}
            specs.append([arg.name + (f"_{i}" if len(types) > 1 else ""), arg_op("Arg", dtype), "", attrs, [], []])
        refs[arg.name] = [(first + i, 0) for i in range(len(types))]
    base = len(specs)
    for k, nd in enumerate(fdef.node_def):
        for out, (start, count) in _output_sizes(nd.op, nd.attr, lib).items():
            refs[f"{nd.name}:{out}"] = [(base + k, start + j) for j in range(count)]
            for j in range(count):
                refs[f"{nd.name}:{out}:{j}"] = [(base + k, start + j)]
        refs.setdefault(nd.name, [(base + k, 0)])
    ids = {nd.name: base + k for k, nd in enumerate(fdef.node_def)}
    ids.update((a.name, refs[a.name][0][0]) for a in sig.input_arg if refs[a.name])

    def resolve(ref, where):
        if ref not in refs:
            raise ValueError(f"function {fname!r}: {where} reads {ref!r}, which is not in the function")
        return refs[ref]

    for nd in fdef.node_def:
        data = [r for i in nd.input if not i.startswith("^") for r in resolve(i, f"node {nd.name!r}")]
        ctrl = [ids[i[1:]] if i[1:] in ids else resolve(i[1:], f"node {nd.name!r}")[0][0]
                for i in nd.input if i.startswith("^")]
        specs.append([nd.name, nd.op, nd.device, dict(nd.attr), data, ctrl])
    index = 0
    for arg, types in zip(sig.output_arg, _arg_types(sig.output_arg, attr)):
        sources = resolve(fdef.ret[arg.name], f"output {arg.name!r}")
        for i, (dtype, src) in enumerate(zip(types, sources)):
            attrs = {"T": attr_value_pb2.AttrValue(type=dtype), "index": attr_value_pb2.AttrValue(i=index)}
            specs.append([f"{arg.name}_RetVal" + (f"_{i}" if len(types) > 1 else ""),
                          arg_op("Retval", dtype), "", attrs, [src], []])
            index += 1
    # GraphConstructor::Convert: Kahn's algorithm, always taking the lowest ready index;
    # a Merge fed by a NextIteration waits for one data input only.
    next_iters = {i for i, s in enumerate(specs) if s[1] in ("NextIteration", "RefNextIteration")}
    pending: list[int] = []
    consumers: list[list[int]] = [[] for _ in specs]
    for i, s in enumerate(specs):
        count = len(s[4]) + len(s[5])
        if s[1] in ("Merge", "RefMerge") and any(src in next_iters for src, _ in s[4]):
            count = len(s[5]) + 1
        pending.append(count)
        for src in [src for src, _ in s[4]] + s[5]:
            consumers[src].append(i)
    ready, order = [i for i, c in enumerate(pending) if c == 0], []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for dst in consumers[i]:
            if i not in next_iters or specs[dst][1] not in ("Merge", "RefMerge"):
                pending[dst] -= 1
                if pending[dst] == 0:
                    heapq.heappush(ready, dst)
    if len(order) < len(specs):
        raise ValueError(f"function {fname!r}: {len(specs) - len(order)} nodes are in a cycle")
    position = {old: new for new, old in enumerate(order)}
    return [(s[0], s[1], s[2], s[3], [(position[a], o) for a, o in s[4]], sorted({position[c] for c in s[5]}))
            for s in (specs[i] for i in order)]


def function_graph_def(function_def: function_pb2.FunctionDef, library: function_pb2.FunctionDefLibrary,
                       *, fake_sinks: int = 0) -> graph_pb2.GraphDef:
    """The GraphDef TensorFlow builds from a FunctionDef to instantiate it (the form
    `placer_nodes` reads), for functions that graph collection does not report (tf.data functions).

    `fake_sinks`: how many of tf.data's graph rewrites went through the function's dataset
    (rewrite_utils.cc AddFakeSinks): each leaves one `FakeSink<i>` Identity per output in it,
    named uniquely (`FakeSink0/_7` when a first rewrite left a `FakeSink0`).
    """
    lib = {f.signature.name: f for f in library.function}
    if fake_sinks:  # added for tf.data's rewrites, which then point the results back past them
        function_def = function_pb2.FunctionDef.FromString(function_def.SerializeToString())
    for _ in range(fake_sinks):
        for i, out in enumerate(function_def.signature.output_arg):
                taken = {n.name for n in function_def.node_def}
                name, k = f"FakeSink{i}", len(taken) + 1  # grappler's SetUniqueFunctionNodeName
                while name in taken:
                    name, k = f"FakeSink{i}/_{k}", k + 1
                sink = function_def.node_def.add(name=name, op="Identity", input=[function_def.ret[out.name]])
                sink.attr["T"].type = out.type
    specs = _instantiate(function_def, {}, lib)
    graph = graph_pb2.GraphDef()
    graph.library.CopyFrom(library)
    for name, op, device, attrs, data, ctrl in specs:
        node = graph.node.add(name=name, op=op, device=device)
        node.input.extend(specs[s][0] + (f":{o}" if o else "") for s, o in data)
        node.input.extend(sorted({"^" + specs[c][0] for c in ctrl}))
        for key, value in attrs.items():
            node.attr[key].CopyFrom(value)
    return graph


def _parse_device(name: str) -> Optional[dict]:
    """DeviceNameUtils::ParseFullName: job, replica, task, type and id (None: unset or `*`)."""
    if not name.startswith("/"):
        return None
    parts: dict = {}
    for segment in name[1:].split("/"):
        key, _, value = segment.partition(":")
        if key in ("job", "replica", "task"):
            parts[key] = None if value == "*" else value
        elif key == "device":
            kind, _, ident = value.partition(":")
            parts["type"], parts["id"] = (None if kind == "*" else kind), (None if ident in ("", "*") else ident)
        elif key in ("cpu", "CPU", "gpu", "GPU"):
            parts["type"], parts["id"] = key.upper(), (None if value == "*" else value)
        else:
            return None
    return parts


def _merge_unset(device: str, caller: str) -> str:
    """MultiDeviceFunctionBodyPlacer::BodyNodeDevice: the node's device, completed by the caller's."""
    if not device:
        return caller
    mine, theirs = _parse_device(device), _parse_device(caller)
    if mine is None or theirs is None:
        return device
    for key, value in theirs.items():
        if mine.get(key) is None:
            mine[key] = value
    text = "".join(f"/{k}:{mine[k]}" for k in ("job", "replica", "task") if mine.get(k) is not None)
    if mine.get("type") is not None:
        text += f"/device:{mine['type']}:{mine['id'] if mine.get('id') is not None else '*'}"
    return text


def _inline(g: _Graph, caller: _Node, keep_fetchable: bool) -> None:
    """RewriteFunctionCallNode + InlineFunctionBody."""
    if caller.op == "SymbolicGradient":
        return
    if caller.op in _CALLS and "f" not in caller.attr:
        raise ValueError(f"{caller.op} node {caller.name!r}: expected an attr 'f' naming the function")
    fname = caller.attr["f"].func.name if caller.op in _CALLS else caller.op
    if fname not in g.lib:
        raise ValueError(f"node {caller.name!r} ({caller.op}) calls {fname!r}, which is not in the library")
    fdef = g.lib[fname]
    if _flag(fdef.attr, "_noinline") or "api_implements" in fdef.attr:
        return  # ValidateInlining refuses: the call stays a call
    multi = caller.op in _CALLS or _flag(caller.attr, "_lower_as_multi_device_function")
    body = _instantiate(fdef, caller.attr, g.lib)
    if sum(spec[1] in _ARGS for spec in body) != len(caller.ins):
        return  # ValidateInlining refuses: inputs do not match the arguments
    if not all(caller.ins):
        raise ValueError(f"node {caller.name!r}: an input of the call is not connected")
    cdev, prefix = caller.device, f"Func/{caller.name}/"
    icn = None
    if caller.ctrl:
        icn = g.add(g.new_name(prefix + "input_control_node"), "NoOp", device=cdev,
                    ctrl=[e.src for e in caller.ctrl])
    inputs = []
    for e in caller.ins:
        device = (e.src.assigned or e.src.device) if multi else cdev
        inputs.append(g.add(g.new_name(prefix + "input"), "Identity", device=device, inputs=[(e.src, e.out)]))
    clones: dict[int, _Node] = {}
    args = {i: inputs[spec[3]["index"].i] for i, spec in enumerate(body) if spec[1] in _ARGS}
    rets = []
    for i, (name, op, device, attrs, data, ctrl) in enumerate(body):
        if op in _ARGS:
            continue
        if op in _RETS:
            rets.append((attrs["index"].i, data[0], ctrl))
            continue
        device = _merge_unset(device, cdev) if multi else cdev
        clones[i] = g.add(f"{caller.name}/{name}", op, device=device, attr=attrs, origin=f"{fname}:{name}")
        if icn is not None and (not data and not ctrl or _is_call(op, g.lib) and not ctrl):
            g.edge(icn, -1, clones[i], -1)
    node_of = {**clones, **args}
    for i, clone in clones.items():
        for slot, (src, out) in enumerate(body[i][4]):
            g.edge(node_of[src], 0 if src in args else out, clone, slot)
        for src in body[i][5]:
            g.edge(node_of[src], -1, clone, -1)
    if icn is not None:
        for node in inputs:
            g.edge(icn, -1, node, -1)
    outputs = []
    for _, (src, out), ctrl in sorted(rets, key=lambda r: r[0]):
        source = (node_of[src], 0 if src in args else out)
        outputs.append(g.add(g.new_name(prefix + "output"), "Identity", device="" if multi else cdev,
                             inputs=[source], ctrl=[node_of[c] for c in ctrl]))
    ocn = g.add(g.new_name(prefix + "output_control_node"), "NoOp", device=cdev)
    if multi:
        names = {body[i][0]: node for i, node in clones.items()}
        for ret_node in fdef.control_ret.values():
            if ret_node not in names:
                raise ValueError(f"function {fname!r}: control output {ret_node!r} is not a node of it")
            g.edge(names[ret_node], -1, ocn, -1)
    else:
        for node in outputs:
            g.edge(node, -1, ocn, -1)
    if not ocn.ctrl and icn is not None:
        g.edge(icn, -1, ocn, -1)
    g.rewire_outputs(caller, lambda k: (outputs[k], 0), ocn)
    if keep_fetchable and outputs:
        g.add(caller.name, "IdentityN", device=caller.device, inputs=[(o, 0) for o in outputs], ctrl=[ocn])
    else:
        g.add(caller.name, "NoOp", device=caller.device, ctrl=[ocn])
    g.remove(caller)


def _is_call(op: str, lib: Mapping) -> bool:
    return op in _CALLS or op == "SymbolicGradient" or op in lib


def _call_node(g, name, func, device, inputs):
    attrs = {k: v for k, v in func.attr.items()}
    attrs["_lower_as_multi_device_function"] = attr_value_pb2.AttrValue(b=True)
    return g.add(name, func.name, device=device, attr=attrs, inputs=inputs)


def _output_types(g: _Graph, func: attr_value_pb2.NameAttrList, where: _Node) -> list[int]:
    if func.name not in g.lib:
        raise ValueError(f"node {where.name!r} ({where.op}) needs function {func.name!r}, which is not in the library")
    return sum(_arg_types(g.lib[func.name].signature.output_arg, func.attr), [])


def _need(n: _Node, *attrs: str) -> None:
    missing = [a for a in attrs if a not in n.attr]
    if missing or not n.ins or not all(n.ins):
        raise ValueError(f"{n.op} node {n.name!r}: expected the attrs {list(attrs)} and connected inputs, "
                         f"missing {missing or 'an input'}")


def _lower_cond(g: _Graph, n: _Node, keep_fetchable: bool) -> None:
    """CondBuilder (If) and CaseBuilder (Case): the NewName calls in TensorFlow's order."""
    case = n.op in _CASE
    _need(n, *(("branches",) if case else ("then_branch", "else_branch")))
    funcs = list(n.attr["branches"].list.func) if case else [n.attr["then_branch"].func, n.attr["else_branch"].func]
    names = [g.new_name(f"{n.name}/branch{b}") for b in range(len(funcs))] if case else \
        [g.new_name(f"{n.name}/then"), g.new_name(f"{n.name}/else")]
    pred = (n.ins[0].src, n.ins[0].out)
    if case:
        head = g.add(g.new_name(f"{n.name}/branch_index"), "_SwitchN", device=n.device, inputs=[pred, pred])
        pivots = [g.add(g.new_name(f"{n.name}/pivot_{b}"), "Identity", device=n.device, inputs=[(head, b)])
                  for b in range(len(funcs))]
    else:
        head = g.add(g.new_name(f"{n.name}/switch_pred"), "Switch", device=n.device, inputs=[pred, pred])
        pivot_f = g.add(g.new_name(f"{n.name}/pivot_f"), "Identity", device=n.device, inputs=[(head, 0)])
        pivots = [g.add(g.new_name(f"{n.name}/pivot_t"), "Identity", device=n.device, inputs=[(head, 1)]), pivot_f]
    switches = [g.add(g.new_name(f"{n.name}/{e.src.name}"), "_SwitchN" if case else "Switch",
                      device=e.src.device, inputs=[(e.src, e.out), pred]) for e in n.ins[1:]]
    for e in n.ctrl:
        g.edge(e.src, -1, head, -1)
    branch_out = (lambda b: b) if case else (lambda b: 1 - b)  # then reads Switch output 1
    calls = []
    for b, (name, func) in enumerate(zip(names, funcs)):
        calls.append(_call_node(g, name, func, n.device, [(s, branch_out(b)) for s in switches]))
        g.edge(pivots[b], -1, calls[-1], -1)
    merges = [g.add(g.new_name(f"{n.name}/{'merge' if case else 'output'}"), "Merge", device=n.device,
                    inputs=[(c, i) for c in calls]) for i in range(len(_output_types(g, funcs[0], n)))]
    executed = g.add(g.new_name(f"{n.name}/branch_executed"), "Merge", device=n.device,
                     inputs=[(p, 0) for p in pivots], ctrl=calls)
    if keep_fetchable and merges:
        g.add(n.name, "IdentityN", device=n.device, inputs=[(m, 0) for m in merges], ctrl=[executed])
    else:
        g.add(n.name, "NoOp", device=n.device, ctrl=[executed])
    g.rewire_outputs(n, lambda k: (merges[k], 0), executed)
    g.remove(n)


def _lower_while(g: _Graph, n: _Node, keep_fetchable: bool) -> None:
    """LowerWhileHelper: resource loop variables get a constant Enter and nothing else."""
    _need(n, "cond", "body", "T", "parallel_iterations")
    if n.attr["parallel_iterations"].i < 1:
        raise ValueError(f"{n.op} node {n.name!r}: expected parallel_iterations > 0")
    cond_name, body_name = g.new_name(f"{n.name}/cond"), g.new_name(f"{n.name}/body")
    types = list(n.attr["T"].list.type)
    res = [t == types_pb2.DT_RESOURCE for t in types]
    enters = [g.add(g.new_name(f"{n.name}/enter"), "Enter", device=e.src.device, assigned=e.src.assigned,
                    inputs=[(e.src, e.out)]) for e in n.ins]
    if n.ctrl:
        control = g.add(g.new_name(f"{n.name}/LoopControlInputs"), "NoOp", device=n.device,
                        ctrl=[e.src for e in n.ctrl])
        for enter in enters:
            g.edge(control, -1, enter, -1)
    merges = {i: g.add(g.new_name(f"{n.name}/merge"), "Merge", device=en.device, assigned=en.assigned,
                       inputs=[(en, 0), (en, 0)]) for i, en in enumerate(enters) if not res[i]}
    if not merges:
        raise ValueError(f"While node {n.name!r}: expected at least one non-resource loop variable")
    cond = _call_node(g, cond_name, n.attr["cond"].func, n.device,
                      [(enters[i], 0) if res[i] else (merges[i], 0) for i in range(len(enters))])
    g.edge(next(iter(merges.values())), -1, cond, -1)
    loop_cond = g.add(g.new_name(f"{n.name}/LoopCond"), "LoopCond", device=n.device, inputs=[(cond, 0)])
    switches = {i: g.add(g.new_name(f"{n.name}/{n.ins[i].src.name}_switch"), "Switch", device=m.device,
                         assigned=m.assigned, inputs=[(m, 0), (loop_cond, 0)]) for i, m in merges.items()}
    body = _call_node(g, body_name, n.attr["body"].func, n.device,
                      [(enters[i], 0) if res[i] else (switches[i], 1) for i in range(len(enters))])
    first = next(iter(switches.values()))
    body_control = g.add(g.new_name(f"{n.name}/loop_body_control"), "Identity", device=n.device,
                         inputs=[(first, 1)])
    g.edge(body_control, -1, body, -1)
    exits = {i: g.add(g.new_name(f"{n.name}/exit"), "Exit", device=s.device, assigned=s.assigned,
                      inputs=[(s, 0)]) for i, s in switches.items()}
    executed = g.add(g.new_name(f"{n.name}/LoopExecuted"), "NoOp", device=n.device, ctrl=list(exits.values()))

    def output(k):
        return (enters[k].ins[0].src, enters[k].ins[0].out) if res[k] else (exits[k], 0)
    if keep_fetchable:
        g.add(n.name, "IdentityN", device=n.device, inputs=[output(k) for k in range(len(enters))])
    else:
        g.add(n.name, "NoOp", device=n.device, ctrl=[executed])
    for i, m in merges.items():
        nxt = g.add(g.new_name(f"{n.name}/next_iteration"), "NextIteration", device=m.device,
                    assigned=m.assigned, inputs=[(body, i)], ctrl=[body])
        g.edge(nxt, 0, m, 1)
    g.rewire_outputs(n, output, executed)
    g.remove(n)


def _internal_rewrite(g: _Graph, n: _Node) -> None:
    """AccumulateNV2RemovePass (outside loops) and ParallelConcatRemovePass."""
    def make(op, inputs=(), ctrl=()):
        return g.add(g.new_name(f"{n.name}/Internal"), op, device=n.device, inputs=inputs, ctrl=ctrl)
    data = [(e.src, e.out) for e in n.ins if e]
    if n.op == "ParallelConcat":
        start = make("_ParallelConcatStart", ctrl=[e.src for e in n.ctrl])
        updates = [make("_ParallelConcatUpdate", [(start, 0), d]) for d in data]
        last = g.add(n.name, "Identity", device=n.device, inputs=[(start, 0)], ctrl=updates)
    else:
        var = make("TemporaryVariable")
        fill = make("Fill", [(make("Shape", data[:1]), 0), (make("Const"), 0)])
        init = make("Assign", [(var, 0), (fill, 0)], ctrl=[e.src for e in n.ctrl])
        adds = [make("AssignAdd", [(init, 0), d]) for d in data]
        last = g.add(n.name, "DestroyTemporaryVariable", device=n.device, inputs=[(init, 0)], ctrl=adds)
    g.rewire_outputs(n, lambda k: (last, 0), last)
    g.remove(n)


def _isolate(g: _Graph, n: _Node, names: set) -> None:
    """IsolatePlacerInspectionRequiredOps for a call left in the graph that returns a resource."""
    def unique(name):
        candidate, k = name, 0
        while candidate in names:
            candidate, k = f"{name}_{k}", k + 1
        names.add(candidate)
        return candidate
    for slot, e in enumerate(list(n.ins)):
        g.edge(g.add(unique(f"{e.src.name}_{n.name}"), "Identity", inputs=[(e.src, e.out)]), 0, n, slot)
    used = set()
    for e in sorted((e for e in n.outs if e.slot >= 0), key=lambda e: e.id):
        used.add(e.out)
        g.edge(g.add(unique(f"{n.name}_{e.dst.name}"), "Identity", inputs=[(n, e.out)]), 0, e.dst, e.slot)
    for k in range(len(_output_types(g, n.attr["f"].func, n))):
        if k not in used:
            g.add(unique(n.name), "Identity", inputs=[(n, k)])


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
    g = _Graph(graph_def.library)
    by_name: dict[str, _Node] = {}
    for nd in graph_def.node:
        assigned = (arg_devices or {}).get(nd.name, "") if nd.op in _ARGS else ""
        by_name[nd.name] = g.add(nd.name, nd.op, device=nd.device, attr=nd.attr, origin=nd.name,
                                 assigned=assigned)
    for nd in graph_def.node:
        for slot, ref in enumerate(i for i in nd.input if not i.startswith("^")):
            src, _, out = ref.partition(":")
            if src not in by_name:
                raise ValueError(f"node {nd.name!r}: input {ref!r} is not a node of the graph")
            g.edge(by_name[src], int(out or 0), by_name[nd.name], slot)
        for ref in (i[1:] for i in nd.input if i.startswith("^")):
            if ref not in by_name:
                raise ValueError(f"node {nd.name!r}: control input {ref!r} is not a node of the graph")
            g.edge(by_name[ref], -1, by_name[nd.name], -1)
    keep_fetchable = not any(n.op in _ARGS + _RETS for n in g.nodes if n)
    for n in [n for n in g.nodes if n and n.op == "AccumulateNV2"]:
        _internal_rewrite(g, n)
    i = 2
    while i < len(g.nodes):  # LowerFunctionalOpsPass: nodes added while it runs included
        current, i = g.nodes[i], i + 1
        if current is None or _xla(current):
            continue
        n = current
        if _is_call(n.op, g.lib):
            _inline(g, n, keep_fetchable)
        elif _flag(n.attr, "_lower_using_switch_merge"):
            if n.op in _IF + _CASE:
                _lower_cond(g, n, keep_fetchable)
            elif n.op in _WHILE:
                _lower_while(g, n, keep_fetchable)
    for n in [n for n in g.nodes if n and n.op == "ParallelConcat"]:
        _internal_rewrite(g, n)
    names = {n.name for n in g.nodes if n}
    for n in [n for n in g.nodes if n and n.op in _CALLS]:  # IsolatePlacerInspectionRequiredOpsPass
        if n.attr.get("f") and n.attr["f"].func.name in g.lib and \
                types_pb2.DT_RESOURCE in _output_types(g, n.attr["f"].func, n):
            _isolate(g, n, names)
    result = []
    for node in g.nodes:
        if node is None:
            continue
        n = node
        data = [e.src.name + (f":{e.out}" if e.out else "") for e in n.ins if e]
        ctrl = sorted("^" + e.src.name for e in n.ctrl)
        result.append(PlacerNode(n.name, n.op, n.device, tuple(data + ctrl), n.origin, _kernels.node_dtypes(n.attr)))
    return result
