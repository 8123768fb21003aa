"""Each step's wall time split into phases, and each device's busy time, from a profile's intervals.

Every instant of a step goes to one phase, the first of: `compute` (a kernel or node of the program ran,
on any device), `input` (a get-next waited for the pipeline), `sync` (a collective waited for its
peers), `transfer` (a copy ran), `compile` (tracing, or a call that traced), `idle` (inside a function
call or `Session.run`, nothing else), `host` (the rest: Python between and around calls). So the phases
of a step sum to its wall time, and a wait is never busy time. Work is counted once however many threads
ran it at that instant.

Example:
    >>> layers = {"compute": [(0.0, 2.0)], "input": [(1.0, 5.0)]}
    >>> split([(0.0, 10.0)], layers, inside=[(0.0, 8.0)])[0]["input"]
    4.0
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from itertools import accumulate
from typing import Iterable, Mapping, Sequence

from tfplace.placement.steps._model import PHASES

__all__ = ["union", "Measure", "split", "busy"]

_LAYERED = ("compute", "input", "sync", "transfer", "compile")


def _merged(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted (start, end) intervals, overlapping ones joined."""
    out: list[tuple[float, float]] = []
    for start, end in intervals:
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """(start, length) spans as sorted, disjoint (start, end) intervals."""
    return _merged(sorted((s, s + d) for s, d in spans if d > 0))


def _minus(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Disjoint sorted intervals `a` less `b`."""
    out, j = [], 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k, cursor = j, start
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cursor:
                out.append((cursor, b[k][0]))
            cursor = max(cursor, b[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def _plus(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    return _merged(heapq.merge(a, b))


class Measure:
    """How much of a set of disjoint sorted intervals lies in a window, in O(log n) per window."""

    def __init__(self, intervals: Sequence[tuple[float, float]]) -> None:
        self.starts = [s for s, _ in intervals]
        self.ends = [e for _, e in intervals]
        self.before = [0.0, *accumulate(e - s for s, e in intervals)]

    def within(self, low: float, high: float) -> float:
        if high <= low or not self.starts:
            return 0.0
        first = bisect_left(self.ends, low + 1e-12)  # the first interval ending after `low`
        last = bisect_left(self.starts, high)  # intervals [first, last) start before `high`
        if first >= last:
            return 0.0
        total = self.before[last] - self.before[first]
        total -= max(0.0, low - self.starts[first])
        total -= max(0.0, self.ends[last - 1] - high)
        return max(0.0, total)


def split(spans: Sequence[tuple[float, float]], layers: Mapping[str, Iterable[tuple[float, float]]],
          inside: Iterable[tuple[float, float]]) -> list[dict[str, float]]:
    """Each (start, end) step span's phases in µs.

    Args:
      spans: the steps, (start, end) in µs.
      layers: phase -> (start, length) spans of what happened in it, for the phases `compute`, `input`,
        `sync`, `transfer` and `compile`.
      inside: (start, length) spans of function calls and Session runs (uncovered time there is idle).
    """
    covered: list[tuple[float, float]] = []
    measures = {}
    for phase in _LAYERED:
        own = _minus(union(layers.get(phase, ())), covered)
        measures[phase] = Measure(own)
        covered = _plus(covered, own)
    measures["idle"] = Measure(_minus(union(inside), covered))
    out = []
    for low, high in spans:
        phases = {phase: measures[phase].within(low, high) for phase in (*_LAYERED, "idle")}
        phases["host"] = max(0.0, (high - low) - sum(phases.values()))
        out.append({phase: phases[phase] for phase in PHASES})
    return out


def busy(spans: Sequence[tuple[float, float]],
         work: Mapping[str, Iterable[tuple[float, float]]]) -> dict[str, float]:
    """Per device, the µs within `spans` ((start, end), disjoint) in which its work ((start, length)) ran."""
    out = {}
    for device, spans_of in work.items():
        measure = Measure(union(spans_of))
        out[device] = sum(measure.within(low, high) for low, high in spans)
    return out
