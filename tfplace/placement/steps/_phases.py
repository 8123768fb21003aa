"""Each step's wall time split into phases, and each device's busy time, from a profile's intervals.

Every instant of a step goes to one phase, the first of: `compute` (a kernel or node of the program ran,
on any device), `input` (a get-next waited for the pipeline), `sync` (a collective waited for its
peers), `transfer` (a copy ran), `compile` (tracing, or a call that traced), `idle` (inside a function
call or `Session.run`, nothing else), `host` (the rest: Python between and around calls). So the phases
of a step sum to its wall time, and a wait is never busy time. Work is counted once however many threads
ran it at that instant. Intervals are numpy arrays of starts and ends: a profile of 10,000 steps holds
some 200,000 events.

Example:
    >>> layers = {"compute": [(0.0, 2.0)], "input": [(1.0, 5.0)]}
    >>> split([(0.0, 10.0)], layers, inside=[(0.0, 8.0)])[0]["input"]
    4.0
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from tfplace.placement.steps._model import PHASES

__all__ = ["union", "Measure", "split", "busy"]

_LAYERED = ("compute", "input", "sync", "transfer", "compile")
_Intervals = tuple[np.ndarray, np.ndarray]  # sorted, disjoint: starts, ends


def _joined(starts: np.ndarray, ends: np.ndarray) -> _Intervals:
    """(start, end) intervals as sorted, disjoint ones: overlapping or touching ones joined, empty ones left out."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    first = np.flatnonzero(np.concatenate(([True], starts[1:] > reach[:-1])))  # each joined interval's first
    return starts[first], reach[np.concatenate((first[1:] - 1, [len(starts) - 1]))]


def _of(spans: Iterable[tuple[float, float]]) -> _Intervals:
    pairs = np.asarray(list(spans), dtype=float).reshape(-1, 2)
    return _joined(pairs[:, 0], pairs[:, 0] + pairs[:, 1])


def union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """(start, length) spans as sorted, disjoint (start, end) intervals."""
    starts, ends = _of(spans)
    return list(zip(starts.tolist(), ends.tolist()))


def _minus(a: _Intervals, b: _Intervals) -> _Intervals:
    """`a` less `b`: the stretches where `a`'s coverage is 1 and `b`'s 0, from the sorted boundaries of both."""
    points = np.concatenate((a[0], a[1], b[0], b[1]))
    deltas = np.concatenate((np.ones(len(a[0])), -np.ones(len(a[1])),
                             np.full(len(b[0]), 2.0), np.full(len(b[1]), -2.0)))
    order = np.argsort(points, kind="stable")
    points, level = points[order], np.cumsum(deltas[order])
    only_a = np.flatnonzero(level[:-1] == 1.0)
    return _joined(points[only_a], points[only_a + 1])


def _plus(a: _Intervals, b: _Intervals) -> _Intervals:
    return _joined(np.concatenate((a[0], b[0])), np.concatenate((a[1], b[1])))


class Measure:
    """How much of a set of disjoint sorted (start, end) intervals lies in windows, in O(log n) per window."""

    def __init__(self, intervals: Sequence[tuple[float, float]] | _Intervals) -> None:
        if isinstance(intervals, tuple) and len(intervals) == 2 and isinstance(intervals[0], np.ndarray):
            self.starts, self.ends = intervals
        else:
            pairs = np.asarray(list(intervals), dtype=float).reshape(-1, 2)
            self.starts, self.ends = pairs[:, 0], pairs[:, 1]
        self.before = np.concatenate(([0.0], np.cumsum(self.ends - self.starts)))

    def within(self, low: float, high: float) -> float:
        return float(self.within_all(np.array([low]), np.array([high]))[0])

    def within_all(self, lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
        """Per window [low, high), the measure of the intervals inside it."""
        if not len(self.starts):
            return np.zeros(len(lows))
        first = np.searchsorted(self.ends, lows + 1e-12)  # the first interval ending after `low`
        last = np.searchsorted(self.starts, highs)  # intervals [first, last) start before `high`
        some = (first < last) & (highs > lows)
        at_first, at_last = np.minimum(first, len(self.starts) - 1), np.maximum(last - 1, 0)
        total = self.before[last] - self.before[first]
        total -= np.maximum(0.0, lows - self.starts[at_first])
        total -= np.maximum(0.0, self.ends[at_last] - highs)
        return np.where(some, np.maximum(0.0, total), 0.0)


def split(spans: Sequence[tuple[float, float]], layers: Mapping[str, Iterable[tuple[float, float]]],
          inside: Iterable[tuple[float, float]]) -> list[dict[str, float]]:
    """Each (start, end) step span's phases in µs.

    Args:
      spans: the steps, (start, end) in µs.
      layers: phase -> (start, length) spans of what happened in it, for the phases `compute`, `input`,
        `sync`, `transfer` and `compile`.
      inside: (start, length) spans of function calls and Session runs (uncovered time there is idle).
    """
    windows = np.asarray(spans, dtype=float).reshape(-1, 2)
    lows, highs = windows[:, 0], windows[:, 1]
    covered: _Intervals = (np.zeros(0), np.zeros(0))
    measured = {}
    for phase in _LAYERED:
        own = _minus(_of(layers.get(phase, ())), covered)
        measured[phase] = Measure(own).within_all(lows, highs)
        covered = _plus(covered, own)
    measured["idle"] = Measure(_minus(_of(inside), covered)).within_all(lows, highs)
    measured["host"] = np.maximum(0.0, (highs - lows) - sum(measured.values()))
    columns = {phase: measured[phase].tolist() for phase in PHASES}
    return [{phase: columns[phase][i] for phase in PHASES} for i in range(len(windows))]


def busy(spans: Sequence[tuple[float, float]],
         work: Mapping[str, Iterable[tuple[float, float]]]) -> dict[str, float]:
    """Per device, the µs within `spans` ((start, end), disjoint) in which its work ((start, length)) ran."""
    windows = np.asarray(spans, dtype=float).reshape(-1, 2)
    return {device: float(Measure(_of(spans_of)).within_all(windows[:, 0], windows[:, 1]).sum())
            for device, spans_of in work.items()}
