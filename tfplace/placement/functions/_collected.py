"""What a call's collected function graphs say: `Placed` (the records of the nodes TensorFlow's placer placed,
the transfers between their partitions, their node runs, the tf.data functions they instantiate), or `Later`,
the same made when first read; `placed_by` makes one from the graphs `tfplace.placement.functions._graphs`
collected.

Example:
    >>> from tfplace.placement.functions import _collected
    >>> _collected.Placed().functions, _collected.Placed().records
    (0, ())
"""

from __future__ import annotations

import weakref
from collections import Counter
from typing import Any, Mapping, NamedTuple, Optional, Sequence, Union

from tensorflow.core.framework import graph_pb2

from tfplace.placement.functions import _function_sources, _kept_calls, _lowering, _pipelines, _placed, _transfers
from tfplace.placement.ops import _kernels
from tfplace.placement.records import _groups
from tfplace.placement.records._records import ARGUMENT_OPS, CopyRecord, Kind, PlacementRecord
from tfplace.placement.session import _session

__all__ = ["Placed", "Later", "placed_by", "is_eager_op_wrapper"]

_UNMADE_LIMIT = 64  # `Later`s whose graphs wait to be read, at most (the oldest are made first)


def is_eager_op_wrapper(graph: graph_pb2.GraphDef) -> bool:
    """True for the function TensorFlow wraps around one eager op (or several, collected together).

    Its node is that op, named after its type and pinned to a full device name,
    and its arguments and results are named after the op's inputs and outputs
    (`a`, `b`, `product_RetVal` for MatMul), where a user's function names
    them after its Python parameters. When an eager op fails, the next
    wrapper's nodes are collected with its own.
    """
    nodes = [n for n in graph.node if n.op not in ARGUMENT_OPS]
    if not nodes or not all(n.name == n.op and n.device.startswith("/job:") for n in nodes):
        return False
    ops = {_kernels.op_type(n.op) for n in nodes}
    return all(any(_kernels.is_wrapper_plumbing(n.name, op) for op in ops) for n in graph.node if n.op in ARGUMENT_OPS)


def _placed_nodes(function_graphs: Any) -> list[Any]:
    """The nodes of one placed function as they ran (after placement and Grappler)."""
    return list(function_graphs.post_optimization_graph.node) or [
        n for g in function_graphs.partition_graphs for n in g.node]


def _notes_now(graph: graph_pb2.GraphDef, called: str) -> Optional[tuple[Mapping, Mapping]]:
    """The notes one placed function's records take (`_function_sources`): its own nodes' and those of the
    functions it inlines, read as it is placed (notes are forgotten, oldest first); None while none was watched."""
    if not _function_sources.watched():
        return None
    top = _function_sources.notes_of_graph([n.name for n in graph.node if n.op not in ARGUMENT_OPS], called)
    return top, {f.signature.name: _function_sources.notes(f.signature.name) for f in graph.library.function}


def _function_records(function_graphs: Any, notes: Optional[tuple[Mapping, Mapping]]) -> tuple[
        list[PlacementRecord], list[CopyRecord], Counter]:
    """The "place"/"removed" records of one placed function (with `notes`, from `_notes_now`), its implicit
    transfers (`tfplace.placement.functions._transfers`) and how many of its nodes run per call, by (device, op)
    (removed nodes, arguments and results left out)."""
    graph = function_graphs.pre_optimization_graph
    nodes = _lowering.placer_nodes(graph)
    records = _placed.placed_records(nodes, [n for n in _placed_nodes(function_graphs) if n.device])
    if notes is not None:
        found = _function_sources.node_notes(nodes, *notes)  # one per record, empty where unknown
        records = [_placed.noted(record, note) for record, note in zip(records, found)]
    else:
        records = [_placed.noted(record, _function_sources.Note()) for record in records]
    transfers = _transfers.function_transfers(  # only a function on two devices or more has any
        function_graphs.partition_graphs, {n.name: n for n in nodes}, {r.name: r.source for r in records if r.source},
        graph=function_graphs.post_optimization_graph, devices={r.name: r.device for r in records}) \
        if len(function_graphs.partition_graphs) > 1 else []
    kept, moved = _kept_calls.kept_calls(function_graphs.post_optimization_graph, graph)
    records += kept
    transfers += moved
    runs = Counter((r.device, r.op, _groups.category(r)) for r in records
                   if r.kind == Kind.PLACE and r.op not in ARGUMENT_OPS)
    return records, transfers, runs


def _function_datasets(function_graphs: Any) -> tuple[list[PlacementRecord], list[CopyRecord]]:
    """The records and transfers of the tf.data functions one placed function instantiates (read as it is
    placed: they may name functions of TensorFlow's library, which outlive no call)."""
    graph = function_graphs.pre_optimization_graph
    datasets: list[PlacementRecord] = []
    moved: list[CopyRecord] = []
    for pipeline, device in _pipelines.graph_datasets(graph, _placed_nodes(function_graphs)):
        found, copies = _pipelines.dataset_placement(pipeline, device, graph.library)
        datasets += found
        moved += copies
    return datasets, moved


