"""What the reports of a log show, grouped once: the text, the HTML, `tfplace trace` and `tfplace diff`
only format these rows.

* `ROWS`: rows per table or list of every report (the rest is counted in one line); `tfplace trace
  --top` and `tfplace diff --top` default to it.
* `failed(records)`: failed eager ops grouped by line, op, device and the device asked for.
* `explained(explanations)`: explanations grouped by line, op, device, device asked for and reason,
  with the nodes' names and the first message.
* `first(rows, limit)`: the rows a report shows and how many it leaves to its "and N more" line.
* `summary(records)`: placement events per device and op, the user's compute first.
* `placements(records, op)`: the rows of `PlacementLog.table()`: per op, device and kind, `op`'s first,
  then the user's compute; the other categories counted per op type.
* `remote_function(function, device)`: why a log lacks a function another task placed, and
  `REMOTE_FUNCTION`, which reads that reason back (a cluster's report: that task's trace holds it).

Example:
    >>> from tfplace.placement.records._records import PlacementRecord
    >>> from tfplace.placement.shown import _report
    >>> records = [PlacementRecord("MatMul", "", "/device:CPU:0", "failed", "train.py:3")] * 2
    >>> [(g.source, g.op, g.count) for g in _report.failed(records)]
    [('train.py:3', 'MatMul', 2)]
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Iterable, NamedTuple, Optional, Sequence, TypeVar

from tfplace.placement.records import _groups
from tfplace.placement.records._records import Kind, PlacementRecord

__all__ = ["size", "ROWS", "Group", "Explained", "failed", "explained", "first", "summary", "placements",
           "remote_function", "REMOTE_FUNCTION"]

REMOTE_FUNCTION = re.compile(r"^the block ran function (\S+) on (\S+), another task's device: ")


def remote_function(function: str, device: str, served_here: bool = False) -> str:
    """The reason a log lacks the nodes of `function`, which the block ran on `device`, another task's
    (`served_here`: whose `tf.distribute.Server` runs in this process)."""
    if served_here:
        return (f"the block ran function {function} on {device}, the device of a task whose tf.distribute.Server "
                "runs in this process: that server's runtime places it and prints its nodes in this process's own "
                "placement log (standard error), which tfplace does not read. Run each task as a process of its "
                "own (tfplace launch --workers=N --ps=M --trace) to have its nodes in that task's trace")
    return (f"the block ran function {function} on {device}, another task's device: that task's runtime places it, "
            "so its nodes are in that task's log, not this one (under tfplace launch --trace --log_placement, in "
            "that task's trace)")

ROWS = 20

_Row = TypeVar("_Row")
_Key = TypeVar("_Key", bound=tuple)
_Payload = TypeVar("_Payload")


class Group(NamedTuple):
    """Records of one line, op, device and device asked for: how many, and their nodes' names."""

    source: str
    op: str
    device: str
    requested: str
    names: tuple[str, ...]
    count: int  # type: ignore[assignment]  # a field named as tuple.count(), which it hides (mypy: an override)


class Explained(NamedTuple):
    """Explanations of one line, op, device, device asked for and reason: how many, their nodes' names,
    and the first one's message."""

    source: str
    op: str
    device: str
    requested: str
    reason: str
    names: tuple[str, ...]
    count: int  # type: ignore[assignment]  # a field named as tuple.count(), which it hides (mypy: an override)
    message: str


def _grouped(items: Iterable[tuple[_Key, str, _Payload]]) -> list[tuple[_Key, int, tuple[str, ...], _Payload]]:
    """(key, count, names, first payload) per key of `(key, node name, payload)` items, most first."""
    counts: Counter[_Key] = Counter()
    names: dict[_Key, list[str]] = {}
    payloads: dict[_Key, _Payload] = {}
    for key, name, payload in items:
        counts[key] += 1
        payloads.setdefault(key, payload)
        known = names.setdefault(key, [])
        if name and name not in known:
            known.append(name)
    return [(key, count, tuple(names[key]), payloads[key]) for key, count in counts.most_common()]


ENDED = "OutOfRangeError"  # what an iterator raises at the end of its dataset: the loop's normal end, no failure


def failed(records: Iterable[PlacementRecord]) -> list[Group]:
    """The failed eager ops among `records`, grouped, most frequent first; the end of a dataset (an
    `OutOfRangeError`, as `for x in dataset` and Keras' `adapt` meet it) is no failure."""
    return [Group(*key, names, count) for key, count, names, _ in _grouped(
        ((r.source, r.op, r.device, r.requested), r.name, None) for r in records
        if r.kind == Kind.FAILED and r.error != ENDED)]


def explained(explanations: Iterable[Any]) -> list[Explained]:
    """`Explanation`s grouped, most frequent first."""
    return [Explained(*key, names, count, message) for key, count, names, message in _grouped(
        ((e.record.source, e.record.op, e.record.device, e.record.requested, e.reason), e.record.name, e.message)
        for e in explanations)]


def first(rows: Sequence[_Row], limit: int = ROWS) -> tuple[Sequence[_Row], int]:
    """The first `limit` of `rows`, and how many are left out."""
    return rows[:limit], max(0, len(rows) - limit)


def summary(records: Iterable[PlacementRecord]) -> dict[str, dict[str, int]]:
    """Placement events per device and op: on each device the user's compute ops first, most first,
    then TensorFlow's and Keras' own, the input pipeline's and plumbing (`tfplace.placement.records._groups`)."""
    counts: dict[str, Counter] = {}
    for record in records:
        counts.setdefault(record.device, Counter())[(_groups.category(record), record.op)] += 1
    rank = {name: i for i, name in enumerate(_groups.CATEGORIES)}
    found: dict[str, dict[str, int]] = {}
    for device, ops in counts.items():
        ordered = found[device] = {}
        for (_, op), n in sorted(ops.items(), key=lambda item: (rank[item[0][0]], -item[1], item[0][1])):
            ordered[op] = ordered.get(op, 0) + n
    return found


def placements(records: Sequence[PlacementRecord], op: Optional[str] = None
               ) -> tuple[list[tuple[tuple[str, str, str], int]], dict[str, Counter]]:
    """((op, device, kind), count) rows, those of `op` first, then the user's compute ops, most first;
    and per other category (framework, input, plumbing) a Counter of op types."""
    counts = Counter((r.op, r.device or "(unknown)", r.kind) for r in records
                     if r.op == op or _groups.category(r) == "compute")
    others: dict[str, Counter] = {}
    for record in records:
        if record.op != op and _groups.category(record) != "compute":
            others.setdefault(_groups.category(record), Counter())[record.op] += 1
    return sorted(counts.items(), key=lambda item: (item[0][0] != op, -item[1], item[0])), others


def size(count: Optional[float]) -> str:
    """Bytes as people read them: "512 B", "256.0 KiB", "1.5 GiB" ("? B" when unknown)."""
    if count is None:
        return "? B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return ""
