"""Runtime state and configuration: `tf.config` read and applied, devices before and after the runtime
starts. Part of `tfplace._tensorflow` (see its docstring)."""

from __future__ import annotations

import functools
import os
from typing import Any, Optional, Sequence

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


# Each `configure()` setting's application and read-back, named in its declaration
# (`tfplace.config._settings.Setting.apply`, `state`, `in_force`). `config` is the `tf.config` module,
# replaceable to record the calls in tests.

def set_log_placement(on: bool) -> None:
    """TensorFlow's own placement logging on or off (fixed at runtime start)."""
    tf.debugging.set_log_device_placement(on)


def set_logical_cpus(count: int, config: Any = tf.config) -> None:
    """Splits the host CPU into `count` logical devices (before runtime start)."""
    cpu = config.list_physical_devices("CPU")[0]
    config.set_logical_device_configuration(cpu, [config.LogicalDeviceConfiguration() for _ in range(count)])


_CPU_BFC = "TF_CPU_ALLOCATOR_USE_BFC"  # read when TensorFlow makes the CPU's allocator, at runtime start


def set_cpu_allocator(kind: str) -> None:
    """The CPU's allocator: "bfc" (TensorFlow's BFC allocator, whose every allocation the profiler reports) or
    "default" (oneDNN's or the plain one), through the variable TensorFlow reads at runtime start."""
    os.environ[_CPU_BFC] = "1" if kind == "bfc" else "0"


def cpu_allocator() -> str:
    """"bfc" when the variable asks for the BFC allocator (as TensorFlow reads it: "1" or "true"), else "default"."""
    return "bfc" if os.environ.get(_CPU_BFC, "").strip().lower() in ("1", "true") else "default"


def set_soft_placement(on: bool) -> None:
    tf.config.set_soft_device_placement(on)


def set_device_policy(policy: str) -> None:
    tf.config.experimental.set_device_policy(policy)


def apply_gpus(visible: Sequence[int], memory_growth: Optional[bool], memory_limits: Sequence[Sequence[int]],
               config: Any = tf.config) -> None:
    """Applies a GPU plan (`tfplace.config._gpu_plan.GpuPlan`'s fields) before runtime start: the visible
    GPUs, then per visible GPU its memory growth (None: left as is) and its logical devices' MiB limits
    (none: left as one device)."""
    gpus = config.list_physical_devices("GPU")
    if gpus:
        config.set_visible_devices([gpus[i] for i in visible], "GPU")
    for index, limits in zip(visible, memory_limits):
        if memory_growth is not None:
            config.experimental.set_memory_growth(gpus[index], memory_growth)
        if limits:
            config.set_logical_device_configuration(
                gpus[index], [config.LogicalDeviceConfiguration(memory_limit=m) for m in limits])


def cluster_task() -> Optional[tuple[str, int]]:
    """(job, task index) of this process in the cluster its runtime joined (MultiWorkerMirroredStrategy's
    collective ops, a ParameterServerStrategy coordinator's `connect_to_cluster`); None when it joined none."""
    ctx = _context.context()
    server_def = ctx._server_def or ctx._collective_ops_server_def  # pylint: disable=protected-access
    if server_def is None or not server_def.job_name:
        return None
    return server_def.job_name, int(server_def.task_index)


def log_placement() -> bool:
    return bool(_context.context().log_device_placement)


def logical_cpus() -> int:
    cpu = tf.config.list_physical_devices("CPU")[0]
    return len(tf.config.get_logical_device_configuration(cpu) or [None])


def soft_placement() -> bool:
    return bool(tf.config.get_soft_device_placement())


def device_policy() -> str:
    return tf.config.experimental.get_device_policy()


def _visible_gpu_devices() -> list[tuple[int, Any]]:
    gpus = tf.config.list_physical_devices("GPU")
    shown = {d.name for d in tf.config.get_visible_devices("GPU")}
    return [(i, d) for i, d in enumerate(gpus) if d.name in shown]


def visible_gpus() -> tuple[int, ...]:
    """Indices of the visible physical GPUs."""
    return tuple(i for i, _ in _visible_gpu_devices())


def memory_growth() -> Optional[bool]:
    """The memory growth the visible GPUs share (None without a visible GPU, or when they differ)."""
    growth = {bool(tf.config.experimental.get_memory_growth(d)) for _, d in _visible_gpu_devices()}
    return growth.pop() if len(growth) == 1 else None


def memory_limits() -> tuple[tuple[int, ...], ...]:
    """Per visible GPU, the MiB limit of each of its logical devices (none: one unconfigured device)."""
    return tuple(tuple(int(c.memory_limit or 0) for c in tf.config.get_logical_device_configuration(d) or ())
                 for _, d in _visible_gpu_devices())


def logical_gpus() -> Optional[int]:
    """The number of logical devices each visible GPU is split into, when they all are alike (else None)."""
    counts = {len(limits) for limits in memory_limits() if limits}
    return counts.pop() if len(counts) == 1 else None


def build() -> dict[str, Any]:
    """TensorFlow's version and build: `tensorflow`, `is_cuda_build`, `cuda_version`, `cudnn_version`,
    and `onednn` (whether oneDNN is on, renaming kernels such as `_MklMatMul`)."""
    info = tf.sysconfig.get_build_info()
    return {"tensorflow": tf.__version__, "is_cuda_build": bool(info.get("is_cuda_build")),
            "cuda_version": info.get("cuda_version"), "cudnn_version": info.get("cudnn_version"),
            "onednn": bool(_pywrap_util_port.IsMklEnabled())}
