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
from typing import Any, Mapping, Optional, Sequence, Union

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tfplace.machine import _elf
from tfplace.machine import _cuda
from tfplace.machine._cuda import version_tuple
from tfplace.machine._records import BuildInfo

__all__ = ["Wanted", "wanted", "from_build", "satisfies", "REQUIRED", "probe", "describe", "cuda_of"]

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
    """A library a build loads: its soname, the pip package that ships it ("" where the build names none),
    the requirement's lower bound (or its pinned version), the requirement as pip reads it (`specifier`: its
    version part, e.g. `==8.9.7.29` or `<10.0,>=9.3.0.75`)."""

    soname: str
    package: str
    minimum: Optional[str]
    requirement: str
    specifier: str = ""

    @property
    def base(self) -> str:
        return _cuda.soname_base(self.soname)

    @property
    def required(self) -> bool:
        return self.base in REQUIRED


def wanted(requires: Sequence[str], folders: Optional[Sequence[str]] = None) -> list[Wanted]:
    """The libraries named by TensorFlow's `and-cuda` requirement strings (any form pip reads: `==`, `>=`,
    `<`, ranges, `~=`, parenthesised, with environment markers), in loading order. `folders`: the pip
    `nvidia/<folder>` directories in the run path of TensorFlow's own `.so` files, when it names any: only
    those packages' libraries are loaded by TensorFlow itself (nvJitLink comes as cuSOLVER's and cuSPARSE's
    dependency; cuRAND and NVRTC it does not load)."""
    found = []
    for text in requires:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        match = re.fullmatch(r"(nvidia-[a-z-]+?)-cu(\d+)", canonicalize_name(requirement.name))
        if not match or match.group(1) not in _PACKAGE_LIBRARIES:
            continue
        if folders and match.group(1)[len("nvidia-"):].replace("-", "_") not in folders:
            continue
        lower = [s.version for s in requirement.specifier if s.operator in ("==", "===", ">=", "~=", ">")]
        if not lower:
            continue  # no version: no soname to derive
        minimum = min(lower, key=version_tuple)
        specifier = str(requirement.specifier)
        for base in _PACKAGE_LIBRARIES[match.group(1)]:
            found.append(Wanted(_cuda.soname(base, minimum), canonicalize_name(requirement.name), minimum,
                                f"{canonicalize_name(requirement.name)}{specifier}", specifier))
    return sorted(found, key=lambda w: _ORDER.index(w.base))


# What TensorFlow's loader opens for a build without an `and-cuda` extra (2.13 and older), by the build's
# CUDA: each library's soname version (`dso_loader.cc` at each release, `TF_CUDART_VERSION` and the others).
_BUILD_SONAMES = {
    (10, 0): {"libcudart": "10.0", "libcublas": "10.0", "libcufft": "10.0", "libcurand": "10.0",
              "libcusolver": "10.0", "libcusparse": "10.0"},
    (10, 1): {"libcudart": "10.1", "libcublas": "10", "libcufft": "10", "libcurand": "10", "libcusolver": "10",
              "libcusparse": "10"},
    (11, 0): {"libcudart": "11.0", "libcublas": "11", "libcublasLt": "11", "libcufft": "10", "libcurand": "10",
              "libcusolver": "10", "libcusparse": "11"},
    (11, 1): {"libcudart": "11.0", "libcublas": "11", "libcublasLt": "11", "libcufft": "10", "libcurand": "10",
              "libcusolver": "11", "libcusparse": "11"},
    (12, 0): {"libcudart": "12", "libcublas": "12", "libcublasLt": "12", "libcufft": "11", "libcurand": "10",
              "libcusolver": "11", "libcusparse": "12"},
}


def from_build(build: Union[BuildInfo, Mapping[str, Any]]) -> list[Wanted]:
    """The libraries a CUDA build without an `and-cuda` extra loads, from its build info (`cuda_version`
    "11.8", `cudnn_version` "8"): their sonames, with no pip package (the release ships none)."""
    build = build if isinstance(build, BuildInfo) else BuildInfo.from_json(dict(build), "build info")
    cuda = version_tuple(build.cuda_version)[:2]
    cudnn = version_tuple(build.cudnn_version)[:1]
    if not cuda:
        return []
    table = _BUILD_SONAMES[max((k for k in _BUILD_SONAMES if k <= (cuda + (0,))[:2]), default=(10, 0))]
    found = [Wanted(f"{base}.so.{version}", "", None, "") for base, version in table.items()]
    if cudnn:
        found.append(Wanted(f"libcudnn.so.{cudnn[0]}", "", None, ""))
    return sorted(found, key=lambda w: _ORDER.index(w.base))


def satisfies(version: str, specifier: str) -> bool:
    """Whether a library's own `version` (as it reports it: `8.9.7`, fewer parts than pip's `8.9.7.29`)
    meets a requirement's `specifier`: each bound compared on the parts the library reports (a part it does
    not report is no reason to refuse it)."""
    have = version_tuple(version)
    if not have:
        return True
    for spec in SpecifierSet(specifier):
        full = version_tuple(spec.version.removesuffix(".*"))
        bound, mine = full[:len(have)], have[:len(full)]
        longer = len(full) > len(have)  # the bound names parts the library does not report
        ok = {"==": mine == bound, "===": mine == bound, "!=": mine != bound, ">=": mine >= bound,
              "<=": mine <= bound, ">": mine > bound, "<": mine < bound or (mine == bound and longer),
              "~=": mine >= bound and have[:len(full) - 1] == full[:-1][:len(have)]}.get(spec.operator, True)
        if not ok:
            return False
    return True


def describe(soname: str, calls: dict[str, Any]) -> tuple[Optional[str], Optional[str]]:
    """(version, cuda) from what `soname`'s version functions answered (`_load_child`'s `calls`)."""
    base = _cuda.soname_base(soname)
    value = next((v for v in calls.values() if v is not None), None)
    version: Optional[str] = None
    if isinstance(value, list):
        version = ".".join(map(str, value))
    elif isinstance(value, int):
        if base in ("libcuda", "libcudart"):
            version = _cuda.cuda_version(value)
        elif base in ("libcublasLt", "libcudnn") and (base == "libcublasLt" or value >= 90000):
            version = f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
        elif base == "libnccl" and value >= 20900:
            version = f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
        else:  # cuDNN 8, NCCL before 2.9, cuFFT, cuRAND: major*1000 + minor*100 + patch
            version = f"{value // 1000}.{value % 1000 // 100}.{value % 100}"
    cuda = None
    if isinstance(calls.get("cudnnGetCudartVersion"), int):
        cuda = _cuda.cuda_version(calls["cudnnGetCudartVersion"])
    elif base in ("libcuda", "libcudart") and version:
        cuda = version
    return version, cuda


def cuda_of(soname: str, path: Optional[str], version: Optional[str], needed: Sequence[str] = ()) -> Optional[str]:
    """The CUDA major a library belongs to, where it tells: the CUDA libraries it needs
    (`libnvJitLink.so.13`), the folder it lies in (`/usr/local/cuda-13.0/`, pip's `nvidia/cu13/`), or its own
    major for the libraries versioned with CUDA."""
    base = _cuda.soname_base(soname)
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
