"""How CUDA numbers things, in one place: the versions its libraries report as integers
(`cudaRuntimeGetVersion`'s 12050 is CUDA 12.5), version strings as tuples, and sonames (`libcudnn.so.9`:
the library `libcudnn`, major 9; CUDA 11's runtime is `libcudart.so.11.0`).

Example:
    >>> cuda_version(12050), soname_base("libcudnn.so.9"), soname("libcudart", "11.8.89")
    ('12.5', 'libcudnn', 'libcudart.so.11.0')
    >>> version_tuple("12.5.82")
    (12, 5, 82)
"""

from __future__ import annotations

import re
from typing import Optional

__all__ = ["cuda_version", "version_tuple", "soname_base", "soname"]


def cuda_version(number: int) -> str:
    """CUDA's integer encoding (`cudaRuntimeGetVersion`, `cuDriverGetVersion`, NVML's driver CUDA,
    `cudnnGetCudartVersion`: major * 1000 + minor * 10) as `"major.minor"`."""
    return f"{number // 1000}.{number % 1000 // 10}"


def version_tuple(text: Optional[str]) -> tuple[int, ...]:
    """The numbers of a version string (`"2.16.0rc0"` is `(2, 16, 0, 0)`); `()` for None or no number."""
    return tuple(int(part) for part in re.findall(r"\d+", text or ""))


def soname_base(name: str) -> str:
    """The library a soname or file name names, without `.so` and its version (`libcublasLt.so.12` ->
    `libcublasLt`)."""
    return name.split(".so")[0]


def soname(base: str, version: str) -> str:
    """The soname of `base` at release `version` of its package: the major, except CUDA 10's and 11's
    runtime (`libcudart.so.11.0`), CUPTI (`libcupti.so.11.8`) and NVRTC (`libnvrtc.so.11.2`), which name a
    minor too."""
    parts = version_tuple(version)
    if base in ("libcudart", "libcupti", "libnvrtc") and parts and parts[0] in (10, 11) and len(parts) > 1:
        minor = 0 if base == "libcudart" and parts[0] == 11 else 2 if base == "libnvrtc" else parts[1]
        return f"{base}.so.{parts[0]}.{minor}"
    return f"{base}.so.{parts[0]}"
