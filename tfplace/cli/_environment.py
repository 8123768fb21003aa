"""What `tfplace devices` and `tfplace env` report: the devices a program would see, with their
memory, and the versions, build and environment variables that change placement. Both import
TensorFlow, and neither starts its runtime nor allocates GPU memory.

Example:
    >>> from tfplace.cli import _environment
    >>> "TF_CPP_MIN_LOG_LEVEL" in _environment.PLACEMENT_VARIABLES
    True
"""

from __future__ import annotations

import platform
from typing import Any

from tfplace.config._settings import SETTINGS

__all__ = ["PLACEMENT_VARIABLES", "devices", "environment", "devices_text", "environment_text"]

# Every environment variable that changes where ops run or what placement logs say.
PLACEMENT_VARIABLES = tuple(dict.fromkeys((
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR",
    "TF_CONFIG", "TF_ENABLE_ONEDNN_OPTS", "TF_XLA_FLAGS", "TF_CPP_MIN_LOG_LEVEL",
    *(variable for setting in SETTINGS for variable in setting.environment))))


def devices(settings: dict[str, Any]) -> dict[str, Any]:
    """`tfplace devices`: the physical devices (GPUs with their model and memory) and the logical ones,
    after `configure(**settings)`."""
    import tfplace
    from tfplace import _tensorflow
    from tfplace.machine import _doctor, _gpus

    config = tfplace.configure(**settings)
    gpus = _gpus.read_gpus(_tensorflow.gpu_count())
    physical: list[dict[str, Any]] = []
    for row in _tensorflow.physical_devices():
        details = row.pop("details", None)
        if details is not None:  # a GPU: TensorFlow numbers them in this order
            info = next((g for g in gpus if g.index == sum(r["type"] == "GPU" for r in physical)), None)
            row.update(model=getattr(info, "name", details.get("device_name")),
                       memory_total_mib=getattr(info, "total_mib", None),
                       memory_used_mib=getattr(info, "used_mib", None),
                       compute_capability=details.get("compute_capability"))
        physical.append(row)
    return {"gpus_verdict": _doctor.verdict_line(len(gpus)), "physical": physical,
            "logical": list(config.logical_devices), "runtime_started": config.runtime_started}


def environment(environ: dict[str, str]) -> dict[str, Any]:
    """`tfplace env`: versions, build, oneDNN, GPUs and every environment variable that changes placement."""
    import tfplace
    from tfplace import _tensorflow
    from tfplace.config._settings import resolve
    from tfplace.machine import _doctor, _gpus

    try:
        import keras
        keras_version = keras.__version__
    except ImportError:
        keras_version = None
    variables = {name: environ.get(name) for name in PLACEMENT_VARIABLES}
    build = _tensorflow.build()
    onednn = build.pop("onednn")
    warnings = []
    if environ.get("TF_CPP_MIN_LOG_LEVEL", "0") not in ("", "0"):
        warnings.append("TF_CPP_MIN_LOG_LEVEL >= 1 hides TensorFlow's own eager 'Executing op' lines "
                        "(--log_placement); capture_placement() does not depend on them")
    if "CUDA_VISIBLE_DEVICES" in environ and "TFPLACE_VISIBLE_GPUS" in environ:
        warnings.append("TFPLACE_VISIBLE_GPUS indexes the GPUs left by CUDA_VISIBLE_DEVICES, "
                        "not nvidia-smi's numbering")
    try:
        resolve({}, {}, environ)  # what configure() would say about the environment's settings
    except tfplace.ConfigurationError as err:
        warnings.append(str(err))
    gpus = _gpus.read_gpus(_tensorflow.gpu_count())
    return {
        "gpus_verdict": _doctor.verdict_line(len(gpus)),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "tensorflow": build.pop("tensorflow"),
        "keras": keras_version,
        "tfplace": tfplace.__version__,
        **build,
        "nvidia_driver": _gpus.driver_version(),
        "onednn": onednn,
        "onednn_note": ("oneDNN is on: TensorFlow's own log names some kernels by their oneDNN variant "
                        "(_MklMatMul for MatMul); tfplace records and PlacementLog.from_text give op types"
                        if onednn else "oneDNN is off: TensorFlow's log names kernels by their op types"),
        "gpus": [{"index": g.index, "name": g.name, "memory_total_mib": g.total_mib, "memory_used_mib": g.used_mib}
                 for g in gpus],
        "environment": variables,
        "warnings": warnings,
    }


def devices_text(report: dict[str, Any]) -> str:
    """`devices()`'s report as the command prints it."""
    lines = [report["gpus_verdict"], f"{'physical device':<28} {'type':<5} {'visible':<8} details"]
    for row in report["physical"]:
        extra = ", ".join(f"{k}={row[k]}"
                          for k in ("model", "memory_total_mib", "memory_used_mib", "compute_capability") if k in row)
        lines.append(f"{row['name']:<28} {row['type']:<5} {'yes' if row['visible'] else 'no':<8} {extra}")
    lines.append("logical devices: " + ", ".join(report["logical"]))
    return "\n".join(lines)


def environment_text(report: dict[str, Any]) -> str:
    """`environment()`'s report as the command prints it: a block to paste into a bug report."""
    lines = [report["gpus_verdict"]]
    lines += [f"{key:<15} {value}" for key, value in report.items()
              if key not in ("gpus_verdict", "environment", "gpus", "warnings")]
    lines += [f"gpu {gpu['index']:<11} {gpu['name']} ({gpu['memory_total_mib']} MiB)" for gpu in report["gpus"]]
    lines.append("environment (variables that change placement):")
    lines += [f"  {name:<27} {'(unset)' if value is None else value}" for name, value in report["environment"].items()]
    lines += [f"warning: {warning}" for warning in report["warnings"]]
    return "\n".join(lines)
