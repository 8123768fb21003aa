"""The GPUs of this machine and its NVIDIA driver, read through NVML, `nvidia-smi`, `/proc` and `/sys`
without starting CUDA (no CUDA context, no TensorFlow).

TensorFlow numbers GPUs after `CUDA_VISIBLE_DEVICES`: with
`CUDA_VISIBLE_DEVICES=2,0`, TensorFlow's GPU 0 is the driver's GPU 2 and its
GPU 1 is the driver's GPU 0. NVML and `nvidia-smi` number GPUs by PCI bus, the
order CUDA uses only when `CUDA_DEVICE_ORDER=PCI_BUS_ID` (CUDA's default,
FASTEST_FIRST, may put a faster GPU first on a mixed machine). `visible_gpus`
and the `GpuInfo.index` read here are TensorFlow's numbers.

Example:
    >>> from tfplace.machine._gpus import parse_nvidia_smi, map_cuda_visible
    >>> gpus = parse_nvidia_smi("0, Tesla T4, 15360, GPU-aa, 0, 7.5\\n1, Tesla V100, 16160, GPU-bb, 310, 7.0\\n")
    >>> [(g.index, g.name) for g in map_cuda_visible(gpus, "1")]
    [(0, 'Tesla V100')]
"""

from __future__ import annotations

import ctypes
import dataclasses
import glob
import os
import re
import shutil
import subprocess
from typing import Any, Callable, Optional, Sequence, TypeVar

from absl import logging

from tfplace.machine import _cuda

__all__ = ["GpuInfo", "read_gpus", "driver_gpus", "driver_version", "driver_cuda", "driver_gpu_count",
           "proc_driver_version", "parse_proc_version", "pci_gpus", "parse_nvidia_smi", "parse_driver_cuda",
           "map_cuda_visible"]

# compute_cap is known to nvidia-smi since driver 510; older drivers are asked without it
NVIDIA_SMI_QUERY = ("--query-gpu=index,name,memory.total,uuid,memory.used,compute_cap", "--format=csv,noheader,nounits")
NVIDIA_SMI_OLD_QUERY = ("--query-gpu=index,name,memory.total,uuid,memory.used", "--format=csv,noheader,nounits")
PROC_VERSION = "/proc/driver/nvidia/version"
PCI_DEVICES = "/sys/bus/pci/devices"


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    """One GPU as TensorFlow numbers it (`/physical_device:GPU:<index>`).

    `total_mib` and `used_mib` are the GPU's total and used memory in MiB,
    None when they could not be read; `compute_capability` is `"9.0"` for an
    H100, None when unknown.
    """

    index: int
    name: str
    total_mib: Optional[int]
    uuid: str = ""
    used_mib: Optional[int] = None
    compute_capability: Optional[str] = None


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """Parses what `nvidia-smi` prints for `NVIDIA_SMI_QUERY` (or the older query without `compute_cap`)."""
    gpus = []
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) not in (4, 5, 6) or not parts[0].isdigit():
            continue
        parts += [""] * (6 - len(parts))
        total, used = (int(p) if p.isdigit() else None for p in (parts[2], parts[4]))
        capability = parts[5] if re.fullmatch(r"\d+\.\d+", parts[5]) else None
        gpus.append(GpuInfo(int(parts[0]), parts[1], total, parts[3], used, capability))
    return gpus


def parse_driver_cuda(text: str) -> Optional[str]:
    """The CUDA version in `nvidia-smi`'s default table (`CUDA Version: 13.0`), None when absent."""
    match = re.search(r"CUDA Version:\s*(\d+\.\d+)", text)
    return match.group(1) if match else None


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


