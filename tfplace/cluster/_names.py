"""How a cluster's tasks and devices are named: a full device name's task prefix (`task_of`,
`device_task`), a task's short name and back (`task_name`, `prefix_of`), tasks in a readable order
(`task_key`), a record's device in full (`full_device`), the task a device is on (`owner`), and a tensor's
bytes from its static shape.

Example:
    >>> from tfplace.cluster import _names
    >>> _names.task_name("/job:worker/replica:0/task:1"), _names.task_name("/job:chief/replica:0/task:0")
    ('worker:1', 'chief')
    >>> _names.owner("/job:ps/replica:0/task:0/device:CPU:0"), _names.owner("/device:CPU:0")
    ('ps:0', '')
"""

from __future__ import annotations

import re
from typing import Optional

__all__ = ["task_of", "device_task", "task_name", "prefix_of", "task_key", "full_device", "owner", "tensor_bytes"]

_PREFIX = re.compile(r"^/job:([^/]+)/replica:(\d+)/task:(\d+)")
_JOBS = {"chief": 0, "master": 0, "worker": 1, "evaluator": 2, "ps": 3}


def task_of(device: str) -> str:
    """The device prefix of a full device name (`/job:ps/replica:0/task:1`), "" for a short one."""
    match = _PREFIX.match(device)
    return match[0] if match else ""


def device_task(device: str) -> str:
    """The task prefix of a full device name ("/job:worker/replica:0/task:1"); "" for a short name or
    `/job:localhost` (the process's own task)."""
    match = _PREFIX.match(device)
    return match.group(0) if match and match.group(1) != "localhost" else ""


def task_name(prefix: str) -> str:
    """"/job:worker/replica:0/task:1" -> "worker:1"; the chief's task 0 -> "chief"; "" for anything else."""
    match = _PREFIX.match(prefix)
    if not match:
        return ""
    return "chief" if match.group(1) == "chief" and match.group(3) == "0" else f"{match.group(1)}:{match.group(3)}"


def prefix_of(task: str) -> str:
    """"worker:1" -> "/job:worker/replica:0/task:1"; "chief" -> "/job:chief/replica:0/task:0"."""
    job, _, index = task.partition(":")
    return f"/job:{job}/replica:0/task:{index or 0}"


def task_key(task: str) -> tuple[int, str, int]:
    """Tasks in a readable order: the chief, workers, evaluators, ps tasks, the rest; by index."""
    job, _, index = task.partition(":")
    return (_JOBS.get(job, 4), job, int(index) if index.isdigit() else 0)


def full_device(device: str, own: str) -> str:
    """`device` named in full: a short name ("/device:CPU:0") or `/job:localhost/...` is on `own`'s task."""
    if device.startswith("/device:"):
        return own + device
    match = _PREFIX.match(device)
    if match and match.group(1) == "localhost":
        return own + device[match.end():]
    return device


def owner(device: str) -> str:
    """The short name of the task a full device name is on ("ps:0"); "" for a short name or the process's own."""
    return task_name(device_task(device)) if device_task(device) else ""


def tensor_bytes(dtype: str, shape: Optional[tuple]) -> Optional[int]:
    """Bytes of a tensor of `dtype` and `shape` (None when the shape is not fully known)."""
    if shape is None or any(d is None or d < 0 for d in shape):
        return None
    from tfplace._tensorflow import dtype_size  # (reading and merging traces needs no TensorFlow)

    per = dtype_size(dtype)
    count = 1
    for d in shape:
        count *= d
    return None if per is None else per * count
