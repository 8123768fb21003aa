"""`tfplace merge`: the traces of a cluster's tasks (`tfplace trace --json`, one file per task) read and
merged into one JSON, `"format": "tfplace-cluster/1"` (docs/guides/clusters.md). JSON only: no TensorFlow.

A task is named `job:index` ("worker:1", "ps:0"; "chief" for the chief): as the caller names it
(`tfplace launch --trace`), as the trace's "cluster" section does, or else by the devices of its eager
records (`/job:worker/replica:0/task:1/...`). Devices are named in full; a record or copy on another
task's device counts for that task. Per collective group and op, calls are the most any task made
(tasks with fewer are `uneven`); variables per ps task give `ps_bytes` and `ps_imbalance`; the traffic
between tasks (collectives as a ring estimate, remote variable reads and writes, implicit transfers
between devices of two tasks) is added up per pair of tasks and in a task-by-task bytes `matrix`.

Example:
    >>> from tfplace.cluster._merge import merge
    >>> def trace(index, calls):
    ...     reduce = {"op": "CollectiveReduceV2", "group_key": 1, "group_size": 2, "instance_key": 3,
    ...               "dtype": "float32", "bytes_per_call": 32, "calls": calls, "source": "train.py:20",
    ...               "device": f"/job:worker/replica:0/task:{index}/device:CPU:0"}
    ...     return {"format": "tfplace-log/2", "records": [], "exit_status": 0,
    ...             "cluster": {"task": f"worker:{index}", "collectives": [reduce]}}
    >>> merged = merge([("worker:0", trace(0, 3)), ("worker:1", trace(1, 2))])
    >>> [(c["calls"], c["uneven"]) for c in merged["collectives"]]
    [(3, ['worker:1'])]
    >>> merged["matrix"]
    {'tasks': ['worker:0', 'worker:1'], 'bytes': [[0, 96], [64, 0]]}
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from tfplace._errors import Error
from tfplace.cluster import _steps
from tfplace.cluster._names import device_task, full_device, owner, prefix_of, task_key, task_name
from tfplace.placement.records._log_json import JSON_FORMAT
from tfplace.placement.records._records import input_label

__all__ = ["FORMAT", "MergeError", "read_trace", "trace_task", "canonical_task", "merge", "merge_files"]

FORMAT = "tfplace-cluster/1"
_TASK = re.compile(r"^([A-Za-z_][\w\-]*)(?:[: ](\d+))?$")


class MergeError(Error, ValueError):
    """A trace that cannot be merged: the message names the file (or task) and what is wrong."""


def _load(path: str, command: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except OSError as err:
        raise MergeError(f"{command}: cannot read {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise MergeError(f"{command}: {path} is not JSON (truncated, or another kind of file?): {err}") from None


def read_trace(path: str, command: str = "tfplace merge") -> dict[str, Any]:
    """The trace `tfplace trace --json` wrote to `path`.

    Raises:
      MergeError: the file cannot be read, is not JSON, or is not a trace (its "format" is not
        "tfplace-log/2", or it has no list of records); the message names the file.
    """
    data = _load(path, command)
    found = data.get("format") if isinstance(data, dict) else None
    if found == FORMAT:
        raise MergeError(f"{command}: {path} is a merged cluster ({FORMAT}), not one task's trace: allowed are the "
                         "files tfplace trace --json=FILE wrote, one per task")
    if found != JSON_FORMAT or not isinstance(data.get("records"), list):
        what = f"its \"format\" is {found!r}" if found is not None else "it has no \"format\""
        raise MergeError(f"{command}: {path} is not a tfplace trace: {what}"
                         f"{'' if found != JSON_FORMAT else ' but no list of records'}"
                         f"; allowed is {JSON_FORMAT!r} with its records, what tfplace trace --json=FILE writes")
    return data


def canonical_task(name: str, origin: str = "argument paths") -> str:
    """"worker:1" as written; "chief:0" and "chief" -> "chief"; "worker" -> "worker:0".

    Raises:
      MergeError: `name` is not `job` or `job:index`.
    """
    match = _TASK.match(str(name).strip())
    if not match:
        raise MergeError(f"task {name!r} (from {origin}) is not a task name: allowed is job:index, e.g. "
                         "'worker:1', 'ps:0', or 'chief'")
    job, index = match.group(1), int(match.group(2) or 0)
    return task_name(f"/job:{job}/replica:0/task:{index}")


def trace_task(trace: Mapping[str, Any]) -> Optional[tuple[str, str]]:
    """(task name, device prefix) of a trace: its "cluster" section's, else the task most of its eager ops
    (else its records) ran on, a ps task last (a coordinator reads variables there); None for a trace that
    names no cluster task (a single process)."""
    section = trace.get("cluster") or {}
    if section.get("task"):
        task = canonical_task(section["task"], "the trace's cluster section")
        return task, section.get("device_prefix") or prefix_of(task)
    records = [r for r in trace.get("records") or [] if isinstance(r, dict)]
    for chosen in ([r for r in records if r.get("kind") in ("execute", "failed")], records):
        counts: Counter = Counter()
        for record in chosen:
            counts[device_task(str(record.get("device", "")))] += int(record.get("count", 1))
        counts.pop("", None)
        if counts:
            prefix = max(counts, key=lambda p: (not p.startswith("/job:ps/"), counts[p]))
            return task_name(prefix), prefix
    return None


def _ordered(tasks: Iterable[str]) -> list[str]:
    return sorted(set(tasks), key=task_key)


_SHARE = {"all-reduce": lambda n: 2 * (n - 1) / n, "all-gather": lambda n: n - 1,
          "reduce-scatter": lambda n: (n - 1) / n}  # what a ring member sends per call, in bytes_per_call


def _kind(op: str) -> str:
    """What a collective op does ("" when unknown)."""
    for part, kind in (("BcastSend", "broadcast"), ("BcastRecv", "broadcast-recv"), ("ReduceScatter", "reduce-scatter"),
                       ("AllToAll", "all-to-all"), ("Gather", "all-gather"), ("Reduce", "all-reduce")):
        if part in op:
            return kind
    return ""


class _Traffic:
    """Traffic rows added up by (from task, to task, what)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, str], dict[str, Any]] = {}

    def add(self, source: str, target: str, count: Optional[int], moved: Optional[float], what: str, kind: str,
            per_step: Optional[bool] = None, where: str = "") -> None:
        if not source or not target or source == target:
            return
        row = self.rows.setdefault((source, target, what), {"from_task": source, "to_task": target, "count": 0,
                                                            "bytes": 0, "what": what, "kind": kind,
                                                            "per_step": per_step, "source": where})
        row["count"] = None if count is None or row["count"] is None else row["count"] + int(count)
        row["bytes"] = None if moved is None or row["bytes"] is None else row["bytes"] + int(round(moved))

    def sorted(self) -> list[dict[str, Any]]:
        """Most bytes first (unknown last)."""
        return sorted(self.rows.values(), key=lambda r: (r["bytes"] is None, -(r["bytes"] or 0),
                                                         task_key(r["from_task"]), task_key(r["to_task"]), r["what"]))


