"""The CUDA libraries a TensorFlow build loads: which (from the installed TensorFlow's own `and-cuda`
requirements), where the loader would find each (`LD_LIBRARY_PATH`, then the run path of TensorFlow's
own `.so` files, then the loader's cache), and the version each reports of itself and the CUDA it was
built for. Libraries are loaded in a child process with a time limit (`_load_child.py`): one that
crashes or hangs there becomes a finding, not a dead program.

Example:
    >>> from tfplace.machine._libraries import wanted
    >>> [(w.soname, w.minimum) for w in wanted(['nvidia-cudnn-cu12<10.0,>=9.3.0.75; extra == "and-cuda"'])]
    [('libcudnn.so.9', '9.3.0.75')]
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any, Optional, Sequence

from tfplace.machine import _elf

__all__ = ["Wanted", "wanted", "REQUIRED", "probe", "describe", "cuda_of", "version_tuple"]

# pip package (without its -cuXX suffix) -> the libraries of it that TensorFlow loads
_PACKAGE_LIBRARIES = {
    "nvidia-cuda-runtime": ("libcudart",), "nvidia-cublas": ("libcublas", "libcublasLt"),
    "nvidia-cufft": ("libcufft",), "nvidia-cusolver": ("libcusolver",), "nvidia-cusparse": ("libcusparse",),
    "nvidia-cudnn": ("libcudnn",), "nvidia-nccl": ("libnccl",), "nvidia-curand": ("libcurand",),
    "nvidia-cuda-nvrtc": ("libnvrtc",), "nvidia-nvjitlink": ("libnvJitLink",), "nvidia-cuda-cupti": ("libcupti",),
}
# TensorFlow lists no GPU unless every one of these loads ("Cannot dlopen some GPU libraries");
# the others are loaded when first needed (NCCL for collectives, CUPTI for the profiler, NVRTC/nvJitLink for XLA)
REQUIRED = ("libcudart", "libcublas", "libcublasLt", "libcufft", "libcusolver", "libcusparse", "libcudnn")
# dependencies first: a library loaded by path finds the ones it needs already loaded, as in TensorFlow
_ORDER = ("libcuda", "libcudart", "libnvJitLink", "libnvrtc", "libcublasLt", "libcublas", "libcufft", "libcurand",
          "libcusparse", "libcusolver", "libcudnn", "libnccl", "libcupti")
# libraries whose major version is the CUDA major they belong to
_CUDA_MAJOR = ("libcudart", "libcublas", "libcublasLt", "libnvrtc", "libnvJitLink")
TIME_LIMIT = 30.0
_CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_load_child.py")


@dataclasses.dataclass(frozen=True)
class Wanted:
    """A library a build loads: its soname, the pip package that ships it, the requirement's lower bound."""

    soname: str
    package: str
    minimum: Optional[str]
    requirement: str

    @property
    def base(self) -> str:
        return self.soname.split(".so")[0]

    @property
    def required(self) -> bool:
        return self.base in REQUIRED


def wanted(requires: Sequence[str], folders: Optional[Sequence[str]] = None) -> list[Wanted]:
    """The libraries named by TensorFlow's `and-cuda` requirement strings, in loading order. `folders`: the
    pip `nvidia/<folder>` directories in the run path of TensorFlow's own `.so` files, when it names any: only
    those packages' libraries are loaded by TensorFlow itself (nvJitLink comes as cuSOLVER's and cuSPARSE's
    dependency; cuRAND and NVRTC it does not load)."""
    found = []
    for requirement in requires:
        match = re.match(r"\s*(nvidia-[a-z-]+?)-cu(\d+)\s*([^;]*)", requirement)
        if not match or match.group(1) not in _PACKAGE_LIBRARIES:
            continue
        package = f"{match.group(1)}-cu{match.group(2)}"
        if folders and match.group(1)[len("nvidia-"):].replace("-", "_") not in folders:
            continue
        minimum = re.search(r">=\s*([\d.]+)", match.group(3))
        major = (minimum.group(1) if minimum else "").split(".")[0]
        for base in _PACKAGE_LIBRARIES[match.group(1)]:
            if major:
                found.append(Wanted(f"{base}.so.{major}", package, minimum.group(1) if minimum else None,
                                    requirement.split(";")[0].strip()))
    return sorted(found, key=lambda w: _ORDER.index(w.base))


def version_tuple(text: Optional[str]) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text or ""))


def _runtime(number: int) -> str:  # cudaRuntimeGetVersion's encoding: 12050 is 12.5
    return f"{number // 1000}.{number % 1000 // 10}"


