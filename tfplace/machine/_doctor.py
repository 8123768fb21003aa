"""`tfplace.doctor()`, and the verdict where users already are: `configure()`, `try_gpu()`,
`try_all_gpus()` and `strategy()` warn once (`GpuUnusedWarning`) when the driver reports more GPUs than
TensorFlow lists; `tfplace env`, `tfplace devices` and the `requires_gpu` marker print the verdict line.
Where nothing is wrong this costs one NVML count (`_gpus.driver_gpu_count`).

Example (facts saved on a machine whose driver reports one GPU and that has no TensorFlow):
    >>> import tfplace
    >>> facts = {"format": "tfplace-machine/1", "python": "3.12.3", "tensorflow": None, "libraries": {},
    ...          "platform": {"system": "Linux", "release": "6.8", "machine": "x86_64", "wsl": False},
    ...          "driver": {"version": "580.159.04", "cuda": "13.0"}, "environment": {},
    ...          "gpus": [{"index": 0, "name": "NVIDIA H200", "memory_mib": 143771, "uuid": "GPU-55",
    ...                    "compute_capability": "9.0"}]}
    >>> diagnosis = tfplace.doctor(facts=facts)
    >>> diagnosis.ok, diagnosis.fixes
    (False, ["pip install 'tensorflow[and-cuda]'"])
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import warnings
from typing import Any, Mapping, Optional, Union

from tfplace._errors import GpuUnusedWarning
from tfplace.machine import _facts, _gpus, _view
from tfplace.machine._diagnosis import Diagnosis, HiddenGpus
from tfplace.machine._records import MachineFacts, View
from tfplace.machine._verdict import diagnose

__all__ = ["doctor", "warn_if_unused", "verdict_line", "unused_reason"]

_warned = False


def doctor(*, facts: Union[None, str, os.PathLike[str], Mapping[str, Any], MachineFacts] = None,
           run: bool = False) -> Diagnosis:
    """Why TensorFlow does or does not use this machine's GPUs (or those of `facts`: a path, a dict in the
    `tfplace-machine/1` format, saved by `tfplace doctor --save` elsewhere, or `MachineFacts`). `run=True` also
    runs a `MatMul` on each GPU TensorFlow lists (in a child process) and reports where it ran and how long its
    first call took."""
    if facts is not None:
        if run:
            raise _facts.FactsError("doctor(facts=..., run=True): run=True runs TensorFlow on this machine, and "
                                    "facts describe another; give one of them")
        return diagnose(_facts.load(facts))
    child = _view.start(run) if importlib.util.find_spec("tensorflow") is not None else None
    read = _facts.read()
    return diagnose(dataclasses.replace(read, tensorflow_view=_view.finish(child) if child is not None else None))


def _in_process(tensorflow_gpus: int) -> Diagnosis:
    """The diagnosis with TensorFlow's view taken from this process (TensorFlow already imported here)."""
    view = View(tuple(f"/physical_device:GPU:{i}" for i in range(tensorflow_gpus)))
    return diagnose(dataclasses.replace(_facts.read(), tensorflow_view=view))


def unused_reason(tensorflow_gpus: int) -> Optional[str]:
    """The verdict line when the driver reports more GPUs than the `tensorflow_gpus` TensorFlow lists, unless
    `CUDA_VISIBLE_DEVICES` chose them (a non-empty value and nothing else wrong); else None."""
    count = _gpus.driver_gpu_count()
    if not count or count <= tensorflow_gpus:
        return None
    diagnosis = _in_process(tensorflow_gpus)
    errors = [f for f in diagnosis.findings if f.severity == "error"]
    chosen = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not errors or (chosen and all(isinstance(f, HiddenGpus) for f in errors)):
        return None
    return diagnosis.summary


def warn_if_unused(tensorflow_gpus: int, where: str, stacklevel: int = 3) -> None:
    """One `GpuUnusedWarning` per process when the driver reports GPUs TensorFlow does not list (`where`: the
    function that noticed)."""
    global _warned
    if _warned:
        return
    reason = unused_reason(tensorflow_gpus)
    if reason is None:
        return
    _warned = True
    warnings.warn(GpuUnusedWarning(f"{where}: {reason}; run `tfplace doctor` for the fix"), stacklevel=stacklevel)


def verdict_line(tensorflow_gpus: int) -> str:
    """The verdict's line for `tfplace env` and `tfplace devices` (TensorFlow imported here lists
    `tensorflow_gpus`)."""
    count = _gpus.driver_gpu_count()
    if count is None:
        return (f"GPUs: TensorFlow lists {tensorflow_gpus}; no NVIDIA driver answers (NVML)" if tensorflow_gpus
                else "GPUs: 0 reported by the driver (no NVIDIA driver), 0 used by TensorFlow: it runs on the CPU")
    if count <= tensorflow_gpus:
        return f"GPUs: {count} reported by the driver, {tensorflow_gpus} used by TensorFlow"
    return _in_process(tensorflow_gpus).summary + " (run `tfplace doctor` for the fix)"