def _device_order(device: str) -> tuple:
    return (task_key(owner(device)), device)


def _largest(values: Sequence[Optional[int]]) -> Optional[int]:
    """The largest of `values`, None where one of them is None (not known)."""
    known = [value for value in values if value is not None]
    return max(known) if len(known) == len(values) else None


def _collectives(tasks: Sequence[Mapping[str, Any]], moved: _Traffic) -> list[dict[str, Any]]:
    """One row per collective op node (its op, group and instance: a step's gradient all-reduce and its loss's
    are two rows, each with its own bytes and line), over the tasks that ran it; the bytes each member device
    sends (a ring over the group's devices; a broadcast from its sender to each receiver) go into `moved`.

    Each entry of a task is one collective op on one device; bytes per call are a member device's, calls the
    most any task made. Where instance keys are not static (a strategy's replicas on GPUs), the replicas' nodes
    of one collective (`replica_1/...`) are one row.
    """
    found = [(entry["task"], dict(c, device=full_device(str(c.get("device", "")), entry["device_prefix"])))
             for entry in tasks for c in ((entry.get("trace") or {}).get("cluster") or {}).get("collectives") or []]
    groups: dict[tuple[str, Any, Any, str], list[tuple[str, dict[str, Any]]]] = {}
    receivers: dict[Any, set[str]] = {}
    for task, c in found:
        instance = c.get("instance_key")
        node = "" if instance is not None else re.sub(r"^replica_\d+/", "", str(c.get("node") or ""))
        groups.setdefault((str(c.get("op", "")), c.get("group_key"), instance, node), []).append((task, c))
        if _kind(str(c.get("op", ""))) == "broadcast-recv":
            receivers.setdefault(c.get("group_key"), set()).add(c["device"])
    rows = []
    for (op, key, instance, _), members in sorted(groups.items(), key=lambda item: tuple(map(str, item[0]))):
        kind = _kind(op)
        label = (f"{op} group {key}" + (f" instance {instance}" if instance is not None else "") if key is not None
                 else f"{op} (eager: group not kept)")
        per_device: dict[str, list[Optional[int]]] = {}
        per_task: dict[str, list[int]] = {}
        for task, c in members:
            per_device.setdefault(c["device"], []).append(c.get("bytes_per_call"))
            per_task.setdefault(task, []).extend([int(c["calls"])] if c.get("calls") is not None else [])
        each = [_largest(sizes) for sizes in per_device.values()]
        calls_per_task = {t: max(per_task[t]) if per_task[t] else None for t in _ordered(per_task)}
        known = [n for n in calls_per_task.values() if n is not None]
        calls = max(known) if known else None
        ring = sorted(per_device, key=_device_order)
        size = Counter(c.get("group_size") for _, c in members).most_common(1)[0][0]
        sources = Counter(c.get("source") for _, c in members if c.get("source"))
        rows.append({"op": op, "group_key": key, "group_size": size,
                     "dtype": ", ".join(sorted({str(c.get("dtype")) for _, c in members if c.get("dtype")})),
                     "bytes_per_call": _largest(each), "calls": calls, "tasks": list(calls_per_task),
                     "devices": ring, "source": sources.most_common(1)[0][0] if sources else "", "kind": kind,
                     "instance_keys": sorted({c.get("instance_key") for _, c in members}, key=str),
                     "calls_per_task": calls_per_task,
                     "uneven": [t for t, n in calls_per_task.items()
                                if calls is not None and n is not None and n < calls]})
        for task, c in members:
            n, total = c.get("calls"), None if c.get("bytes_per_call") is None or c.get("calls") is None else \
                c["bytes_per_call"] * c["calls"]
            where = str(c.get("source") or "")
            if kind in _SHARE and len(ring) > 1:
                after = ring[(ring.index(c["device"]) + 1) % len(ring)]
                moved.add(task, owner(after), n, None if total is None else total * _SHARE[kind](size or len(ring)),
                          f"{label}: {kind} estimate (ring)", "collective", where=where)
            elif kind == "all-to-all":
                for other in ring:
                    moved.add(task, owner(other), n, None if total is None else total / (size or len(ring)),
                              f"{label}: all-to-all estimate", "collective", where=where)
            elif kind == "broadcast":
                for other in sorted(receivers.get(key, ()), key=_device_order):
                    moved.add(task, owner(other), n, total, f"{label}: broadcast", "collective", where=where)
    return rows


