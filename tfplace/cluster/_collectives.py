"""What a task of a cluster adds to its trace: its name and devices, the collective groups it joined
(with bytes per call and calls), the variables it made on other tasks (`tfplace.cluster._variables`) and
its reads and writes of them.

`section(log, variables)` is the `"cluster"` entry of `tfplace trace --json` in a task (None in a
single process).

Example:
    >>> from tfplace.cluster import _collectives
    >>> from tfplace.placement.api._log import PlacementLog
    >>> _collectives.section(PlacementLog()) is None   # a single process
    True
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Optional

from tfplace import _tensorflow
from tfplace._devices import canonical_name, local_task
from tfplace.cluster import _checks, _variables
from tfplace.cluster._names import task_name, task_of
from tfplace.placement.api._log import PlacementLog

__all__ = ["section"]


def _remote_entries(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The reads and writes of variables on other tasks the publisher counted, per step (one call of the
    function that makes them): `count` and `bytes` per step, `steps` the calls."""
    return [{"from_device": r["from_device"], "to_device": r["to_device"], "what": r["what"], "count": 1,
             "bytes": r["bytes_per_call"], "per_step": True, "steps": r["count"], "function": r["function"]}
            for r in (state.get("remote") or {}).values()]


def _eager_entries(log: PlacementLog) -> list[dict[str, Any]]:
    """The collective ops the task ran eagerly (a strategy's first broadcast of initial values), by op,
    device and dtype: their groups are not kept (None)."""
    counted: Counter = Counter()
    sources: dict[tuple, str] = {}
    for r in log.records:
        if r.kind == "execute" and r.op in _tensorflow.COLLECTIVE_OPS:
            key = (r.op, r.device, dict(r.dtypes).get("T", ""))
            counted[key] += 1
            sources.setdefault(key, r.source)
    return [{"op": op, "group_key": None, "group_size": None, "instance_key": None, "dtype": dtype, "shape": None,
             "bytes_per_call": None, "calls": calls, "device": device, "hint": "", "function": "",
             "source": sources[(op, device, dtype)], "node": ""}
            for (op, device, dtype), calls in counted.items()]


def section(log: PlacementLog, variables: Optional[_variables.Variables] = None) -> Optional[dict[str, Any]]:
    """The trace's `"cluster"` entry in a task of a cluster (None in a single process): `task`,
    `device_prefix`, `devices` (the task's own), `collectives`, `variables` (made on other tasks; by
    default those the last `recording()` kept), `remote` (reads and writes of variables on other tasks
    per step, by the functions this task called)."""
    if variables is None:
        variables = _variables.last_recorded()
    prefix = local_task()
    if not prefix:
        return None
    state = _checks.last_state() or {}
    collectives = []
    for group in state.get("groups", ()):
        started = state["calls"].get(group["function"], (0, 0))[0]
        collectives.append({
            "op": group["op"], "group_key": group["group_key"], "group_size": group["group_size"],
            "instance_key": group["instance_key"], "dtype": group["dtype"], "shape": group["shape"],
            "bytes_per_call": group["bytes_per_call"], "calls": None if group["in_loop"] else started,
            "device": prefix + "/device:" + group["device_type"] + ":0" if group["device_type"] else "",
            "hint": group["hint"], "function": group["function"], "source": group["source"], "node": group["node"]})
    devices = sorted({canonical_name(name) for name in _tensorflow.logical_device_names()}
                     | {r.device for r in log.records if task_of(r.device) == prefix})
    return {"task": task_name(prefix), "device_prefix": prefix,
            "devices": [d for d in devices if task_of(d) == prefix],
            "collectives": collectives + _eager_entries(log),
            "variables": list(variables.made) if variables is not None else [],
            "remote": _remote_entries(state)}
