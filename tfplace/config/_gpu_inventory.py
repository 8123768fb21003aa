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
from typing import Optional, Sequence

from absl import logging

from tfplace.config._gpu_plan import GpuInfo

__all__ = ["read_gpus", "driver_version", "parse_nvidia_smi", "map_cuda_visible"]

NVIDIA_SMI_QUERY = ("nvidia-smi", "--query-gpu=index,name,memory.total,uuid,memory.used",
                    "--format=csv,noheader,nounits")


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """Parses the output of `nvidia-smi` run with `NVIDIA_SMI_QUERY`."""
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


def _read_nvml() -> Optional[list[GpuInfo]]:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(GpuInfo(index, _text(name), int(memory.total) >> 20, _text(uuid), int(memory.used) >> 20))
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _read_nvidia_smi() -> Optional[list[GpuInfo]]:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(NVIDIA_SMI_QUERY, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError) as err:
        logging.warning("tfplace: nvidia-smi failed (%s); GPU memory totals are unknown", err)
        return None
    return parse_nvidia_smi(done.stdout)


def driver_version() -> Optional[str]:
    """The NVIDIA driver version from NVML or nvidia-smi, None without a driver."""
    try:
        import pynvml
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            try:
                return _text(pynvml.nvmlSystemGetDriverVersion())
            finally:
                pynvml.nvmlShutdown()
        except pynvml.NVMLError:  # no library or no driver: try nvidia-smi
            pass
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"),
                              capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.splitlines()[0].strip() if done.stdout.strip() else None


def read_gpus(count: int) -> list[GpuInfo]:
    """The `count` GPUs TensorFlow lists, with names and memory from NVML or nvidia-smi.

    When neither tool answers, the GPUs are returned with unknown memory.
    """
    if count == 0:
        return []
    driver = _read_nvml() or _read_nvidia_smi() or []
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