def _remote(tasks: Sequence[Mapping[str, Any]], moved: _Traffic) -> None:
    """Reads and writes of variables on another task (the traces' "remote" entries), each once."""
    seen = set()
    for entry in tasks:
        for r in ((entry.get("trace") or {}).get("cluster") or {}).get("remote") or []:
            source, target = (full_device(str(r.get(side, "")), entry["device_prefix"])
                              for side in ("from_device", "to_device"))
            what = str(r.get("what", ""))
            key = (source, target, what, r.get("count"), r.get("bytes"), r.get("per_step"))
            if key in seen:  # two tasks saw the same reads
                continue
            seen.add(key)
            access = "read" if "Read" in what or "Gather" in what else "write" if any(
                w in what for w in ("Assign", "Apply", "Scatter")) else "access"
            label = f"{what}: remote variable {access}"
            moved.add(owner(source), owner(target), r.get("count"), r.get("bytes"), label, "remote",
                      per_step=r.get("per_step"))
            if r.get("steps") is not None and (row := moved.rows.get((owner(source), owner(target), label))):
                row["steps"] = max(row.get("steps") or 0, int(r["steps"]))


def _tensors(tasks: Sequence[Mapping[str, Any]], moved: _Traffic) -> None:
    """Implicit transfers whose two devices are on different tasks (a transfer two traces saw, once)."""
    found: dict[tuple, dict[str, Any]] = {}
    for entry in tasks:
        trace, own = entry.get("trace") or {}, entry["device_prefix"]
        rows = trace.get("transfers") or [dict(c, total_bytes=None if c.get("bytes") is None else
                                               c["bytes"] * int(c.get("count", 1))) for c in trace.get("copies") or []]
        for row in rows:
            source, target = (full_device(str(row.get(side, "")), own) for side in ("from_device", "to_device"))
            if not owner(source) or not owner(target) or owner(source) == owner(target):
                continue
            key = (row.get("kind"), re.sub(r"_\d+$", "", str(row.get("function", ""))), row.get("node"), row.get("op"),
                   row.get("input_index"), source, target, row.get("tensor"))
            if key not in found or int(row.get("count", 1)) > int(found[key].get("count", 1)):
                found[key] = row
    pairs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for (_, _, _, _, _, source, target, _), row in found.items():
        pairs.setdefault((owner(source), owner(target)), []).append(row)
    for (source, target), rows in pairs.items():
        rows.sort(key=lambda r: -(r.get("total_bytes") or 0))
        ops = list(dict.fromkeys(input_label(r.get('op'), r.get('input_index')) for r in rows))
        unknown = sum(1 for r in rows if r.get("total_bytes") is None)
        what = ("tensors (implicit transfers: " + ", ".join(ops[:3])
                + (f" and {len(ops) - 3} more" if len(ops) > 3 else "")
                + (f"; {unknown} of unknown size" if unknown else "") + ")")
        moved.add(source, target, sum(int(r.get("count", 1)) for r in rows),
                  sum(int(r.get("total_bytes") or 0) for r in rows), what, "tensor",
                  where=str(rows[0].get("source") or ""))