def describe(soname: str, calls: dict[str, Any]) -> tuple[Optional[str], Optional[str]]:
    """(version, cuda) from what `soname`'s version functions answered (`_load_child`'s `calls`)."""
    base = soname.split(".so")[0]
    value = next((v for v in calls.values() if v is not None), None)
    version: Optional[str] = None
    if isinstance(value, list):
        version = ".".join(map(str, value))
    elif isinstance(value, int):
        if base in ("libcuda", "libcudart"):
            version = _runtime(value)
        elif base in ("libcublasLt", "libcudnn") and (base == "libcublasLt" or value >= 90000):
            version = f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
        elif base == "libnccl" and value >= 20900:
            version = f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
        else:  # cuDNN 8, NCCL before 2.9, cuFFT, cuRAND: major*1000 + minor*100 + patch
            version = f"{value // 1000}.{value % 1000 // 100}.{value % 100}"
    cuda = None
    if isinstance(calls.get("cudnnGetCudartVersion"), int):
        cuda = _runtime(calls["cudnnGetCudartVersion"])
    elif base in ("libcuda", "libcudart") and version:
        cuda = version
    return version, cuda


def cuda_of(soname: str, path: Optional[str], version: Optional[str], needed: Sequence[str] = ()) -> Optional[str]:
    """The CUDA major a library belongs to, where it tells: the CUDA libraries it needs
    (`libnvJitLink.so.13`), the folder it lies in (`/usr/local/cuda-13.0/`, pip's `nvidia/cu13/`), or its own
    major for the libraries versioned with CUDA."""
    base = soname.split(".so")[0]
    for name in needed:
        match = re.fullmatch(r"lib(?:cudart|nvJitLink|cublasLt|cublas|nvrtc)\.so\.(\d+)", name)
        if match and not name.startswith(base + ".so"):
            return match.group(1)
    match = re.search(r"/cuda-(\d+)(?:\.\d+)?/|/nvidia/cu(\d+)/", path or "")
    if match:
        return match.group(1) or match.group(2)
    if base in _CUDA_MAJOR and version:
        return version.split(".")[0]
    return None


def _candidates(soname: str, search: Sequence[str]) -> list[str]:
    return [os.path.join(directory, soname) for directory in search]


def _run_child(requests: list[dict[str, Any]], limit: float) -> tuple[list[dict[str, Any]], Optional[str]]:
    """Runs the loading child over `requests`; (its results, what ended it early or None)."""
    child = subprocess.Popen([sys.executable, "-I", _CHILD, json.dumps(requests)], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        out, _ = child.communicate(timeout=limit)
        ended = None if child.returncode == 0 else (
            f"loading it crashed the process ({signal.Signals(-child.returncode).name})" if child.returncode < 0
            else f"loading it ended the process (exit status {child.returncode})")
    except subprocess.TimeoutExpired:
        child.kill()
        out, _ = child.communicate()
        ended = f"loading it did not finish within {limit:.0f} s"
    results = []
    for line in out.splitlines():
        try:
            results.append(json.loads(line))
        except ValueError:
            continue
    return results, ended


def probe(sonames: Sequence[str], search: Sequence[str], *, limit: float = TIME_LIMIT) -> dict[str, dict[str, Any]]:
    """Loads each of `sonames` in a child process as TensorFlow's loader would, trying the directories of
    `search` first; returns the facts format's `"libraries"` entries. A library whose loading crashes or
    hangs the child gets that as its error; the others are loaded by a new child."""
    libraries: dict[str, dict[str, Any]] = {}
    pending = list(sonames)
    deadline = time.monotonic() + limit
    while pending:
        requests = [{"soname": s, "candidates": _candidates(s, search)} for s in pending]
        results, ended = _run_child(requests, max(1.0, deadline - time.monotonic()))
        started = [r["start"] for r in results if "start" in r]
        for result in (r for r in results if "soname" in r):
            version, cuda = describe(result["soname"], result["calls"])
            needed = _elf.dynamic(result["path"]).needed or () if result["path"] else ()
            libraries[result["soname"]] = {
                "path": result["path"], "error": result["error"], "version": version,
                "cuda": cuda or (cuda_of(result["soname"], result["path"], version, needed)
                                 if result["path"] else None)}
        if ended is None:
            break
        stuck = (next((s for s in started if s not in libraries), None)
                 or next(s for s in pending if s not in libraries))
        libraries[stuck] = {"path": None, "error": ended, "version": None, "cuda": None}
        pending = [s for s in pending if s not in libraries]
        if time.monotonic() >= deadline:
            for soname in pending:
                libraries[soname] = {"path": None, "error": "not loaded: the time limit was spent", "version": None,
                                     "cuda": None}
            break
    return {soname: libraries[soname] for soname in sonames if soname in libraries}
