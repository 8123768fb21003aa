"""What a task of a cluster adds to its trace: its name and devices, the collective groups it joined
(with bytes per call and calls) and the variables it made on other tasks (a ParameterServerStrategy
coordinator's, on their ps tasks).

`section(log, variables)` is the `"cluster"` entry of `tfplace trace --json` in a task (None in a
single process); `Variables` is the variable creator `tfplace trace` runs the script under.

Example:
    >>> from tfplace.cluster import _collectives
    >>> _collectives.task_name("/job:worker/replica:0/task:1"), _collectives.task_name("/job:chief/replica:0/task:0")
    ('worker:1', 'chief')
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from typing import Any, Iterator, Optional

from tfplace import _tensorflow
from tfplace._devices import canonical_name, local_task
from tfplace.placement.api._log import PlacementLog

__all__ = ["task_name", "task_of", "Variables", "recording", "section", "tensor_bytes", "variable_name"]

_TASK = re.compile(r"^/job:([^/]+)/replica:\d+/task:(\d+)")


def task_of(device: str) -> str:
    """The device prefix of a full device name (`/job:ps/replica:0/task:1`), "" for a short one."""
    match = _TASK.match(device)
    return match[0] if match else ""


def task_name(prefix: str) -> str:
    """`worker:1` for `/job:worker/replica:0/task:1`; `chief` for the chief; "" for ""."""
    match = _TASK.match(prefix)
    if not match:
        return ""
    return "chief" if match[1] == "chief" and match[2] == "0" else f"{match[1]}:{match[2]}"


def tensor_bytes(dtype: str, shape: Optional[tuple]) -> Optional[int]:
    """Bytes of a tensor of `dtype` and `shape` (None when the shape is not fully known)."""
    if shape is None or any(d is None or d < 0 for d in shape):
        return None
    per = _tensorflow.dtype_size(dtype)
    count = 1
    for d in shape:
        count *= d
    return None if per is None else per * count


class Variables:
    """A variable creator (`tf.variable_creator_scope`) that keeps the variables made on another task:
    name, shape, dtype, bytes and device (a ParameterServerStrategy's variables and shards on ps tasks)."""

    def __init__(self) -> None:
        self.made: list[dict[str, Any]] = []
        self.handles: dict[int, tuple[Any, str]] = {}  # id of a variable's handle -> (the handle, its name)

    def creator(self, next_creator: Any, **kwargs: Any) -> Any:
        variable = next_creator(**kwargs)
        if getattr(variable, "values", None) is None:  # a distributed variable's components come through here
            device = canonical_name(variable.device) if variable.device else ""
            if task_of(device) and task_of(device) != local_task():
                shape = tuple(variable.shape.as_list()) if variable.shape.is_fully_defined() else None
                dtype = variable.dtype.name
                self.made.append({"name": variable.name, "shape": None if shape is None else list(shape),
                                  "dtype": dtype, "bytes": tensor_bytes(dtype, shape), "device": device})
                handle = getattr(variable, "handle", None)
                if handle is not None:
                    self.handles[id(handle)] = (handle, variable.name)
        return variable


_recorded: list[Variables] = []  # the variables `tfplace trace` recorded in this process (the last run's)


@contextlib.contextmanager
def recording() -> Iterator[Variables]:
    """Records the variables the block makes on other tasks (`section()` lists them afterwards)."""
    variables = Variables()
    _recorded[:] = [variables]
    with _tensorflow.variable_creator_scope(variables.creator):
        yield variables


def variable_name(handle: Any) -> str:
    """The name of the variable whose handle this is, among those `recording()` kept ("" when unknown)."""
    known = _recorded[0].handles.get(id(handle)) if _recorded else None
    return known[1] if known is not None and known[0] is handle else ""


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


def section(log: PlacementLog, variables: Optional[Variables] = None) -> Optional[dict[str, Any]]:
    """The trace's `"cluster"` entry in a task of a cluster (None in a single process): `task`,
    `device_prefix`, `devices` (the task's own), `collectives`, `variables` (made on other tasks; by
    default those the last `recording()` kept), `remote` (reads and writes of variables on other tasks
    per step, by the functions this task called)."""
    if variables is None and _recorded:
        variables = _recorded[0]
    prefix = local_task()
    if not prefix:
        return None
    from tfplace.cluster import _checks

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