def _variables(tasks: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, int], Optional[float]]:
    """The variables every trace lists, once each (by name and device); bytes per ps task and the imbalance."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    ps = {entry["device_prefix"] for entry in tasks if entry["task"].startswith("ps:")}
    for entry in tasks:
        trace, own = entry.get("trace") or {}, entry["device_prefix"]
        for variable in (trace.get("cluster") or {}).get("variables") or []:
            device = full_device(str(variable.get("device", "")), own)
            found.setdefault((str(variable.get("name", "")), device), {
                "name": variable.get("name"), "shape": variable.get("shape"), "dtype": variable.get("dtype"),
                "bytes": variable.get("bytes"), "device": device})
        devices = [str(r.get("device", "")) for r in trace.get("records") or []]
        devices += [str(c.get(side, "")) for c in trace.get("copies") or [] for side in ("from_device", "to_device")]
        ps.update(p for p in map(device_task, devices) if p.startswith("/job:ps/"))
    variables = sorted(found.values(), key=lambda v: (task_key(task_name(device_task(v["device"])))
                                                       if device_task(v["device"]) else (9, "", 0),
                                                       v["device"], str(v["name"])))
    ps.update(p for p in (device_task(v["device"]) for v in variables) if p.startswith("/job:ps/"))
    ps_bytes = {prefix: 0 for prefix in sorted(ps, key=lambda p: task_key(task_name(p)))}
    for variable in variables:
        prefix = device_task(variable["device"])
        if prefix in ps_bytes:
            ps_bytes[prefix] += int(variable.get("bytes") or 0)
    if not ps_bytes:
        return variables, ps_bytes, None
    mean = sum(ps_bytes.values()) / len(ps_bytes)
    return variables, ps_bytes, round(max(ps_bytes.values()) / mean, 3) if mean else 1.0


def merge(traces: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The merged JSON of `traces`, (task name, that task's trace JSON) pairs, in any order.

    Returns:
      {"format": "tfplace-cluster/1", "tasks", "collectives", "variables", "ps_bytes", "ps_imbalance" (only
      with ps tasks), "traffic", "matrix", "steps" (per task, `tfplace.cluster._steps`), "slowest" (the
      worker computing most per step, or None), "advice" (across workers)}: see docs/guides/clusters.md.

    Raises:
      MergeError: a task name is not `job:index`, or two traces are of the same task.
    """
    tasks: dict[str, dict[str, Any]] = {}
    for name, trace in traces:
        task = canonical_task(name, "argument traces")
        if task in tasks:
            raise MergeError(f"merge received two traces of task {task} (from argument traces): allowed is one "
                             "trace per task")
        section = (trace or {}).get("cluster") or {}
        tasks[task] = {"task": task, "device_prefix": section.get("device_prefix") or prefix_of(task),
                       "exit_status": (trace or {}).get("exit_status"), "trace": trace}
    entries = [tasks[t] for t in _ordered(tasks)]
    variables, ps_bytes, imbalance = _variables(entries)
    moved = _Traffic()
    collectives = _collectives(entries, moved)
    _remote(entries, moved)
    _tensors(entries, moved)
    traffic = moved.sorted()
    matrix_tasks = _ordered([*tasks, *(r["from_task"] for r in traffic), *(r["to_task"] for r in traffic)])
    index = {t: i for i, t in enumerate(matrix_tasks)}
    matrix = [[0] * len(matrix_tasks) for _ in matrix_tasks]
    for row in traffic:
        matrix[index[row["from_task"]]][index[row["to_task"]]] += int(row["bytes"] or 0)
    steps = _steps.worker_steps(entries)
    slowest = _steps.slowest(steps)
    merged: dict[str, Any] = {"format": FORMAT, "tasks": entries, "collectives": collectives, "variables": variables,
                              "ps_bytes": ps_bytes, "traffic": traffic,
                              "matrix": {"tasks": matrix_tasks, "bytes": matrix},
                              "steps": steps, "slowest": slowest,
                              "advice": _steps.skew(entries, steps, slowest) + _steps.ps_hotspot(
                                  traffic, [e["task"] for e in entries if e["task"].startswith("ps:")])}
    if imbalance is not None:
        merged["ps_imbalance"] = imbalance
    return merged


