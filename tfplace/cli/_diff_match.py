"""What changed between two `tfplace trace --json` traces (`diff`), read from their JSON alone: the compute ops
that moved, the transfers, readiness and explanations that appeared or disappeared, time shares, steps and
each device's memory peak side by side; two merged clusters task by task (`ClusterDiff`). `tfplace.cli._diff`
reads the files, `tfplace.cli._diff_text` writes the result.

Example:
    >>> from tfplace.cli._diff_match import diff
    >>> def trace(peak):
    ...     return {"records": [], "memory": {"devices": [{"device": "/device:CPU:0", "peak_bytes": peak}]}}
    >>> found = diff(trace(1024), trace(4096))
    >>> found.status, found.memory
    (0, (Peak(device='/device:CPU:0', a_peak_bytes=1024, b_peak_bytes=4096, change_bytes=3072),))
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Mapping, NamedTuple, Optional

from tfplace.placement.records._groups import category
from tfplace.placement.records._records import Kind, Origin, PlacementRecord
from tfplace._names import is_function_call
from tfplace.placement.steps._model import PHASES

__all__ = ["Moved", "Peak", "Diff", "ClusterDiff", "DiffError", "diff", "function_name"]

_NUMBERED = re.compile(r"_\d+$")


class DiffError(Exception):
    """A trace that cannot be read, or two that cannot be compared: the message names the file and what is wrong."""


class Moved(NamedTuple):
    """A compute op whose devices changed: where each run placed it (device -> placement events)."""

    source: str
    op: str
    node: str
    before: dict[str, int]
    after: dict[str, int]


class Peak(NamedTuple):
    """One device's memory peak in each run (`peak_bytes` of `--json`'s "memory"), None in the run that has no
    figure for that device; `change_bytes` is B's minus A's, None unless both have one."""

    device: str
    a_peak_bytes: Optional[int]
    b_peak_bytes: Optional[int]
    change_bytes: Optional[int]


class Diff(NamedTuple):
    """What changed from run A to run B.

    Attributes:
      moved: compute ops whose devices changed.
      appeared, disappeared: transfers (rows of `--json`'s "transfers") only in B, only in A.
      changed: (A's row, B's row) of transfers in both whose bytes per transfer or total differ.
      readiness: ("appeared" | "disappeared", op, dtypes) of GPU readiness entries.
      explanations: ("appeared" | "disappeared", source or node, op, reason) of explanations.
      shares: device -> (A's share, B's share) of busy time, when both runs were timed.
      only_in: compute ops matched in one run only: ("A" | "B", source, op, node).
      status: 1 when a compute op moved or a transfer appeared, else 0.
      steps: when both runs were timed and have steps, "per_second" -> (A's, B's) steps per second (by
        the median step) and each phase -> (A's share, B's share) of the steady steps' time.
      memory: each device's `Peak`, when both runs counted memory (`tfplace trace --memory`); a change
        in peak alone leaves the status as it is.
      memory_only_in: "A" or "B" when that run alone counted memory, else "".
    """

    moved: tuple[Moved, ...]
    appeared: tuple[dict, ...]
    disappeared: tuple[dict, ...]
    changed: tuple[tuple[dict, dict], ...]
    readiness: tuple[tuple[str, str, str], ...]
    explanations: tuple[tuple[str, str, str, str], ...]
    shares: dict[str, tuple[Optional[float], Optional[float]]]
    only_in: tuple[tuple[str, str, str, str], ...]
    status: int
    steps: dict[str, tuple[float, float]] = {}
    memory: tuple[Peak, ...] = ()
    memory_only_in: str = ""


class ClusterDiff(NamedTuple):
    """What changed from cluster A to cluster B (two `tfplace merge --json` files), task by task.

    Attributes:
      tasks: task name -> the `Diff` of its two traces, for the tasks both clusters traced.
      only_in: ("A" | "B", task) of the tasks one cluster has.
      traffic: (from task, to task, A's bytes, B's bytes) of the pairs whose bytes between tasks differ.
      status: the worst task's status; 1 when a task is in one cluster only.
    """

    tasks: dict[str, Diff]
    only_in: tuple[tuple[str, str], ...]
    traffic: tuple[tuple[str, str, int, int], ...]
    status: int


def function_name(name: str) -> str:
    """A function's name without its trailing number: `__inference_step_52` -> `__inference_step`."""
    return _NUMBERED.sub("", name)


def _record(item: Mapping[str, Any]) -> PlacementRecord:
    fields = {key: value for key, value in item.items() if key in PlacementRecord._fields and key != "dtypes"}
    return PlacementRecord(**fields)


def _compute(data: Mapping[str, Any]) -> dict[tuple[str, str, str], Counter]:
    """(source, op, node) -> devices (placement events) of the run's compute ops."""
    found: dict[tuple[str, str, str], Counter] = {}
    for item in data.get("records", []):
        record = _record(item)
        if category(record) != "compute" or is_function_call(record.op) or record.kind == Kind.FAILED:
            continue
        found.setdefault((record.source, record.op, record.name), Counter())[record.device] += int(item.get("count", 1))
    return found


def _transfer_key(row: Mapping[str, Any]) -> tuple:
    return (row.get("kind"), function_name(str(row.get("function", ""))), row.get("node", ""), row.get("op"),
            row.get("input_index"), row.get("from_device"), row.get("to_device"), row.get("source", ""))


def _transfers(data: Mapping[str, Any]) -> dict[tuple, dict]:
    rows: dict[tuple, dict] = {}
    for row in data.get("transfers", []) or []:
        key = _transfer_key(row)
        if key in rows:  # one line's transfers of several tensors, or of two instances of a function: add them up
            merged = dict(rows[key])
            merged["count"] = merged.get("count", 0) + row.get("count", 0)
            both = (merged.get("total_bytes"), row.get("total_bytes"))
            merged["total_bytes"] = None if None in both else both[0] + both[1]
            if merged.get("bytes") != row.get("bytes"):
                merged["bytes"] = None  # sizes vary: the total says it
            rows[key] = merged
        else:
            rows[key] = dict(row)
    return rows


def _readiness(data: Mapping[str, Any]) -> set[tuple[str, str]]:
    return {(str(entry.get("op")), " ".join(f"{n}={v}" for n, v in entry.get("dtypes", [])))
            for entry in data.get("gpu_readiness") or []}


def _explained(data: Mapping[str, Any]) -> set[tuple[str, str, str]]:
    found = set()
    for entry in data.get("explanations") or []:
        record = entry.get("record", {})
        if record.get("origin", Origin.USER) != Origin.USER:
            continue
        where = record.get("source") or (f"node {record.get('name')}" if record.get("name") else "")
        found.add((where, str(record.get("op")), str(entry.get("reason"))))
    return found


def _shares(data: Mapping[str, Any]) -> dict[str, Optional[float]]:
    rows = (data.get("cost") or {}).get("devices") or []
    return {str(row.get("device")): row.get("share") for row in rows if isinstance(row, dict)}


def _peaks(data: Mapping[str, Any]) -> dict[str, int]:
    """Device -> peak bytes of the run's memory figures; empty when it did not count memory (no "memory", or
    no devices in it)."""
    memory = data.get("memory")
    rows = (memory.get("devices") or []) if isinstance(memory, dict) else []
    return {str(row["device"]): int(row["peak_bytes"]) for row in rows
            if isinstance(row, dict) and row.get("device") and row.get("peak_bytes") is not None}


def _memory(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[tuple[Peak, ...], str]:
    """Each device's peak side by side when both runs counted memory, and which run alone did ("A", "B" or "")."""
    peaks_a, peaks_b = _peaks(a), _peaks(b)
    if not (peaks_a and peaks_b):
        return (), "A" if peaks_a else "B" if peaks_b else ""
    both = peaks_a.keys() & peaks_b.keys()
    return tuple(Peak(device, peaks_a.get(device), peaks_b.get(device),
                      peaks_b[device] - peaks_a[device] if device in both else None)
                 for device in sorted({*peaks_a, *peaks_b})), ""


def _pairs(cluster: Mapping[str, Any]) -> Counter:
    """(from task, to task) -> bytes between them (the merged cluster's traffic rows)."""
    found: Counter = Counter()
    for row in cluster.get("traffic") or []:
        found[(row.get("from_task"), row.get("to_task"))] += int(row.get("bytes") or 0)
    return found


def _clusters(a: Mapping[str, Any], b: Mapping[str, Any]) -> ClusterDiff:
    traced = [{e.get("task"): e["trace"] for e in c.get("tasks") or [] if e.get("trace") is not None} for c in (a, b)]
    tasks = {task: diff(trace, traced[1][task]) for task, trace in traced[0].items() if task in traced[1]}
    only_in = tuple([("A", t) for t in traced[0] if t not in traced[1]]
                    + [("B", t) for t in traced[1] if t not in traced[0]])
    old, new = _pairs(a), _pairs(b)
    traffic = tuple((*pair, old[pair], new[pair]) for pair in sorted({*old, *new}, key=str) if old[pair] != new[pair])
    worst = max([found.status for found in tasks.values()] + [1 if only_in else 0])
    return ClusterDiff(tasks, only_in, traffic, worst)


def diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> Any:
    """What changed from trace `a` to trace `b` (the data `tfplace trace --json` writes): a `Diff`; for two
    merged clusters (`tfplace merge --json`), a `ClusterDiff`, task by task.

    Raises:
      DiffError: one is a merged cluster and the other a trace.
    """
    from tfplace.cluster._merge import FORMAT

    kinds = [data.get("format") == FORMAT for data in (a, b)]
    if kinds[0] != kinds[1]:
        raise DiffError(f"tfplace diff: {'A' if kinds[0] else 'B'} is a merged cluster, the other one trace: allowed "
                        "are two traces, two tasks of clusters (c.json:worker:0), or two merged cluster files")
    if all(kinds):
        return _clusters(a, b)
    before, after = _compute(a), _compute(b)
    moved = tuple(Moved(source, op, node, dict(before[key]), dict(after[key]))
                  for key in before if key in after and set(before[key]) != set(after[key])
                  for source, op, node in [key])
    only_in = tuple([("A", *key) for key in before if key not in after]
                    + [("B", *key) for key in after if key not in before])
    old, new = _transfers(a), _transfers(b)
    appeared = tuple(new[key] for key in new if key not in old)
    disappeared = tuple(old[key] for key in old if key not in new)
    changed = tuple((old[key], new[key]) for key in new if key in old
                    and (old[key].get("bytes"), old[key].get("total_bytes")) != (new[key].get("bytes"),
                                                                                  new[key].get("total_bytes")))
    ready_a, ready_b = _readiness(a), _readiness(b)
    readiness = tuple([("appeared", *entry) for entry in sorted(ready_b - ready_a)]
                      + [("disappeared", *entry) for entry in sorted(ready_a - ready_b)])
    explained_a, explained_b = _explained(a), _explained(b)
    explanations = tuple([("appeared", *entry) for entry in sorted(explained_b - explained_a)]
                         + [("disappeared", *entry) for entry in sorted(explained_a - explained_b)])
    shares_a, shares_b = _shares(a), _shares(b)
    shares = {}
    if any(v is not None for v in shares_a.values()) and any(v is not None for v in shares_b.values()):
        shares = {device: (shares_a.get(device), shares_b.get(device)) for device in sorted({*shares_a, *shares_b})}
    return Diff(moved, appeared, disappeared, changed, readiness, explanations, shares, only_in,
                1 if moved or appeared else 0, _steps(a, b), *_memory(a, b))


def _steps(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """Steps per second and phase shares side by side, when both traces have timed steps."""
    steps_a, steps_b = a.get("steps") or {}, b.get("steps") or {}
    if not (steps_a.get("median_us") and steps_b.get("median_us") and steps_a.get("shares") and steps_b.get("shares")):
        return {}
    return {"per_second": (1e6 / steps_a["median_us"], 1e6 / steps_b["median_us"]),
            **{phase: (steps_a["shares"].get(phase, 0.0), steps_b["shares"].get(phase, 0.0)) for phase in PHASES}}


