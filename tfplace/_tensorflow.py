"""The thin layer that reads and writes TensorFlow's device state.

Everything that decides *what* to apply lives in pure modules
(`tfplace.config._settings`, `tfplace.config._gpu_plan`); this module only talks to
`tf.config`. Nothing here starts the runtime: before it starts, the logical
devices are predicted from the pending configuration.

Example:
    >>> from tfplace import _tensorflow
    >>> _tensorflow.logical_device_names()[0]
    '/device:CPU:0'
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import tensorflow as tf
from tensorflow.python.eager import context

from tfplace.config._gpu_plan import GpuPlan

__all__ = [
    "runtime_started",
    "physical_device_names",
    "logical_device_names",
    "visible_gpu_indices",
    "fixed_state",
    "apply_fixed",
    "apply_runtime",
    "runtime_settings",
]


def runtime_started() -> bool:
    """True once TensorFlow's eager context is initialized (devices are then fixed)."""
    return context.context()._context_handle is not None  # pylint: disable=protected-access


def physical_device_names() -> tuple[str, ...]:
    """Names of every physical device, e.g. `/physical_device:CPU:0` (starts nothing)."""
    return tuple(d.name for d in tf.config.list_physical_devices())


@functools.lru_cache(maxsize=1)
def _started_logical_names() -> tuple[str, ...]:
    return tuple(d.name for d in tf.config.list_logical_devices())


def logical_device_names() -> tuple[str, ...]:
    """Names of the logical devices, e.g. `/device:CPU:1`.

    Read from the runtime once it has started (and cached: it cannot change);
    before that, predicted from the visible physical devices and their pending
    logical configurations, without starting the runtime.
    """
    if runtime_started():
        return _started_logical_names()
    names: list[str] = []
    counters: dict[str, int] = {}
    for device in tf.config.get_visible_devices():
        count = len(tf.config.get_logical_device_configuration(device) or [None])
        for _ in range(count):
            index = counters.get(device.device_type, 0)
            counters[device.device_type] = index + 1
            names.append(f"/device:{device.device_type}:{index}")
    return tuple(names)


def visible_gpu_indices() -> tuple[int, ...]:
    """Indices of the physical GPUs that are visible."""
    gpus = tf.config.list_physical_devices("GPU")
    visible = {d.name for d in tf.config.get_visible_devices("GPU")}
    return tuple(i for i, d in enumerate(gpus) if d.name in visible)


def fixed_state() -> dict[str, Any]:
    """The settings fixed at runtime start, as they stand now.

    Returns:
      A dict with `visible_gpus` (indices), `memory_growth` (None without a
      visible GPU, else the value shared by the visible GPUs), `memory_limits`
      (per visible GPU, the MiB limit of each logical device) and
      `logical_cpus` and `log_placement`.
    """
    gpus = tf.config.list_physical_devices("GPU")
    visible = visible_gpu_indices()
    growth = {bool(tf.config.experimental.get_memory_growth(gpus[i])) for i in visible}
    limits = tuple(
        tuple(int(c.memory_limit or 0) for c in tf.config.get_logical_device_configuration(gpus[i]) or ())
        for i in visible
    )
    cpu = tf.config.list_physical_devices("CPU")[0]
    return {
        "visible_gpus": visible,
        "memory_growth": growth.pop() if len(growth) == 1 else None,
        "memory_limits": limits,
        "logical_cpus": len(tf.config.get_logical_device_configuration(cpu) or [None]),
        "log_placement": bool(context.context().log_device_placement),
    }


def apply_fixed(plan: Optional[GpuPlan], logical_cpus: Optional[int], config: Any = tf.config, *,
                log_placement: Optional[bool] = None) -> None:
    """Applies a GPU plan, a logical CPU count and placement logging; call only before runtime start.

    Args:
      plan: the GPU plan, or None to leave the GPUs alone.
      logical_cpus: the number of logical CPUs, or None to leave it.
      log_placement: TensorFlow's own placement logging on or off, or None to leave it.
      config: the `tf.config` module (replaceable to record the calls in tests).
    """
    if log_placement is not None:
        tf.debugging.set_log_device_placement(log_placement)
    if plan is not None:
        gpus = config.list_physical_devices("GPU")
        if gpus:
            config.set_visible_devices([gpus[i] for i in plan.visible], "GPU")
        for index, limits in zip(plan.visible, plan.memory_limits):
            if plan.memory_growth is not None:
                config.experimental.set_memory_growth(gpus[index], plan.memory_growth)
            if limits:
                config.set_logical_device_configuration(
                    gpus[index], [config.LogicalDeviceConfiguration(memory_limit=m) for m in limits])
    if logical_cpus is not None:
        cpu = config.list_physical_devices("CPU")[0]
        config.set_logical_device_configuration(
            cpu, [config.LogicalDeviceConfiguration() for _ in range(logical_cpus)])


def apply_runtime(soft_placement: Optional[bool], device_policy: Optional[str]) -> None:
    """Applies the settings TensorFlow lets change at any time; None leaves one as is."""
    if soft_placement is not None:
        tf.config.set_soft_device_placement(soft_placement)
    if device_policy is not None:
        tf.config.experimental.set_device_policy(device_policy)


def runtime_settings() -> dict[str, Any]:
    """The current soft placement and device policy."""
    return {
        "soft_placement": bool(tf.config.get_soft_device_placement()),
        "device_policy": tf.config.experimental.get_device_policy(),
    }