def merge_files(paths: Union[Mapping[str, str], Sequence[str]],
                statuses: Optional[Mapping[str, Optional[int]]] = None,
                ended: Optional[Mapping[str, int]] = None) -> dict[str, Any]:
    """Reads and merges the traces at `paths`: task name -> path (as `tfplace launch --trace` passes), or a
    list of paths whose tasks come from each trace's "cluster" section or device names.

    `statuses` (task name -> exit status, None while unknown) overrides each trace's own; a task in it
    without a trace is listed with `"trace": None`, and where `ended` (task name -> the status its script
    ended with, as the task published it: `tfplace.cluster._checks.script_statuses`) has it, with
    `"script_exit_status"`: its process ended after its script, before its trace was written.

    Raises:
      MergeError: a file cannot be read or is not a trace, a list's trace names no cluster task, or two
        traces are of the same task (the message names the files).
    """
    named: dict[str, tuple[str, dict[str, Any]]] = {}
    for given, path in (list(paths.items()) if isinstance(paths, Mapping) else [(None, path) for path in paths]):
        trace = read_trace(path)
        found = (canonical_task(given, f"the task of {path}"),) if given is not None else trace_task(trace)
        if found is None:
            raise MergeError(f"tfplace merge: cannot tell which task {path} is: it has no \"cluster\" section and "
                             "no op on a cluster task's device (/job:NAME/replica:0/task:N/...); allowed are "
                             "traces taken in the tasks of a cluster (TF_CONFIG set), one per task")
        task = found[0]
        if task in named:
            raise MergeError(f"tfplace merge: {named[task][0]} and {path} are both traces of task {task}: allowed "
                             "is one trace per task")
        named[task] = (path, trace)
    merged = merge([(task, trace) for task, (_, trace) in named.items()])
    for entry in merged["tasks"]:
        entry["file"] = named[entry["task"]][0]
    known = {entry["task"]: entry for entry in merged["tasks"]}
    for given, status in (statuses or {}).items():
        task = canonical_task(given, "argument statuses")
        if task not in known:
            known[task] = {"task": task, "device_prefix": prefix_of(task), "exit_status": status, "trace": None}
        elif status is not None:  # the status the process ended with, not the one its trace wrote
            known[task]["exit_status"] = status
    for task, status in (ended or {}).items():
        if task in known and known[task]["trace"] is None:
            known[task]["script_exit_status"] = status
    merged["tasks"] = sorted(known.values(), key=lambda e: task_key(e["task"]))
    return merged
