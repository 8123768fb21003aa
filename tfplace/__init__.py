"""tfplace: set, see and test TensorFlow device placement.

Example:
    >>> import tensorflow as tf, tfplace
    >>> config = tfplace.configure(soft_placement=True)
    >>> with tfplace.capture_placement() as log:
    ...     y = tf.matmul(tf.ones((2, 3)), tf.ones((3, 2)))
    >>> log.assert_placed("MatMul", "CPU:0")

Importing `tfplace` does not import TensorFlow: each name below loads its
module on first use, so that the pytest plugin and `tfplace --help` cost nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tfplace._errors import (
    ConfigurationError,
    DeviceNotFoundError,
    DeviceSpecError,
    Error,
    GpuUnusedWarning,
    ImplicitCopyError,
    PlacementError,
    RuntimeInitializedError,
)

if TYPE_CHECKING:
    from tfplace._devices import (Device, cpu, device, devices_of, gpu, num_gpus, parse_device, to_device,
                                  try_all_gpus, try_gpu)
    from tfplace._replication import reduce_on, replicate, split_batch, strategy
    from tfplace.cluster._guard import cluster_guard
    from tfplace.config._configure import Config, configure
    from tfplace.config._gpu_plan import GpuPlan, plan_gpus
    from tfplace.machine._diagnosis import Diagnosis, Finding
    from tfplace.machine._doctor import doctor
    from tfplace.machine._gpus import GpuInfo
    from tfplace.placement.api._capture import capture_placement
    from tfplace.placement.api._kept import Profile, read_profile
    from tfplace.placement.shown._explain import Explanation, Readiness
    from tfplace.placement.steps._model import Advice, InputStage, Step, Steps
    from tfplace.placement.api._guards import device_guard, transfer_guard
    from tfplace.placement.api._log import PlacementLog
    from tfplace.placement.records._memory_figures import (AllocatorPeak, DeviceMemory, Growth, Held, Memory,
                                                           OutOfMemory)
    from tfplace.placement.taking._live import LiveTensor, live_tensors
    from tfplace.placement.records._records import CopyRecord, PlacementRecord

__version__ = "0.1.0"

# Each public name loaded on first use, and the module that defines it.
_LAZY = {
    **dict.fromkeys(("capture_placement",), "tfplace.placement.api._capture"),
    **dict.fromkeys(("Config", "configure"), "tfplace.config._configure"),
    **dict.fromkeys(("GpuPlan", "plan_gpus"), "tfplace.config._gpu_plan"),
    **dict.fromkeys(("GpuInfo",), "tfplace.machine._gpus"),
    **dict.fromkeys(("doctor",), "tfplace.machine._doctor"),
    **dict.fromkeys(("Diagnosis", "Finding"), "tfplace.machine._diagnosis"),
    **dict.fromkeys(("Device", "cpu", "gpu", "num_gpus", "try_gpu", "try_all_gpus", "device", "parse_device",
                     "to_device", "devices_of"), "tfplace._devices"),
    **dict.fromkeys(("transfer_guard", "device_guard"), "tfplace.placement.api._guards"),
    **dict.fromkeys(("Explanation", "Readiness"), "tfplace.placement.shown._explain"),
    **dict.fromkeys(("Steps", "Step", "InputStage", "Advice"), "tfplace.placement.steps._model"),
    **dict.fromkeys(("PlacementLog",), "tfplace.placement.api._log"),
    **dict.fromkeys(("Memory", "DeviceMemory", "AllocatorPeak", "Held", "Growth", "OutOfMemory"),
                   "tfplace.placement.records._memory_figures"),
    **dict.fromkeys(("Profile", "read_profile"), "tfplace.placement.api._kept"),
    **dict.fromkeys(("LiveTensor", "live_tensors"), "tfplace.placement.taking._live"),
    **dict.fromkeys(("PlacementRecord", "CopyRecord"), "tfplace.placement.records._records"),
    **dict.fromkeys(("split_batch", "replicate", "reduce_on", "strategy"), "tfplace._replication"),
    **dict.fromkeys(("cluster_guard",), "tfplace.cluster._guard"),
}

__all__ = [
    "Config",
    "configure",
    "GpuInfo",
    "GpuPlan",
    "plan_gpus",
    "Device",
    "cpu",
    "gpu",
    "num_gpus",
    "try_gpu",
    "try_all_gpus",
    "device",
    "parse_device",
    "to_device",
    "devices_of",
    "capture_placement",
    "PlacementLog",
    "PlacementRecord",
    "CopyRecord",
    "Explanation",
    "Steps",
    "Step",
    "InputStage",
    "Advice",
    "Readiness",
    "Memory",
    "DeviceMemory",
    "AllocatorPeak",
    "Held",
    "Growth",
    "OutOfMemory",
    "Profile",
    "read_profile",
    "LiveTensor",
    "live_tensors",
    "transfer_guard",
    "device_guard",
    "split_batch",
    "replicate",
    "reduce_on",
    "strategy",
    "cluster_guard",
    "doctor",
    "Diagnosis",
    "Finding",
    "Error",
    "ConfigurationError",
    "RuntimeInitializedError",
    "DeviceNotFoundError",
    "DeviceSpecError",
    "ImplicitCopyError",
    "PlacementError",
    "GpuUnusedWarning",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """Loads a public name's module on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module 'tfplace' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext tfplace` in IPython or Jupyter: registers the `%%placement` cell magic and `%tfplace_doctor`
    (`tfplace.integrations._notebook`)."""
    from tfplace.integrations import _notebook

    _notebook.load_ipython_extension(ipython)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

