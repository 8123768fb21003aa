"""`tfplace diff A.json B.json`: what moved between two `tfplace trace --json` runs of a script.

Compute ops (origin "user", plumbing left out) are matched by op type, function node and user
line; a function's name loses its trailing number (`__inference_step_52` and `__inference_step_61`
are one function). The diff lists the compute ops whose devices changed, the transfers that
appeared, disappeared or changed bytes, the GPU readiness entries and explanations that appeared
or disappeared, when both runs were timed each device's share of busy time side by side, and, when both
counted memory (`tfplace trace --memory`), each device's peak side by side (a peak's change alone leaves the
status as it is; when one run alone counted memory, one line says which).
The exit status makes it a CI gate: 1 when a compute op moved or a transfer appeared, 0 when
nothing did, 2 for a file that cannot be read. Reading JSON only, it never imports TensorFlow.

In a cluster, `c.json:worker:0` names one task's trace in a merged cluster JSON (`tfplace merge
--json`), so two tasks diff as two traces (each task's own devices named short, `/device:CPU:0`: the
same work on each task's own CPU is no move; other tasks' devices whole); two merged cluster JSON files
diff task by task (matched by task name, with the bytes between each pair of tasks side by side); their
status is the worst task's, 1 when a task is in one cluster only.

This module reads the files (`read`); `tfplace.cli._diff_match` finds what changed (`diff`) and
`tfplace.cli._diff_text` writes it as text (`render`) and JSON (`to_json`).

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
from typing import Any

from tfplace.cli._diff_match import ClusterDiff, Diff, DiffError, Moved, Peak, diff
from tfplace.cli._diff_text import render, to_json

__all__ = ["Moved", "Peak", "Diff", "ClusterDiff", "DiffError", "read", "diff", "render", "to_json"]


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
