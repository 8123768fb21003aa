"""The transfers inside a function: every edge whose producer and consumer TensorFlow placed on
different devices, read from the `_Send`/`_Recv` pairs its partitioner inserted.

TensorFlow partitions a function's placed graph per device and replaces each
edge that crosses devices by a `_Send` on the producer's device and a `_Recv`
on the consumer's (attributes `send_device`, `recv_device`, `tensor_name`); a
tensor read by several nodes on one device crosses once. Graph collection
hands tfplace these `partition_graphs`. Each cross-device pair becomes one
`CopyRecord(kind="function")` template per call of the function, except:

* host-memory transfers (`_HostSend`/`_HostRecv`, resource handles, strings):
  TensorFlow keeps these values on the host by design, as for eager ops;
* explicit copies: the consumer is an `Identity` the user's code placed on a
  device (`tf.identity` under `tf.device`, its line known), as for eager ops.
  TensorFlow's and Keras' own identities under a device (a strategy's replica
  copies) are transfers the user did not write: they are listed.

A control edge across devices (a node that waits for one on another device) is a
pair too: the partitioner sends a dummy scalar made for the purpose
(`<producer>/ctrl/_N`) into an `Identity` that the waiting node reads as a
control input. No value of the program moves: it is a transfer with `tensor`
"^producer", `input_index` `CONTROL` and 0 bytes.

Bytes per transfer come from the producer's static shape (TensorFlow's shape
inference over the placed graph) times its dtype's size; `None` where the shape
is not fully known. A transfer whose producer runs inside a loop frame (between
the lowered loop's `Enter` and `Exit`) runs once per iteration: `in_loop`.

The functions an iterator instantiates (`tf.data`'s) never reach graph collection: for them,
`placed_transfers()` partitions the placed nodes as TensorFlow's partitioner does (one pair per
tensor, or control edge, and receiving device), after the graph optimizer's removal of the
identities beside their input (tf.data's `FakeSink` nodes among them). Such a function runs once
per element, so one record per instantiation is a lower bound: `in_loop`.

Example:
    >>> import tensorflow as tf
    >>> from tfplace.placement.functions import _transfers
    >>> len(_transfers.function_transfers([], {}, {}))   # a function on one device moves nothing
    0
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from tensorflow.core.framework import types_pb2

from tfplace import _tensorflow
from tfplace._devices import canonical_name
from tfplace.placement.functions._lowering import PlacerNode
from tfplace.placement.ops import _kernels
from tfplace.placement.records._records import CONTROL, CopyRecord

__all__ = ["function_transfers", "placed_transfers", "bytes_of", "EXPLICIT_COPIES"]

EXPLICIT_COPIES = frozenset({"Identity", "IdentityN"})
_SENDS = frozenset({"_Send", "_HostSend"})
_RECVS = frozenset({"_Recv", "_HostRecv"})
_HOST_TYPES = frozenset({types_pb2.DT_RESOURCE, types_pb2.DT_STRING})


def _node_name(tensor: str) -> str:
    return tensor.lstrip("^").split(":", 1)[0]


def _tensor_name(tensor: str) -> str:
    """`"MatMul"` -> `"MatMul:0"`; `"split:1"` stays."""
    return tensor if ":" in tensor else tensor + ":0"


def _loop_depth(name: str, nodes: Mapping[str, Any], memo: dict[str, int]) -> int:
    """How many loop frames node `name` runs in: `Enter` opens one, `Exit` closes one; a `Merge`
    ignores its `NextIteration` input (the loop's back edge)."""
    stack = [name]
    while stack:
        current = stack[-1]
        if current in memo:
            stack.pop()
            continue
        node = nodes.get(current)
        if node is None:
            memo[current] = 0
            stack.pop()
            continue
        inputs = [_node_name(i) for i in node.input]
        if node.op in ("Merge", "RefMerge"):
            inputs = [i for i in inputs if getattr(nodes.get(i), "op", "") != "NextIteration"]
        pending = [i for i in inputs if i not in memo]
        if pending:
            stack.extend(pending)
            continue
        depth = max((memo[i] for i in inputs), default=0)
        if node.op in ("Enter", "RefEnter"):
            depth += 1
        elif node.op in ("Exit", "RefExit"):
            depth = max(depth - 1, 0)
        memo[current] = depth
        stack.pop()
    return memo[name]


def _consumer(recv: str, partition: Any) -> Optional[tuple[Any, int]]:
    """The first node of `partition` reading `recv`'s value as data, and at which input (None: only
    control inputs read it, the partitioner's dummy for a control edge)."""
    wanted = (recv, recv + ":0")
    for node in partition.node:
        slot = 0
        for tensor in node.input:
            if tensor.startswith("^"):
                continue
            if tensor in wanted:
                return node, slot
            slot += 1
    return None


def _control_edge(dummy: Any, recv: str, partition: Any) -> Optional[tuple[str, Any]]:
    """(producer, first waiting node) of a control edge whose dummy value `dummy` (a node of the sending
    partition, its control input the producer) arrives as `recv` in `partition`; None when it is not one."""
    if dummy is None:
        return None
    producers = [_node_name(i) for i in dummy.input if i.startswith("^")]
    if not producers:
        return None
    wanted = (recv, recv + ":0")
    identities = {node.name for node in partition.node if any(i in wanted for i in node.input)}
    for node in partition.node:
        if any(i.startswith("^") and i[1:] in identities for i in node.input):
            return producers[0], node
    return None


def _placer_consumer(after: Any, slot: int, tensor: str, to_device: str,
                     placer: Mapping[str, PlacerNode], readers: Sequence[tuple[PlacerNode, int]],
                     devices: Mapping[str, str]) -> tuple[Optional[PlacerNode], str, str, int]:
    """(placer node, op type, node name, input index) of the node that reads the transferred tensor,
    as TensorFlow's placer saw it: the consumer itself when it reads the tensor there; else a node
    the graph optimizer removed or fused (an explicit `tf.identity` it elided, a `MatMul` inside the
    `_FusedMatMul` named after its `Relu`): the placed reader of the tensor on the receiving device."""
    node = placer.get(after.name)
    for reader, index in readers:
        if reader is node:
            return node, node.op, node.name, index
    on_device = [pair for pair in readers if devices.get(pair[0].name, "") in (to_device, "")]
    for reader, index in sorted(on_device, key=lambda pair: devices.get(pair[0].name, "") != to_device):
        return reader, reader.op, reader.name, index
    return node, _kernels.op_type(after.op), after.name, slot


def function_transfers(partitions: Sequence[Any], placer: Mapping[str, PlacerNode], sources: Mapping[str, str],
                       graph: Any = None, devices: Optional[Mapping[str, str]] = None) -> list[CopyRecord]:
    """The implicit transfers of one placed function, as `CopyRecord(kind="function")` templates
    (`function` and `call` are filled per call).

    Args:
      partitions: the function's `partition_graphs` (GraphDefs, one per device).
      placer: the placer's nodes by name (`tfplace.placement.functions._lowering.placer_nodes`).
      sources: node name -> the user's "file.py:LINE" that made it (nodes made by TensorFlow's or
        Keras' code, or traced while no capture or guard was open, have none).
      graph: the placed graph (`post_optimization_graph`), for static shapes; None: bytes unknown.
      devices: node name -> canonical device of the placer's nodes, to pick a fused consumer's reader.
    """
    recvs: dict[tuple[str, str], tuple[Any, Any]] = {}
    sends: list[tuple[Any, Any]] = []
    for partition in partitions:
        for node in partition.node:
            if node.op in _RECVS:
                recvs[(node.attr["tensor_name"].s.decode(), node.attr["recv_device"].s.decode())] = (node, partition)
            elif node.op in _SENDS and node.attr["send_device"].s != node.attr["recv_device"].s:
                sends.append((node, partition))
    if not sends:
        return []
    consumers: dict[str, list[tuple[PlacerNode, int]]] = {}
    for node in placer.values():
        data = [i for i in node.inputs if not i.startswith("^")]
        for index, tensor in enumerate(data):
            consumers.setdefault(_tensor_name(tensor), []).append((node, index))
    found: list[tuple[CopyRecord, str]] = []
    controls: list[CopyRecord] = []
    ran = {n.name for n in graph.node} if graph is not None else None
    depths: dict[int, tuple[dict[str, Any], dict[str, int]]] = {}
    for send, partition in sends:
        dtype = send.attr["T"].type
        to_device = send.attr["recv_device"].s.decode()
        pair = recvs.get((send.attr["tensor_name"].s.decode(), to_device))
        if pair is None or send.op == "_HostSend" or pair[0].op == "_HostRecv" or dtype in _HOST_TYPES:
            continue
        if id(partition) not in depths:
            depths[id(partition)] = ({n.name: n for n in partition.node}, {})
        by_name, memo = depths[id(partition)]
        read = _consumer(pair[0].name, pair[1])
        if read is None or (ran is not None and _node_name(send.input[0]) not in ran):
            edge = _control_edge(by_name.get(_node_name(send.input[0])), pair[0].name, pair[1])
            if edge is not None:  # the partitioner's dummy value, made for a control edge
                producer, consumer = edge
                node = placer.get(consumer.name)
                controls.append(CopyRecord(
                    node.op if node is not None else _kernels.op_type(consumer.op), CONTROL,
                    canonical_name(send.attr["send_device"].s.decode()), canonical_name(to_device),
                    source=sources.get(consumer.name, ""), kind="function", node=consumer.name, tensor="^" + producer,
                    bytes=0, in_loop=_loop_depth(producer, by_name, memo) > 0))
            continue
        tensor = _tensor_name(send.input[0])
        node, op, name, index = _placer_consumer(read[0], read[1], tensor, canonical_name(to_device), placer,
                                                 consumers.get(tensor, ()), devices or {})
        if op in EXPLICIT_COPIES and node is not None and node.requested and sources.get(name):
            continue  # the user's tf.identity under a device
        in_loop = _loop_depth(_node_name(send.input[0]), by_name, memo) > 0
        copy = CopyRecord(op, index, canonical_name(send.attr["send_device"].s.decode()), canonical_name(to_device),
                          source=sources.get(name, ""), kind="function", node=name, tensor=tensor,
                          dtype=_kernels.dtype_name(dtype), in_loop=in_loop)
        found.append((copy, tensor))
    sizes = _tensorflow.static_sizes(graph, {tensor for _, tensor in found}) if graph is not None else {}
    return [copy._replace(bytes=bytes_of(sizes.get(tensor), copy.dtype)) for copy, tensor in found] + controls


def placed_transfers(function: str, graph: Any, nodes: Sequence[PlacerNode], devices: Sequence[str],
                     notes: Sequence[Any]) -> list[CopyRecord]:
    """The implicit transfers of `function`, whose partitions tfplace cannot read, from its placed nodes,
    as `CopyRecord(kind="function", in_loop=True)` templates (see the module's docstring); none for a
    function on one device.

    Args:
      function: its name, each transfer's `function`.
      graph: the function's GraphDef (`_instantiation.function_graph_def`), for dtypes and static shapes.
      nodes: its placer nodes (`_lowering.placer_nodes`), in order.
      devices: the canonical device of each node.
      notes: each node's note (`_function_sources.node_notes`): its `line`, the user's "file.py:LINE" that
        made it, where known.
    """
    if len(set(devices)) < 2:  # only a function on two devices moves anything
        return []
    sources = {node.name: note.line for node, note in zip(nodes, notes) if note.line}
    where = {node.name: device for node, device in zip(nodes, devices)}
    by_name = {node.name: node for node in nodes}

    def resolved(tensor: str) -> str:  # through the identities the graph optimizer removes (beside their input)
        node = by_name.get(_node_name(tensor))
        while node is not None and node.op == "Identity" and node.inputs and \
                where.get(_node_name(node.inputs[0])) == where[node.name]:
            tensor = node.inputs[0]
            node = by_name.get(_node_name(tensor))
        return tensor

    edges: dict[tuple[str, str], tuple[PlacerNode, int]] = {}  # (tensor or ^producer, to device) -> first reader
    for node in nodes:
        if node.op == "Identity" and node.inputs and where.get(_node_name(node.inputs[0])) == where[node.name]:
            continue  # removed by the graph optimizer: its readers read its input
        data = 0
        for tensor in node.inputs:
            control = tensor.startswith("^")
            key = "^" + _node_name(tensor) if control else _tensor_name(resolved(tensor))
            producer = _node_name(key)
            if producer in where and where[producer] != where[node.name]:
                edges.setdefault((key, where[node.name]), (node, CONTROL if control else data))
            data += not control
    types = _tensorflow.static_tensors(graph, {key for key, _ in edges if not key.startswith("^")})
    found = []
    for (tensor, to_device), (node, index) in edges.items():
        producer = _node_name(tensor)
        if tensor.startswith("^"):
            found.append(CopyRecord(node.op, CONTROL, where[producer], to_device, source=sources.get(node.name, ""),
                                    kind="function", function=function, node=node.name, tensor=tensor, bytes=0,
                                    in_loop=True))
            continue
        dtype, elements = types.get(tensor, ("", None))
        if dtype in ("string", "resource"):
            continue  # kept on the host by design
        if by_name[producer].op == "Const" and "CPU" in where[producer] and elements is not None \
                and elements <= _REPLICATED_ELEMENTS:
            continue  # replicate_constants_pass.cc: a small constant of a CPU is copied into each reader's partition
        if node.op in EXPLICIT_COPIES and node.requested and sources.get(node.name):
            continue  # the user's tf.identity under a device
        found.append(CopyRecord(node.op, index, where[producer], to_device, source=sources.get(node.name, ""),
                                kind="function", function=function, node=node.name, tensor=tensor, dtype=dtype,
                                bytes=bytes_of(elements, dtype), in_loop=True))
    return found


_REPLICATED_ELEMENTS = 16  # ReplicateConstantsPass replicates CPU constants of at most this many elements


def bytes_of(elements: Optional[int], dtype: str) -> Optional[int]:
    """Bytes of a tensor of `elements` elements of `dtype` (a name); None where either is unknown."""
    size = _tensorflow.dtype_size(dtype)
    return None if elements is None or size is None else elements * size
