"""The `tfplace` command line: `tfplace devices`, `tfplace env` and `tfplace trace`.

Neither command starts TensorFlow's runtime or allocates GPU memory: devices
are listed from the physical inventory and the pending configuration.

    tfplace devices --logical_cpus=4     # the devices a program would see
    tfplace env --json                   # versions, build and placement env vars
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from typing import Any, Optional, Sequence

from tfplace import settings

__all__ = ["main"]

# Every environment variable that changes where ops run or what placement logs say.
PLACEMENT_VARIABLES = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR",
    "TF_CONFIG", "TF_ENABLE_ONEDNN_OPTS", "TF_XLA_FLAGS", "TF_CPP_MIN_LOG_LEVEL",
) + tuple(variable for name in settings.NAMES for variable in settings.ENVIRONMENT[name]
          if variable not in ("TF_FORCE_GPU_ALLOW_GROWTH",))


def _devices(args: argparse.Namespace) -> dict[str, Any]:
    import tensorflow as tf
    import tfplace
    from tfplace import gpu_inventory, tfstate

    preview = {name: getattr(args, name) for name in ("logical_cpus", "logical_gpus", "visible_gpus")}
    config = tfplace.configure(**{k: v for k, v in preview.items() if v is not None})
    gpus = {g.index: g for g in gpu_inventory.read_gpus(len(tf.config.list_physical_devices("GPU")))}
    visible = {d.name for d in tf.config.get_visible_devices()}
    physical = []
    for dev in tf.config.list_physical_devices():
        row = {"name": dev.name, "type": dev.device_type, "visible": dev.name in visible}
        if dev.device_type == "GPU":
            info = gpus.get(int(dev.name.rsplit(":", 1)[1]))
            details = tf.config.experimental.get_device_details(dev)
            row.update(model=getattr(info, "name", details.get("device_name")),
                       memory_total_mib=getattr(info, "total_mib", None),
                       memory_used_mib=getattr(info, "used_mib", None),
                       compute_capability=details.get("compute_capability"))
        physical.append(row)
    return {"physical": physical, "logical": list(config.logical_devices), "runtime_started": tfstate.runtime_started()}


def _env(_: argparse.Namespace) -> dict[str, Any]:
    import tensorflow as tf
    import tfplace
    from tfplace import gpu_inventory

    build = tf.sysconfig.get_build_info()
    try:
        import keras
        keras_version = keras.__version__
    except ImportError:
        keras_version = None
    from tensorflow.python.util import _pywrap_util_port

    variables = {name: os.environ.get(name) for name in PLACEMENT_VARIABLES}
    onednn = bool(_pywrap_util_port.IsMklEnabled())
    warnings = []
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") not in ("", "0"):
        warnings.append("TF_CPP_MIN_LOG_LEVEL >= 1 hides TensorFlow's own eager 'Executing op' lines "
                        "(--log_placement); capture_placement() does not depend on them")
    if os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH") == "true" and any(
            f"TFPLACE_{n.upper()}" in os.environ for n in ("memory_fraction", "memory_limit_mb", "logical_gpus")):
        warnings.append("TF_FORCE_GPU_ALLOW_GROWTH=true cannot be combined with a memory cap or logical GPUs")
    if "CUDA_VISIBLE_DEVICES" in os.environ and "TFPLACE_VISIBLE_GPUS" in os.environ:
        warnings.append("TFPLACE_VISIBLE_GPUS indexes the GPUs left by CUDA_VISIBLE_DEVICES, "
                        "not nvidia-smi's numbering")
    try:
        settings.resolve({}, {}, os.environ)
    except tfplace.ConfigurationError as err:
        warnings.append(str(err))
    gpus = gpu_inventory.read_gpus(len(tf.config.list_physical_devices("GPU")))
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "tensorflow": tf.__version__,
        "keras": keras_version,
        "tfplace": tfplace.__version__,
        "is_cuda_build": bool(build.get("is_cuda_build")),
        "cuda_version": build.get("cuda_version"),
        "cudnn_version": build.get("cudnn_version"),
        "nvidia_driver": gpu_inventory.driver_version(),
        "onednn": onednn,
        "onednn_note": ("oneDNN is on: TensorFlow's own log names some kernels by their oneDNN variant "
                        "(_MklMatMul for MatMul); tfplace records and PlacementLog.from_text give op types"
                        if onednn else "oneDNN is off: TensorFlow's log names kernels by their op types"),
        "gpus": [{"index": g.index, "name": g.name, "memory_total_mib": g.total_mib, "memory_used_mib": g.used_mib}
                 for g in gpus],
        "environment": variables,
        "warnings": warnings,
    }


def _print_devices(report: dict[str, Any]) -> None:
    print(f"{'physical device':<28} {'type':<5} {'visible':<8} details")
    for row in report["physical"]:
        extra = ", ".join(f"{k}={row[k]}" for k in ("model", "memory_total_mib", "memory_used_mib", "compute_capability") if k in row)
        print(f"{row['name']:<28} {row['type']:<5} {'yes' if row['visible'] else 'no':<8} {extra}")
    print("logical devices: " + ", ".join(report["logical"]))


def _print_env(report: dict[str, Any]) -> None:
    for key, value in report.items():
        if key in ("environment", "gpus", "warnings"):
            continue
        print(f"{key:<15} {value}")
    for gpu in report["gpus"]:
        print(f"gpu {gpu['index']:<11} {gpu['name']} ({gpu['memory_total_mib']} MiB)")
    print("environment (variables that change placement):")
    for name, value in report["environment"].items():
        print(f"  {name:<27} {'(unset)' if value is None else value}")
    for warning in report["warnings"]:
        print(f"warning: {warning}")


def _setting(name: str):
    """An argparse type reading `--<name>` as `configure()` reads that setting."""
    def parse(text: str) -> Any:
        try:
            return settings.parse_text(name, text, f"option --{name}")
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return parse


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns the exit status."""
    parser = argparse.ArgumentParser(prog="tfplace", description="TensorFlow device placement: see it.")
    commands = parser.add_subparsers(dest="command", required=True)
    devices = commands.add_parser("devices", help="physical and logical devices (starts nothing)")
    for name in ("logical_cpus", "logical_gpus", "visible_gpus"):
        devices.add_argument(f"--{name}", type=_setting(name), help="preview: " + settings.ALLOWED[name])
    devices.add_argument("--json", action="store_true", help="print JSON")
    env = commands.add_parser("env", help="versions, build info and placement environment variables")
    env.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    import tfplace

    try:
        report = _devices(args) if args.command == "devices" else _env(args)
    except tfplace.Error as err:
        print(f"tfplace {args.command}: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        (_print_devices if args.command == "devices" else _print_env)(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
