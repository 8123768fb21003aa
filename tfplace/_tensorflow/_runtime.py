"""Runtime state and configuration: `tf.config` read and applied, devices before and after the runtime starts. Part of `tfplace._tensorflow` (see its docstring)."""

from __future__ import annotations

import functools
from typing import Any, Mapping, Optional, Protocol

import tensorflow as tf
from tensorflow.python.eager import context as _context
from tensorflow.python.util import _pywrap_util_port


# Runtime state and configuration ----------------------------------------------------------------


def runtime_started() -> bool:
    """True once TensorFlow's eager context is initialized (devices are then fixed)."""
    return _context.context()._context_handle is not None  # pylint: disable=protected-access


def gpu_count() -> int:
    """How many physical GPUs TensorFlow sees (starts nothing)."""
    return len(tf.config.list_physical_devices("GPU"))


def physical_device_names() -> tuple[str, ...]:
    """Names of every physical device, e.g. `/physical_device:CPU:0` (starts nothing)."""
    return tuple(d.name for d in tf.config.list_physical_devices())


def physical_devices() -> list[dict[str, Any]]:
    """Each physical device: `name`, `type`, `visible`, and for a GPU TensorFlow's `details`
    (`device_name`, `compute_capability`). Starts nothing and allocates no GPU memory."""
    visible = {d.name for d in tf.config.get_visible_devices()}
    return [{"name": d.name, "type": d.device_type, "visible": d.name in visible,
             **({"details": tf.config.experimental.get_device_details(d)} if d.device_type == "GPU" else {})}
            for d in tf.config.list_physical_devices()]


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
        for _ in tf.config.get_logical_device_configuration(device) or [None]:
            index = counters.get(device.device_type, 0)
            counters[device.device_type] = index + 1
            names.append(f"/device:{device.device_type}:{index}")
    return tuple(names)


def fixed_state() -> dict[str, Any]:
    """The state fixed at runtime start, as it stands now.

    Returns:
      A dict with `visible_gpus` (indices of the visible physical GPUs),
      `memory_growth` (None without a visible GPU, else the value shared by the
      visible GPUs), `memory_limits` (per visible GPU, the MiB limit of each
      logical device), `logical_cpus` and `log_placement`.
    """
    gpus = tf.config.list_physical_devices("GPU")
    shown = {d.name for d in tf.config.get_visible_devices("GPU")}
    visible = tuple(i for i, d in enumerate(gpus) if d.name in shown)
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
        "log_placement": bool(_context.context().log_device_placement),
    }


def settings_in_force() -> dict[str, Any]:
    """The `configure()` settings TensorFlow can report, by setting name (memory caps it cannot)."""
    state = fixed_state()
    gpu_counts = {len(limits) for limits in state["memory_limits"] if limits}
    return {
        "soft_placement": bool(tf.config.get_soft_device_placement()),
        "device_policy": tf.config.experimental.get_device_policy(),
        **{name: state[name] for name in ("log_placement", "memory_growth", "visible_gpus", "logical_cpus")},
        **({"logical_gpus": gpu_counts.pop()} if len(gpu_counts) == 1 else {}),
    }


class GpuSettings(Protocol):
    """What `apply_fixed` reads of a GPU plan (`tfplace.config._gpu_plan.GpuPlan`)."""

    @property
    def visible(self) -> tuple[int, ...]: ...

    @property
    def memory_growth(self) -> Optional[bool]: ...

    @property
    def memory_limits(self) -> tuple[tuple[int, ...], ...]: ...


def apply_fixed(plan: Optional[GpuSettings], value: Mapping[str, Any], config: Any = tf.config) -> None:
    """Applies the settings fixed at runtime start; call only before it.

    Args:
      plan: the GPU plan, or None to leave the GPUs alone.
      value: the chosen settings by name; `logical_cpus` and `log_placement` are read
        (the GPU settings arrive through `plan`), an absent one is left as is.
      config: the `tf.config` module (replaceable to record the calls in tests).
    """
    if value.get("log_placement") is not None:
        tf.debugging.set_log_device_placement(value["log_placement"])
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
    if value.get("logical_cpus") is not None:
        cpu = config.list_physical_devices("CPU")[0]
        config.set_logical_device_configuration(
            cpu, [config.LogicalDeviceConfiguration() for _ in range(value["logical_cpus"])])


def apply_runtime(value: Mapping[str, Any]) -> None:
    """Applies the settings TensorFlow lets change at any time (`soft_placement`, `device_policy`);
    an absent one is left as is."""
    if value.get("soft_placement") is not None:
        tf.config.set_soft_device_placement(value["soft_placement"])
    if value.get("device_policy") is not None:
        tf.config.experimental.set_device_policy(value["device_policy"])


def build() -> dict[str, Any]:
    """TensorFlow's version and build: `tensorflow`, `is_cuda_build`, `cuda_version`, `cudnn_version`,
    and `onednn` (whether oneDNN is on, renaming kernels such as `_MklMatMul`)."""
    info = tf.sysconfig.get_build_info()
    return {"tensorflow": tf.__version__, "is_cuda_build": bool(info.get("is_cuda_build")),
            "cuda_version": info.get("cuda_version"), "cudnn_version": info.get("cudnn_version"),
            "onednn": bool(_pywrap_util_port.IsMklEnabled())}
