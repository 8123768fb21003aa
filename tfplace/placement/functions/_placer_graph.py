"""Just enough of `tensorflow::Graph` (graph.cc) for the pre-placement passes: nodes with ids in
creation order, data and control edges, and the `NewName` counter (`prefix/_N`, one per graph);
and the device an inlined function's node requests (`body_node_device`).

Example:
    >>> from tensorflow.core.framework import function_pb2
    >>> graph = Graph(function_pb2.FunctionDefLibrary())
    >>> a = graph.add("a", "Const")
    >>> b = graph.add("b", "Identity", inputs=[(a, 0)])
    >>> graph.new_name("b/Internal"), [edge.destination.name for edge in a.outputs]
    ('b/Internal/_0', ['b'])
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional, Sequence

from tensorflow.core.framework import function_pb2

__all__ = ["Edge", "Node", "Graph", "CONTROL", "body_node_device"]

CONTROL = -1  # the output and input slot of a control edge


class Edge(NamedTuple):
    """An edge from `source`'s output `output` to `destination`'s input `slot` (both `CONTROL` for a
    control edge); `id` in creation order."""

    source: "Node"
    output: int
    destination: "Node"
    slot: int
    id: int


@dataclasses.dataclass(eq=False)
class Node:
    """A node: `device` as requested (the NodeDef's), `assigned` set before placement (pinned `_Arg`s
    and the loop nodes that copy their pin), `origin` the node of the graph as written it comes from."""

    id: int
    name: str
    op: str
    device: str
    attr: dict
    origin: str
    assigned: str
    inputs: list = dataclasses.field(default_factory=list)    # data edges in, by input slot
    controls: list = dataclasses.field(default_factory=list)  # control edges in
    outputs: list = dataclasses.field(default_factory=list)   # every edge out


class Graph:
    """Nodes by id (0 and 1 stand for `_SOURCE` and `_SINK`), the function library, edge ids and the
    `NewName` counter."""

    def __init__(self, library: function_pb2.FunctionDefLibrary) -> None:
        self.nodes: list[Optional[Node]] = [None, None]
        self.library = {f.signature.name: f for f in library.function}
        self.names_made = self.edges_made = 0

    def new_name(self, prefix: str) -> str:
        """Graph::NewName: `prefix/_N`, N counting every name made in the graph."""
        self.names_made += 1
        return f"{prefix}/_{self.names_made - 1}"

    def add(self, name: str, op: str, *, device: str = "", attr: Any = None,
            inputs: Sequence[tuple[Node, int]] = (), controls: Sequence[Node] = (), origin: str = "",
            assigned: str = "") -> Node:
        """A new node, its data inputs from (node, output) pairs and its control inputs from nodes."""
        node = Node(len(self.nodes), name, op, device, dict(attr or {}), origin, assigned)
        self.nodes.append(node)
        for slot, (source, output) in enumerate(inputs):
            self.edge(source, output, node, slot)
        for source in controls:
            self.edge(source, CONTROL, node, CONTROL)
        return node

    def edge(self, source: Node, output: int, destination: Node, slot: int) -> None:
        """Connects `source`'s output to `destination`'s input `slot` (replacing the edge there), or a
        control edge (`CONTROL`, once per pair)."""
        if slot == CONTROL:
            if any(edge.source is source for edge in destination.controls):
                return
            edge = Edge(source, CONTROL, destination, CONTROL, self.edges_made)
            destination.controls.append(edge)
        else:
            destination.inputs.extend([None] * (slot + 1 - len(destination.inputs)))
            if destination.inputs[slot] is not None:
                self.drop(destination.inputs[slot])
            edge = destination.inputs[slot] = Edge(source, output, destination, slot, self.edges_made)
        self.edges_made += 1
        source.outputs.append(edge)

    def drop(self, edge: Edge) -> None:
        edge.source.outputs.remove(edge)
        if edge.slot == CONTROL:
            edge.destination.controls.remove(edge)
        else:
            edge.destination.inputs[edge.slot] = None

    def remove(self, node: Node) -> None:
        for edge in [*node.outputs, *node.controls, *(edge for edge in node.inputs if edge)]:
            self.drop(edge)
        self.nodes[node.id] = None

    def rewire_outputs(self, old: Node, data_source: Callable[[int], tuple[Node, int]], control_source: Node) -> None:
        """Moves `old`'s consumers: a data edge from output k to `data_source(k)`, control edges to
        `control_source`."""
        for edge in list(old.outputs):
            if edge.slot == CONTROL:
                self.edge(control_source, CONTROL, edge.destination, CONTROL)
            else:
                self.edge(*data_source(edge.output), edge.destination, edge.slot)


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


def body_node_device(device: str, caller: str) -> str:
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
