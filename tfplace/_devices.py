"""Devices: d2l.ai's `cpu`/`gpu`/`try_gpu` helpers done right for TensorFlow and Keras 3.

A `Device` is a context manager that places ops like `tf.device`, prints as
TensorFlow's canonical name and compares equal to the same device written any
accepted way (`"GPU:1"`, `"/gpu:1"`, `"/device:GPU:1"`,
`"/job:localhost/replica:0/task:0/device:GPU:1"`).

Example:
    >>> import tensorflow as tf, tfplace
    >>> with tfplace.try_gpu():
    ...     x = tf.ones((2, 3))
    >>> tfplace.to_device(x, x.device) is x
    True
    >>> tfplace.cpu() == "/job:localhost/replica:0/task:0/device:CPU:0"
    True
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import threading
from typing import Any, Optional, Union

import numpy as np
import tensorflow as tf
from absl import logging

from tfplace import _tensorflow
from tfplace._errors import DeviceNotFoundError, DeviceSpecError
from tfplace.machine import _doctor

__all__ = [
    "Device", "parse_device", "cpu", "gpu", "num_gpus", "try_gpu", "try_all_gpus",
    "device", "resolve", "to_device", "devices_of", "canonical_name", "requested_name", "local_task",
]

ACCEPTED_FORMS = "'GPU:1', '/gpu:1', '/device:GPU:1' or '/job:localhost/replica:0/task:0/device:GPU:1'"
_SPEC = re.compile(
    r"(?:/job:(?P<job>\w+)(?:/replica:(?P<replica>\d+))?(?:/task:(?P<task>\d+))?(?=/))?"
    r"/?(?:device:)?(?!(?i:job|replica|task):)(?P<type>[A-Za-z][A-Za-z_]*):(?P<index>\d+)"
)
_LOCAL = ("localhost", 0, 0)


@dataclasses.dataclass(frozen=True, eq=False)
class Device:
    """One TensorFlow device; a context manager that places ops on it.

    Attributes:
      device_type: upper-case type, e.g. "GPU".
      index: the device's number within its type.
      job, replica, task: where the device lives; a local device has
        ("localhost", 0, 0), left out of its name.
    """

    device_type: str
    index: int
    job: str = "localhost"
    replica: int = 0
    task: int = 0
    _scopes: threading.local = dataclasses.field(default_factory=threading.local, repr=False, compare=False)

    @functools.cached_property
    def name(self) -> str:
        """TensorFlow's canonical name, e.g. `/device:GPU:1` (with the job when not local)."""
        local = f"/device:{self.device_type}:{self.index}"
        if (self.job, self.replica, self.task) == _LOCAL:
            return local
        return f"/job:{self.job}/replica:{self.replica}/task:{self.task}{local}"

    @property
    def full_name(self) -> str:
        """The name with its job, as placement logs print it."""
        return f"/job:{self.job}/replica:{self.replica}/task:{self.task}/device:{self.device_type}:{self.index}"

    def _key(self) -> tuple:
        return (self.device_type, self.index, self.job, self.replica, self.task)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Device({self.name!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = parse_device(other)
            except DeviceSpecError:
                return False
        if isinstance(other, Device):
            return self._key() == other._key()
        return NotImplemented

    def __hash__(self) -> int:  # equal to its canonical name: "/device:GPU:1" in {gpu(1)}
        return hash(self.name)

    def __enter__(self) -> "Device":
        scope = tf.device(self.name)
        scope.__enter__()
        try:
            self._scopes.stack.append(scope)
        except AttributeError:
            self._scopes.stack = [scope]
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._scopes.stack.pop().__exit__(*exc_info)


@functools.lru_cache(maxsize=1024)
def _parse(spec: str) -> Optional[Device]:
    match = _SPEC.fullmatch(spec.strip())
    if match is None:
        return None
    return Device(
        match["type"].upper(), int(match["index"]), match["job"] or "localhost",
        int(match["replica"] or 0), int(match["task"] or 0))


def parse_device(spec: Union[str, Device, Any], *, origin: str = "tfplace.parse_device's argument spec") -> Device:
    """Reads a device written any accepted way, without checking that it exists.

    Args:
      spec: a string such as "GPU:1", a `Device`, or an object with a `.name`
        (e.g. a `tf.config.LogicalDevice`).
      origin: where `spec` came from, for the error message.

    Raises:
      DeviceSpecError (a ValueError): the spec is not in an accepted form.
    """
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        spec = getattr(spec, "name", spec)
    if not isinstance(spec, str):
        raise DeviceSpecError(f"device spec {spec!r} of type {type(spec).__name__} (from {origin}) is not a device: "
                              f"accepted are a Device or a string such as {ACCEPTED_FORMS}")
    parsed = _parse(spec)
    if parsed is None:
        raise DeviceSpecError(
            f"device spec {spec!r} (from {origin}) is not a device: accepted forms are {ACCEPTED_FORMS} "
            "(a device type, a colon and an index >= 0)")
    return parsed


_canonical: dict[str, str] = {}
_task = [""]  # this process's task in a cluster, e.g. "/job:worker/replica:0/task:1"; "" in a single process


def _tf_config_task() -> str:
    """The task `TF_CONFIG` makes this process ("" when it names none)."""
    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
        kind, index = config["task"]["type"], int(config["task"]["index"])
        if not isinstance(kind, str) or kind not in config["cluster"]:
            return ""
    except (ValueError, TypeError, KeyError):
        return ""
    return f"/job:{kind}/replica:0/task:{index}"


def _read_task() -> str:
    """This process's task: the cluster its runtime joined, else the one its `TF_CONFIG` names."""
    joined = _tensorflow.cluster_task()
    return f"/job:{joined[0]}/replica:0/task:{joined[1]}" if joined else _tf_config_task()


def local_task() -> str:
    """The device prefix of this process's task in a cluster, e.g. `/job:worker/replica:0/task:1`
    (the cluster its runtime joined, else the task its `TF_CONFIG` names); "" in a single process.

    >>> import os
    >>> local_task() if "TF_CONFIG" not in os.environ else ""
    ''
    """
    task = _read_task()
    if task != _task[0]:
        _task[0] = task
        _canonical.clear()
    return task


def canonical_name(name: str, *, origin: str = "a device name") -> str:
    """The canonical name of a device written any accepted way (cached): `/device:CPU:0` in a single
    process; in a task of a cluster, the full name, the task's own devices under `/job:localhost`
    and under its job being one device (`/job:worker/replica:0/task:1/device:CPU:0`).

    Raises:
      DeviceSpecError: `name` is not a device written an accepted way; the message names `origin`.
    """
    found = _canonical.get(name)
    if found is None:
        device = parse_device(name, origin=origin)
        task = local_task()  # read again on each new name: the cluster forms while the program runs
        local = (device.job, device.replica, device.task) == _LOCAL
        found = _canonical[name] = (f"{task}/device:{device.device_type}:{device.index}" if task and local
                                    else device.name)
    return found


def requested_name(spec: Optional[str]) -> str:
    """The canonical name of a requested device ("" for none, or for a partial spec such as
    "/job:localhost" that names no device)."""
    if not spec:
        return ""
    try:
        return canonical_name(spec)
    except DeviceSpecError:
        return ""


def cpu() -> Device:
    """The host CPU, `/device:CPU:0`."""
    return Device("CPU", 0)


def gpu(i: int = 0) -> Device:
    """GPU `i`, `/device:GPU:<i>` (whether or not it exists; see `try_gpu`)."""
    return Device("GPU", i)


@functools.lru_cache(maxsize=8)
def _existing(names: tuple[str, ...], task: str = "") -> frozenset[Device]:
    """The devices named, a cluster task's own devices also under `/job:localhost` (what `tf.device` accepts)."""
    found = {parse_device(name) for name in names}
    return frozenset(found | {Device(d.device_type, d.index) for d in found
                              if task and d.full_name.startswith(task + "/")})


def _exists(dev: Device) -> bool:
    return dev in _existing(_tensorflow.logical_device_names(), local_task())


def num_gpus() -> int:
    """The number of GPUs TensorFlow will use, logical GPUs included (starts nothing)."""
    return sum(1 for d in _existing(_tensorflow.logical_device_names(), local_task()) if d.device_type == "GPU")


def try_gpu(i: int = 0) -> Device:
    """`gpu(i)` if it exists, else `cpu()` (with a `GpuUnusedWarning` when the driver reports GPUs that
    TensorFlow does not list)."""
    if _exists(gpu(i)):
        return gpu(i)
    _doctor.warn_if_unused(_tensorflow.gpu_count(), "tfplace.try_gpu()")
    return cpu()


def try_all_gpus() -> list[Device]:
    """Every GPU, in order, or `[cpu()]` when there is none (with a `GpuUnusedWarning` when the driver
    reports GPUs that TensorFlow does not list)."""
    found = [gpu(i) for i in range(num_gpus())]
    if not found:
        _doctor.warn_if_unused(_tensorflow.gpu_count(), "tfplace.try_all_gpus()")
    return found or [cpu()]


_warned: set[Device] = set()
_resolved: dict[str, Device] = {}  # specs of existing devices, once the runtime has started


def device(spec: Union[str, Device, Any], *, fallback: bool = True) -> Device:
    """Resolves `spec` against the devices of this process.

    >>> import tfplace
    >>> tfplace.device("/gpu:3").name   # on a machine without GPU 3
    '/device:CPU:0'

    Args:
      spec: the device, written any accepted way (see `parse_device`).
      fallback: when the device does not exist, return the CPU (logging why
        once per device) instead of raising.

    Returns:
      The `Device`. Remote devices (another job) are returned unchecked.

    Raises:
      DeviceSpecError (a ValueError): `spec` is malformed.
      DeviceNotFoundError: the device does not exist and `fallback` is False.
    """
    return resolve(spec, fallback=fallback)


def resolve(spec: Union[str, Device, Any], *, fallback: bool = True,
            origin: str = "tfplace.device's argument spec") -> Device:
    """`device(spec, fallback=...)` for tfplace's own functions: `origin` names where `spec` came
    from in error messages (callers name their own argument, e.g. "tfplace.to_device's argument device")."""
    if isinstance(spec, str) and spec in _resolved:
        return _resolved[spec]
    wanted = parse_device(spec, origin=origin)
    if (wanted.job, wanted.replica, wanted.task) != _LOCAL or _exists(wanted):
        if isinstance(spec, str) and _tensorflow.runtime_started():  # devices are fixed from now on
            _resolved[spec] = wanted
        return wanted
    existing = ", ".join(_tensorflow.logical_device_names())
    if not fallback:
        raise DeviceNotFoundError(
            f"device {spec!s} (from {origin}) does not exist: this process has {existing}")
    if wanted not in _warned:
        _warned.add(wanted)
        logging.warning("tfplace: device %s does not exist (this process has %s); using %s instead",
                        wanted.name, existing, cpu().name)
    return cpu()


def _device_string(value: Any) -> str:
    """The TensorFlow device string of a value ("" for values without one, NumPy arrays included:
    NumPy 2's `ndarray.device` is "cpu", not a TensorFlow device)."""
    if isinstance(value, (np.ndarray, np.generic)):
        return ""
    if hasattr(value, "device") and isinstance(value.device, str):
        return value.device
    inner = getattr(value, "value", None)  # Keras 3 Variable
    return getattr(inner, "device", "")


def to_device(value: Any, device: Union[str, Device, Any]) -> Any:
    """`value` on `device`: the very same object when already there, else a copy.

    >>> import tensorflow as tf, tfplace
    >>> z = tf.ones(3)
    >>> tfplace.to_device(z, "CPU:0") is z
    True

    Args:
      value: a tensor, variable, Keras variable, NumPy array or Python number, or
        a nested structure (list, tuple, dict) of them.
      device: the target device, written any accepted way; it must exist.

    Raises:
      DeviceSpecError: `device` is malformed.
      DeviceNotFoundError: `device` does not exist.
    """
    target = resolve(device, fallback=False, origin="tfplace.to_device's argument device")
    if isinstance(value, (tf.Tensor, tf.Variable)):
        return _one_to_device(value, target)
    return tf.nest.map_structure(lambda leaf: _one_to_device(leaf, target), value)


def _one_to_device(value: Any, target: Device) -> Any:
    where = _device_string(value)
    if where and parse_device(where) == target:
        return value
    with tf.device(target.name):
        if isinstance(value, (tf.Tensor, tf.Variable)) or where:
            return tf.identity(value)
        return tf.constant(value)


def devices_of(obj: Any) -> tuple[str, ...]:
    """Canonical names of the devices holding `obj`, in order of first appearance.

    Works on tensors, `tf.Variable`s, Keras 3 variables (which have no
    `.device`), mirrored variables (every replica), Keras models and layers
    (every weight) and nested structures of these.

    >>> import tensorflow as tf, tfplace
    >>> tfplace.devices_of(tf.Variable(1.0))
    ('/device:CPU:0',)
    """
    found: dict[str, None] = {}
    _collect(obj, found)
    return tuple(found)


def _collect(obj: Any, found: dict[str, None]) -> None:
    if isinstance(obj, tf.distribute.DistributedValues):
        for replica in obj.values:
            _collect(replica, found)
    elif hasattr(obj, "weights") and not isinstance(obj, (tf.Tensor, tf.Variable)):
        for weight in obj.weights:
            _collect(weight, found)
    elif isinstance(obj, (list, tuple, dict)):
        for item in (obj.values() if isinstance(obj, dict) else obj):
            _collect(item, found)
    elif type(obj).__module__.startswith("keras") and hasattr(obj, "value"):
        _collect(obj.value, found)
    else:
        where = _device_string(obj)
        if not where:
            raise TypeError(
                f"devices_of() received {type(obj).__name__}, which has no device: allowed are tensors, "
                "variables, Keras variables, mirrored variables, Keras models/layers and lists, tuples, dicts of them")
        found[parse_device(where).name] = None