def _nvml(read: Callable[[Any], _T], problems: Optional[list[str]] = None) -> Optional[_T]:
    """`read(pynvml)` between NVML's init and shutdown; None without pynvml, its library or a driver. What
    goes wrong beyond a missing library or driver is logged and, given `problems`, added there."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        if problems is not None and not isinstance(err, (getattr(pynvml, "NVMLError_LibraryNotFound", ()),
                                                         getattr(pynvml, "NVMLError_DriverNotLoaded", ()))):
            problems.append(f"NVML did not start: {err}")
        return None
    try:
        return read(pynvml)
    except Exception as err:  # a binding older or newer than the driver: say so, go on without it
        logging.warning("tfplace: NVML failed (%s); trying nvidia-smi", err)
        if problems is not None:
            problems.append(f"NVML failed: {type(err).__name__}: {err}")
        return None
    finally:
        pynvml.nvmlShutdown()


def _nvidia_smi(*query: str, quiet: bool = False, problems: Optional[list[str]] = None) -> Optional[str]:
    """What `nvidia-smi <query>` prints; None without nvidia-smi or when it fails (logged unless `quiet`; added
    to `problems` when given)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        return subprocess.run(("nvidia-smi", *query), capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError) as err:
        said = (getattr(err, "stderr", None) or getattr(err, "stdout", None) or "").strip().splitlines()
        if not quiet:
            logging.warning("tfplace: nvidia-smi %s failed (%s)", " ".join(query), err)
        if problems is not None:
            problems.append(
                f"nvidia-smi exited with status {err.returncode}" if isinstance(err, subprocess.CalledProcessError)
                else f"nvidia-smi did not answer within {err.timeout:.0f} s"
                if isinstance(err, subprocess.TimeoutExpired) else f"nvidia-smi could not run ({err})")
            problems[-1] += f": {said[0]}" if said else ""
        return None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _capability(pynvml: Any, handle: Any) -> Optional[str]:
    try:
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
    except (AttributeError, pynvml.NVMLError):
        return None
    return f"{major}.{minor}"


def _nvml_gpus(pynvml: Any) -> list[GpuInfo]:
    gpus = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        gpus.append(GpuInfo(index, _text(pynvml.nvmlDeviceGetName(handle)), int(memory.total) >> 20,
                            _text(pynvml.nvmlDeviceGetUUID(handle)), int(memory.used) >> 20,
                            _capability(pynvml, handle)))
    return gpus


def driver_gpus(problems: Optional[list[str]] = None) -> list[GpuInfo]:
    """Every GPU the driver reports, in the driver's order (NVML, else `nvidia-smi`); [] without a driver.
    What failed on the way is added to `problems` when given."""
    gpus = _nvml(_nvml_gpus, problems)
    if gpus is None:
        text = (_nvidia_smi(*NVIDIA_SMI_QUERY, quiet=True)
                or _nvidia_smi(*NVIDIA_SMI_OLD_QUERY, quiet=problems is not None, problems=problems))
        gpus = parse_nvidia_smi(text or "")
    return gpus


def driver_version() -> Optional[str]:
    """The NVIDIA driver version from NVML, nvidia-smi or /proc, None without a driver."""
    version = _nvml(lambda pynvml: _text(pynvml.nvmlSystemGetDriverVersion()))
    if version is None:
        text = _nvidia_smi("--query-gpu=driver_version", "--format=csv,noheader", quiet=True) or ""
        version = text.splitlines()[0].strip() if text.strip() else proc_driver_version()
    return version


def driver_cuda() -> Optional[str]:
    """The newest CUDA the driver supports (`"13.0"`), from NVML or nvidia-smi's table; None when unknown."""
    number = _nvml(lambda pynvml: int(pynvml.nvmlSystemGetCudaDriverVersion()))
    if number:
        return _cuda.cuda_version(number)
    return parse_driver_cuda(_nvidia_smi(quiet=True) or "")


def driver_gpu_count() -> Optional[int]:
    """How many GPUs the driver reports, read through NVML's own library (no Python binding needed):
    the cheapest question, asked where nothing may be wrong. None without NVML."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    count = ctypes.c_uint(0)
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        return count.value if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 else None
    finally:
        nvml.nvmlShutdown()


def proc_driver_version(path: str = PROC_VERSION) -> Optional[str]:
    """The kernel module's version in `/proc/driver/nvidia/version`, None when the file is missing."""
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return parse_proc_version(file.read())
    except OSError:
        return None


def parse_proc_version(text: str) -> Optional[str]:
    """The driver version in the text of `/proc/driver/nvidia/version`."""
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", text)
    return match.group(1) if match else None


def pci_gpus(root: str = PCI_DEVICES) -> list[str]:
    """The PCI addresses of NVIDIA display controllers in `/sys` (present whether or not a driver runs)."""
    found = []
    for device in sorted(glob.glob(os.path.join(root, "*"))):
        try:
            with open(os.path.join(device, "vendor")) as vendor, open(os.path.join(device, "class")) as kind:
                if vendor.read().strip() == "0x10de" and kind.read().strip().startswith("0x03"):
                    found.append(os.path.basename(device))
        except OSError:
            continue
    return found


def read_gpus(count: int) -> list[GpuInfo]:
    """The `count` GPUs TensorFlow lists, with names and memory from NVML or nvidia-smi.

    When neither tool answers, the GPUs are returned with unknown memory.
    """
    if count == 0:
        return []
    driver = driver_gpus()
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
