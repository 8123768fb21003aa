"""Functions TensorFlow placed at the same instant, taken apart again from what graph collection merged.

Graph collection keeps one collector per eager context: each function TensorFlow instantiates appends
its graph as written to the collector's graph (`raw_graph.MergeFrom`), and the thread that ran it turns
the collector into a `FunctionGraphs` entry after its call. When threads place functions at the same
instant, one entry can hold several functions' nodes, each graph's after the other's (names repeat:
every graph has its own `op_input_0`, `Identity`, ...), its placed graph or partitions only some of
them, and another entry the rest with an empty graph as written. DTensor's per-device threads do so for
every op they run (`tfplace.placement.functions._dtensor`): a call's batch of entries holds one function per mesh
device. `split()` takes such a batch apart: one `Instance` per placed function, with its graph as
written (the chunk whose names it shares most), its placed graph and the partitions that hold its
placed nodes. First calls of different functions in several threads merge across batches too: one
thread's entry holds both graphs as written and one placed graph, another thread's entry the other
placed graph with an empty graph as written; `split()` hands back the graphs as written it could not
pair, for `tfplace.placement.functions._graphs` to pair with the next batch.

Example:
    >>> from tensorflow.core.framework import graph_pb2
    >>> merged = graph_pb2.GraphDef()
    >>> for device in ("CPU:0", "CPU:1"):
    ...     node = merged.node.add(name="op_input_0", op="_Arg",
    ...                            device="/job:localhost/replica:0/task:0/device:" + device)
    >>> [[n.device[-5:] for n in chunk] for chunk in chunks(merged.node)]
    [['CPU:0'], ['CPU:1']]
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, NamedTuple, Optional, Sequence

from tensorflow.core.framework import graph_pb2

from tfplace.placement.records._records import ARGUMENT_OPS

__all__ = ["Instance", "chunks", "split"]

_TRANSPORT = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv"})


class Instance(NamedTuple):
    """One placed function, as `tfplace.placement.functions._graphs` reads a collected one."""

    pre_optimization_graph: Any
    post_optimization_graph: Any
    partition_graphs: tuple
    device: str  # the full name of the device most of its placed nodes (its arguments, results) are on


def chunks(nodes: Iterable[Any]) -> list[list[Any]]:
    """Nodes of merged graphs split where a name comes again (each graph's names are distinct)."""
    found: list[list[Any]] = []
    seen: set[str] = set()
    for node in nodes:
        if not found or node.name in seen:
            found.append([])
            seen = set()
        found[-1].append(node)
        seen.add(node.name)
    return found


def _graph(nodes: Sequence[Any], library: Any = None) -> Any:
    graph = graph_pb2.GraphDef()
    graph.node.extend(nodes)
    if library is not None:
        names: set[str] = set()
        for function in library.function:  # merged libraries repeat each function
            if function.signature.name not in names:
                names.add(function.signature.name)
                graph.library.function.add().CopyFrom(function)
    return graph


def _device_of(nodes: Sequence[Any]) -> str:
    """Where a function runs: where its arguments and results are, else where most of its nodes are
    (DTensor's `device_id` argument stays on the host)."""
    own = [n.device for n in nodes if n.op in ARGUMENT_OPS and n.name != "device_id" and n.device]
    counted = Counter(own or [n.device for n in nodes if n.device])
    return counted.most_common(1)[0][0] if counted else ""


def _assign(partitions: Sequence[Any], placed: Sequence[list[Any]]) -> list[list[Any]]:
    """Each partition graph given to the placed function whose nodes (name, device) it holds: the
    largest first, each to a function with those nodes not yet covered by another partition."""
    uncovered = [{(n.name, n.device) for n in nodes} for nodes in placed]
    given: list[list[Any]] = [[] for _ in placed]
    keyed = [({(n.name, n.device) for n in p.node if n.op not in _TRANSPORT}, p) for p in partitions]
    for keys, partition in sorted(keyed, key=lambda item: -len(item[0])):
        fits = [i for i, left in enumerate(uncovered) if keys <= left]
        best = fits[0] if fits else max(range(len(placed)), key=lambda i: len(keys & uncovered[i]), default=None)
        if best is None:
            continue
        uncovered[best] -= keys
        given[best].append(partition)
    return given


def _written_names(name: str) -> set[str]:
    """The names a placed node may have had as written: its own, and each tail after a `/` or `_`
    (Grappler names what it makes after the node it replaced: `ArithmeticOptimizer/..._Mul_Add` for `Add`)."""
    return {name} | {name[k + 1:] for k, c in enumerate(name) if c in "/_"}


def _pair(raw: Sequence[Any], placed: Sequence[list[Any]]) -> list[Optional[int]]:
    """For each placed function, the graph as written it came from: the pairs sharing most node names
    first (a placed node shares the name it had, or ends with it), each graph as written paired once
    while one is left (identical graphs, such as DTensor's instances of one function, pair in order); a
    placed function left over takes the graph it shares most with; None where no graph shares a name."""
    names = [{n.name for n in graph.node} for graph in raw]
    mine = [[_written_names(n.name) for n in nodes] for nodes in placed]
    shared = [[sum(bool(was & names[j]) for was in mine[i]) for j in range(len(raw))] for i in range(len(placed))]
    paired: dict[int, int] = {}
    used: set[int] = set()
    for _, i, j in sorted((-shared[i][j], i, j) for i in range(len(placed)) for j in range(len(raw))):
        if i not in paired and j not in used:
            paired[i] = j
            used.add(j)
    best = [max(range(len(raw)), key=lambda j: (shared[i][j], -j)) for i in range(len(placed))]
    return [j if shared[i][j] else None for i, j in ((i, paired.get(i, best[i])) for i in range(len(placed)))]


def split(collected: Sequence[Any], unplaced: Optional[list[Any]] = None) -> list[Instance]:
    """The functions in a batch of collected entries, one `Instance` per placed function, whether or not
    the collection merged them (entries with only a placed graph included, and `Instance`s with only a
    graph as written). `unplaced`, where given, receives the graphs as written that no placed graph of
    the batch came from (another thread's collection holds theirs) as `Instance`s to split again later."""
    raw: list[Any] = []
    placed: list[list[Any]] = []
    partitions: list[Any] = []
    for entry in collected:
        library = entry.pre_optimization_graph.library
        raw += [_graph(chunk, library) for chunk in chunks(entry.pre_optimization_graph.node)]
        placed += chunks(entry.post_optimization_graph.node)
        partitions += list(entry.partition_graphs)
    pairs = _pair(raw, placed) if raw else [None] * len(placed)
    if unplaced is not None:
        unplaced += [Instance(graph, graph_pb2.GraphDef(), (), "") for j, graph in enumerate(raw) if j not in pairs]
    given = _assign(partitions, placed)
    return [Instance(raw[j], _graph(nodes), tuple(given[i]), _device_of(nodes))
            for i, (nodes, j) in enumerate(zip(placed, pairs)) if j is not None]
