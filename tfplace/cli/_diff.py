"""`tfplace diff A.json B.json`: what moved between two `tfplace trace --json` runs of a script.

Compute ops (origin "user", plumbing left out) are matched by op type, function node and user
line; a function's name loses its trailing number (`__inference_step_52` and `__inference_step_61`
are one function). The diff lists the compute ops whose devices changed, the transfers that
appeared, disappeared or changed bytes, the GPU readiness entries and explanations that appeared
or disappeared, and, when both runs were timed, each device's share of busy time side by side.
The exit status makes it a CI gate: 1 when a compute op moved or a transfer appeared, 0 when
nothing did, 2 for a file that cannot be read. Reading JSON only, it never imports TensorFlow.

In a cluster, `c.json:worker:0` names one task's trace in a merged cluster JSON (`tfplace merge
--json`), so two tasks diff as two traces (each task's own devices named short, `/device:CPU:0`: the
same work on each task's own CPU is no move; other tasks' devices whole); two merged cluster JSON files
diff task by task (matched by task name, with the bytes between each pair of tasks side by side); their
status is the worst task's, 1 when a task is in one cluster only.

Example:
    >>> from tfplace.cli._diff import diff, render
    >>> a = {"records": [{"op": "MatMul", "name": "", "device": "/device:CPU:0", "kind": "execute",
    ...                   "source": "train.py:9", "count": 3}], "transfers": []}
    >>> b = {"records": [{"op": "MatMul", "name": "", "device": "/device:CPU:1", "kind": "execute",
    ...                   "source": "train.py:9", "count": 3}], "transfers": []}
    >>> found = diff(a, b)
    >>> found.status, render(found, "a.json", "b.json").splitlines()[2]
    (1, '  train.py:9  MatMul: CPU:0 -> CPU:1')
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from typing import Any, Mapping, NamedTuple, Optional

from tfplace.placement.records._groups import category
from tfplace.placement.records._records import Kind, Origin, PlacementRecord, input_label
from tfplace._names import is_function_call
from tfplace.placement.shown._report import ROWS
from tfplace.placement.steps._model import PHASES

__all__ = ["Moved", "Diff", "ClusterDiff", "DiffError", "read", "diff", "render", "to_json"]

_NUMBERED = re.compile(r"_\d+$")


class DiffError(Exception):
    """A trace that cannot be read: the message names the file and what is wrong."""


class Moved(NamedTuple):
    """A compute op whose devices changed: where each run placed it (device -> placement events)."""

    source: str
    op: str
    node: str
    before: dict[str, int]
    after: dict[str, int]


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


def _split(path: str) -> tuple[str, str]:
    """("c.json", "worker:0") for "c.json:worker:0" when c.json is a file and the whole is not; else (path, "")."""
    if not os.path.exists(path):
        for at in (i for i, char in enumerate(path) if char == ":"):
            if os.path.isfile(path[:at]):
                return path[:at], path[at + 1:]
    return path, ""


def read(path: str) -> dict[str, Any]:
    """The trace that `tfplace trace --json` wrote to `path`; `FILE:TASK` (`c.json:worker:0`) reads that
    task's trace from a merged cluster JSON, and a merged cluster JSON is read whole.

    Raises:
      DiffError: the file is missing, unreadable, not JSON, not a tfplace trace nor a merged cluster, or
        has no trace of the task asked for.
    """
    from tfplace.cluster import _merge, _names

    path, task = _split(path)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as err:
        raise DiffError(f"tfplace diff: cannot read {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise DiffError(f"tfplace diff: {path} is not JSON (truncated or another format?): {err}") from None
    cluster = isinstance(data, dict) and data.get("format") == _merge.FORMAT and isinstance(data.get("tasks"), list)
    if task and not cluster:
        raise DiffError(f"tfplace diff: {path}:{task} names task {task!r}, but {path} is not a merged cluster: allowed "
                        "is FILE:TASK for a file that tfplace merge --json=FILE wrote, e.g. c.json:worker:0")
    if cluster and not task:
        return data
    if cluster:
        try:
            name = _merge.canonical_task(task, f"argument {path}:{task}")
        except _merge.MergeError as err:
            raise DiffError(f"tfplace diff: {err}") from None
        found = {entry.get("task"): entry for entry in data["tasks"]}
        if found.get(name, {}).get("trace") is None:
            have = ", ".join(t for t, e in found.items() if e.get("trace") is not None) or "none"
            raise DiffError(f"tfplace diff: {path} has no trace of task {name} (from argument {path}:{task}): its "
                            f"traced tasks are {have}")
        prefix = str(found[name].get("device_prefix") or _names.prefix_of(name))
        # the task's own devices named short: the same work on each task's own CPU:0 is no move
        data = json.loads(json.dumps(found[name]["trace"]).replace(f'"{prefix}/device:', '"/device:'))
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise DiffError(f"tfplace diff: {path} is JSON but not a tfplace trace (no list of records): allowed is what "
                        "tfplace trace --json=FILE writes")
    return data


def _function(name: str) -> str:
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
    return (row.get("kind"), _function(str(row.get("function", ""))), row.get("node", ""), row.get("op"),
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
                1 if moved or appeared else 0, _steps(a, b))


def _steps(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """Steps per second and phase shares side by side, when both traces have timed steps."""
    steps_a, steps_b = a.get("steps") or {}, b.get("steps") or {}
    if not (steps_a.get("median_us") and steps_b.get("median_us") and steps_a.get("shares") and steps_b.get("shares")):
        return {}
    return {"per_second": (1e6 / steps_a["median_us"], 1e6 / steps_b["median_us"]),
            **{phase: (steps_a["shares"].get(phase, 0.0), steps_b["shares"].get(phase, 0.0)) for phase in PHASES}}


def _short(device: str) -> str:
    """"/device:CPU:1" -> "CPU:1"; a full name (`/job:worker/replica:0/task:1/device:CPU:0`) whole."""
    return (device[len("/device:"):] if device.startswith("/device:") else device) or "(unknown)"


def _devices(found: Mapping[str, int]) -> str:
    return ", ".join(f"{_short(d)}" + (f" x{n}" if len(found) > 1 else "") for d, n in sorted(found.items()))


def _size(count: Optional[int]) -> str:
    if count is None:
        return "? B"
    value = float(count)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _transfer(row: Mapping[str, Any]) -> str:
    where = row.get("source") or (f"(call at {row['call']})" if row.get("call") else "an unknown line")
    node = f" (node {row['node']} of {_function(str(row.get('function', '')))})" if row.get("node") else ""
    each = f"{_size(row.get('bytes'))} each" if row.get("bytes") is not None else (
        f"{_size(row.get('total_bytes'))} in all" if row.get("total_bytes") is not None else "size unknown")
    return (f"{where}  {input_label(row.get('op'), row.get('input_index'))}{node} "
            f"{_short(str(row.get('from_device')))} -> {_short(str(row.get('to_device')))}, "
            f"{each}, x{row.get('count')}")


def _render_clusters(found: ClusterDiff, name_a: str, name_b: str, top: int) -> str:
    changed = [task for task, d in found.tasks.items() if d.status]
    lines = [f"tfplace diff {name_a} -> {name_b} (clusters, task by task): "
             + (f"{len(changed)} task(s) changed: {', '.join(changed)}" if changed else "no task changed")
             + "".join(f"; {task} only in {side}" for side, task in found.only_in)]
    if found.traffic:
        lines.append("bytes between tasks (A -> B):")
        lines += [f"  {source} -> {target}: {old} B -> {new} B" for source, target, old, new in found.traffic[:top]]
    for task, task_diff in found.tasks.items():
        lines += [f"== {task}", render(task_diff, f"{name_a}:{task}", f"{name_b}:{task}", top=top)]
    return "\n".join(lines)


def render(found: Any, name_a: str, name_b: str, *, top: int = ROWS) -> str:
    """The diff as text: the verdict first, then each kind of change (at most `top` rows each); a
    `ClusterDiff` task by task."""
    if isinstance(found, ClusterDiff):
        return _render_clusters(found, name_a, name_b, top)
    changes = []
    if found.moved:
        changes.append(f"{len(found.moved)} compute op(s) moved")
    if found.appeared:
        changes.append(f"{len(found.appeared)} transfer(s) appeared")
    lines = [f"tfplace diff {name_a} -> {name_b}: " + (", ".join(changes) if changes else "no change")
             + ("" if changes else " in where your compute ops ran or what moved between devices")]

    def section(title: str, rows: list[str]) -> None:
        if rows:
            lines.append(f"{title} ({len(rows)}):")
            lines.extend(f"  {row}" for row in rows[:top])
            if len(rows) > top:
                lines.append(f"  ... and {len(rows) - top} more")

    section("compute ops that moved device", [
        f"{m.source or (f'node {m.node}' if m.node else 'an unknown line')}  {m.op}"
        + (f" (node {m.node})" if m.node and m.source else "") + f": {_devices(m.before)} -> {_devices(m.after)}"
        for m in found.moved])
    section("transfers that appeared", [_transfer(row) for row in found.appeared])
    section("transfers that disappeared", [_transfer(row) for row in found.disappeared])
    section("transfers whose bytes changed", [
        f"{_transfer(new)} (was {_size(old.get('bytes'))} each, {_size(old.get('total_bytes'))} in all; now "
        f"{_size(new.get('total_bytes'))})" for old, new in found.changed])
    section("GPU readiness", [f"{change}: {op}{' ' + dtypes if dtypes else ''}"
                              for change, op, dtypes in found.readiness])
    section("explanations", [f"{change}: {where or 'an unknown line'}  {op} ({reason})"
                             for change, where, op, reason in found.explanations])
    if found.steps:
        rate_a, rate_b = found.steps["per_second"]
        lines.append(f"steps (A -> B): {rate_a:.1f} -> {rate_b:.1f} per second (by the median step); " + ", ".join(
            f"{phase} {100 * share_a:.1f}% -> {100 * share_b:.1f}%" for phase, (share_a, share_b)
            in found.steps.items() if phase != "per_second" and max(share_a, share_b) >= 0.0005))
    if found.shares:
        lines.append("share of busy time per device (A -> B):")
        for device, (share_a, share_b) in found.shares.items():
            shown = [f"{100 * s:.1f}%" if s is not None else "-" for s in (share_a, share_b)]
            lines.append(f"  {_short(device)}: {shown[0]} -> {shown[1]}")
    if found.only_in:
        counts = Counter(side for side, *_ in found.only_in)
        lines.append(f"({counts['A']} compute op(s) only in A, {counts['B']} only in B: another line or node, "
                     "not a move)")
    return "\n".join(lines)


def to_json(found: Any, name_a: str, name_b: str) -> dict[str, Any]:
    """The diff as JSON-ready data (`tfplace diff --json`); a `ClusterDiff`'s with one entry per task."""
    if isinstance(found, ClusterDiff):
        return {"a": name_a, "b": name_b, "status": found.status,
                "tasks": {task: to_json(d, f"{name_a}:{task}", f"{name_b}:{task}") for task, d in found.tasks.items()},
                "only_in": [list(entry) for entry in found.only_in],
                "traffic": [{"from_task": s, "to_task": t, "a": old, "b": new} for s, t, old, new in found.traffic]}
    return {"a": name_a, "b": name_b, "status": found.status,
            "moved": [m._asdict() for m in found.moved], "appeared": list(found.appeared),
            "disappeared": list(found.disappeared), "changed": [{"a": old, "b": new} for old, new in found.changed],
            "readiness": [list(entry) for entry in found.readiness],
            "explanations": [list(entry) for entry in found.explanations],
            "shares": {device: list(pair) for device, pair in found.shares.items()},
            "only_in": [list(entry) for entry in found.only_in],
            "steps": {key: list(pair) for key, pair in found.steps.items()}}
