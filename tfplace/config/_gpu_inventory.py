"""The GPUs of this machine, read through NVML or `nvidia-smi` without starting CUDA.

TensorFlow numbers GPUs after `CUDA_VISIBLE_DEVICES`: with
`CUDA_VISIBLE_DEVICES=2,0`, TensorFlow's GPU 0 is the driver's GPU 2 and its
GPU 1 is the driver's GPU 0. NVML and `nvidia-smi` number GPUs by PCI bus, the
order CUDA uses only when `CUDA_DEVICE_ORDER=PCI_BUS_ID` (CUDA's default,
FASTEST_FIRST, may put a faster GPU first on a mixed machine). `visible_gpus`
and the `GpuInfo.index` read here are TensorFlow's numbers.

Example:
    >>> from tfplace.config._gpu_inventory import parse_nvidia_smi, map_cuda_visible
    >>> gpus = parse_nvidia_smi("0, Tesla T4, 15360, GPU-aa, 0\\n1, Tesla V100, 16160, GPU-bb, 310\\n")
    >>> [(g.index, g.name) for g in map_cuda_visible(gpus, "1")]
    [(0, 'Tesla V100')]
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from typing import Any, Callable, Optional, Sequence, TypeVar

from absl import logging

from tfplace.config._gpu_plan import GpuInfo

__all__ = ["read_gpus", "driver_version", "parse_nvidia_smi", "map_cuda_visible"]

NVIDIA_SMI_QUERY = ("--query-gpu=index,name,memory.total,uuid,memory.used", "--format=csv,noheader,nounits")


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """Parses what `nvidia-smi` prints for `NVIDIA_SMI_QUERY`."""
    gpus = []
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) not in (4, 5) or not parts[0].isdigit():
            continue
        total, used = (int(p) if p.isdigit() else None for p in (parts[2], (parts + [""])[4]))
        gpus.append(GpuInfo(int(parts[0]), parts[1], total, parts[3], used))
    return gpus


def map_cuda_visible(gpus: Sequence[GpuInfo], cuda_visible_devices: Optional[str]) -> list[GpuInfo]:
    """Renumbers driver-ordered `gpus` the way CUDA (and so TensorFlow) sees them.

    Entries of `CUDA_VISIBLE_DEVICES` are driver indices or UUID prefixes
    (`GPU-...`); as in CUDA, an entry that names no GPU ends the list.
    """
    if cuda_visible_devices is None:
        return list(gpus)
    seen = []
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        match = [
            g for g in gpus
            if (entry.isdigit() and g.index == int(entry)) or (entry.startswith("GPU-") and g.uuid.startswith(entry))
        ]
        if len(match) != 1 or match[0] in seen:
            break
        seen.append(match[0])
    return [dataclasses.replace(g, index=i) for i, g in enumerate(seen)]


_T = TypeVar("_T")


def _nvml(read: Callable[[Any], _T]) -> Optional[_T]:
    """`read(pynvml)` between NVML's init and shutdown; None without pynvml, its library or a driver."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        return read(pynvml)
    except pynvml.NVMLError as err:
        logging.warning("tfplace: NVML failed (%s); trying nvidia-smi", err)
        return None
    finally:
        pynvml.nvmlShutdown()


def _nvidia_smi(*query: str) -> Optional[str]:
    """What `nvidia-smi <query>` prints; None without nvidia-smi or when it fails (logged)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        return subprocess.run(("nvidia-smi", *query), capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError) as err:
        logging.warning("tfplace: nvidia-smi %s failed (%s)", " ".join(query), err)
        return None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_gpus(pynvml: Any) -> list[GpuInfo]:
    gpus = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        gpus.append(GpuInfo(index, _text(pynvml.nvmlDeviceGetName(handle)), int(memory.total) >> 20,
                            _text(pynvml.nvmlDeviceGetUUID(handle)), int(memory.used) >> 20))
    return gpus


def driver_version() -> Optional[str]:
    """The NVIDIA driver version from NVML or nvidia-smi, None without a driver."""
    version = _nvml(lambda pynvml: _text(pynvml.nvmlSystemGetDriverVersion()))
    if version is None:
        text = _nvidia_smi("--query-gpu=driver_version", "--format=csv,noheader") or ""
        version = text.splitlines()[0].strip() if text.strip() else None
    return version


def read_gpus(count: int) -> list[GpuInfo]:
    """The `count` GPUs TensorFlow lists, with names and memory from NVML or nvidia-smi.

    When neither tool answers, the GPUs are returned with unknown memory.
    """
    if count == 0:
        return []
    driver = _nvml(_nvml_gpus) or parse_nvidia_smi(_nvidia_smi(*NVIDIA_SMI_QUERY) or "")
    mapped = map_cuda_visible(driver, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if len(mapped) != count:
        if driver:
            logging.warning(
                "tfplace: TensorFlow lists %d GPU(s) but the driver reports %d after CUDA_VISIBLE_DEVICES=%r; "
                "GPU memory totals are unknown", count, len(mapped), os.environ.get("CUDA_VISIBLE_DEVICES"))
        return [GpuInfo(i, "GPU", None) for i in range(count)]
    if os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID" and len({g.name for g in mapped}) > 1:
        logging.warning(
            "tfplace: GPUs of different models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA may number "
            "them fastest first, unlike nvidia-smi; set CUDA_DEVICE_ORDER=PCI_BUS_ID for stable indices")
    return mapped