class Placed(NamedTuple):
    """What `collect()` found: the functions TensorFlow placed since the last call.

    Attributes:
      functions: how many.
      records: their nodes' records, with source lines where known (the tf.data functions
        they instantiate left out).
      transfers: their implicit transfers, `CopyRecord(kind="function")` templates
        (one call's worth; `function` and `call` empty).
      runs: ((device, op, category), count) of the nodes one call runs (each node once: a loop
        body's nodes run at least that often).
      instantiated: what a capture records: `records` with those of the tf.data functions they
        instantiate (with source lines; a capture without sources drops them).
      unseen: why the call's own placement cannot be recorded ("" when it can): its graph was
        merged with another thread's by TensorFlow's collection.
      dataset_transfers: the transfers of the tf.data functions they instantiate, once (each names
        its function; see `tfplace.placement.functions._transfers.placed_transfers`).
      datasets: the records of the tf.data functions one call instantiates (with source lines): an
        iterator a function makes (a dataset iterated inside it) instantiates its dataset's functions
        again at every call, and TensorFlow places them again.
    """

    functions: int = 0
    records: tuple[PlacementRecord, ...] = ()
    transfers: tuple[CopyRecord, ...] = ()
    runs: tuple[tuple[tuple[str, str, str], int], ...] = ()
    instantiated: tuple[PlacementRecord, ...] = ()
    unseen: str = ""
    dataset_transfers: tuple[CopyRecord, ...] = ()
    datasets: tuple[PlacementRecord, ...] = ()


class Later:
    """What `tfplace.placement.functions._graphs.collect(later=True)` found, with `Placed`'s fields: the functions'
    own nodes' records, transfers and runs made when first read (lowering a function is most of what collecting
    costs, and a capture's log is often never read); what cannot wait (the functions' notes and their tf.data
    functions, which TensorFlow's library may forget) is read at once. `moves`: whether a call can move anything (a
    function on two devices or more, or its tf.data functions' transfers): `transfers` is read without
    making anything where none can. Making it twice (two threads) makes the same records."""

    def __init__(self, parts: list[tuple[Any, Any, list[PlacementRecord]]], names: Sequence[str],
                 instantiated: Sequence[PlacementRecord], unseen: str,
                 dataset_transfers: tuple[CopyRecord, ...]) -> None:
        self.functions = len(parts)
        self.unseen = unseen
        self.dataset_transfers = dataset_transfers
        self.datasets = _datasets_of(parts)
        self.moves = bool(dataset_transfers) or any(len(graphs.partition_graphs) > 1
                                                    or _kept_calls.present(graphs.post_optimization_graph)
                                                    for graphs, _, _ in parts)
        self._made: Optional[Placed] = None
        self._parts: Optional[tuple[list[tuple[Any, Any, list[PlacementRecord]]], tuple[str, ...],
                                    tuple[PlacementRecord, ...]]] = (parts, tuple(names), tuple(instantiated))

    def placed(self) -> Placed:
        """Every field, made now if not yet."""
        made, waiting = self._made, self._parts
        if made is None:
            if waiting is None:  # another thread made it meanwhile (it sets `_made` before it drops `_parts`)
                made = self._made
                assert made is not None, "Later.placed: `_parts` is dropped only after `_made` is set"
                return made
            made = self._made = _assembled(*waiting, self.unseen, self.dataset_transfers)
            self._parts = None
        return made

    @property
    def made(self) -> bool:
        return self._made is not None

    @property
    def records(self) -> tuple[PlacementRecord, ...]:
        return self.placed().records

    @property
    def transfers(self) -> tuple[CopyRecord, ...]:
        return self.placed().transfers if self.moves or self._made is not None else ()

    @property
    def runs(self) -> tuple[tuple[tuple[str, str, str], int], ...]:
        return self.placed().runs

    @property
    def instantiated(self) -> tuple[PlacementRecord, ...]:
        return self.placed().instantiated


def placed_by(functions: list[Any], called: str, names: Sequence[str] = (),
               instantiated: Sequence[PlacementRecord] = (), unseen: str = "",
               later: bool = False) -> Union[Placed, Later]:
    """What the placed `functions` hold, for the call of `called`; `names`: the function each one is, for
    its transfers (the call's own name where none is given); `instantiated`: records made before theirs;
    `later`: their own records made when first read (`Later`)."""
    parts = []
    dataset_transfers: list[CopyRecord] = []
    for function_graphs in functions:
        datasets, moved = _function_datasets(function_graphs)
        parts.append((function_graphs, _notes_now(function_graphs.pre_optimization_graph, called), datasets))
        dataset_transfers += moved
    found = Later(parts, names, instantiated, unseen, tuple(dataset_transfers))
    if not later:
        return found.placed()
    unmade = _session.runtime().unmade
    unmade.append(weakref.ref(found))
    while len(unmade) > _UNMADE_LIMIT:  # bounded: the graphs of a few functions wait, the oldest are made
        oldest = unmade.popleft()()
        if oldest is not None:
            oldest.placed()
    return found


def _datasets_of(parts: Sequence[tuple[Any, Any, list[PlacementRecord]]]) -> tuple[PlacementRecord, ...]:
    """The records of the tf.data functions one call of the placed functions (`parts`) instantiates."""
    return tuple(record for _, _, datasets in parts for record in datasets)


def _assembled(parts: Sequence[tuple[Any, Any, list[PlacementRecord]]], names: Sequence[str],
               instantiated: Sequence[PlacementRecord], unseen: str,
               dataset_transfers: tuple[CopyRecord, ...]) -> Placed:
    """`Placed` from each function's graphs, notes and tf.data functions' records (`placed_by`)."""
    every: list[PlacementRecord] = []
    made: list[PlacementRecord] = list(instantiated)
    transfers: list[CopyRecord] = []
    runs: Counter = Counter()
    for index, (function_graphs, notes, datasets) in enumerate(parts):
        own, moved, ran = _function_records(function_graphs, notes)
        every += own
        made += own + datasets
        transfers += [copy if copy.function else copy._replace(function=names[index]) for copy in moved] \
            if names else moved
        runs.update(ran)
    return Placed(len(parts), tuple(every), tuple(transfers), tuple(runs.items()), tuple(made), unseen,
                  dataset_transfers, _datasets_of(parts))
