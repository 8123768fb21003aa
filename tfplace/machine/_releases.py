"""TensorFlow's releases as the doctor needs them for its fixes: per release the Pythons its Linux wheels
exist for, the CUDA and cuDNN its GPU build was made with, and how that build is installed on each platform
(`tensorflow-gpu` before 2.1; the `tensorflow` wheel itself from 2.1 to 2.13; `tensorflow[and-cuda]` from
2.14; native Windows up to 2.10, WSL2 after), so that every `fix:` line installs something that exists for
the machine's platform, Python and release. `tests/fixtures/releases/` holds what each release's wheel
declares (`tools/release_declarations.py` took it); `tests/test_doctor_releases.py` checks this table against it.

Example:
    >>> gpu_install("2.15.1", "Linux", "x86_64", ["tensorflow-cpu"])
    "pip uninstall -y tensorflow-cpu && pip install 'tensorflow[and-cuda]==2.15.1'"
    >>> gpu_install("1.15.2", "Linux", "x86_64", ["tensorflow"]).split("  #")[0]
    "pip uninstall -y tensorflow && pip install 'tensorflow-gpu==1.15.2'"
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional, Sequence

from tfplace.machine._cuda import version_tuple

__all__ = ["Release", "RELEASES", "release_of", "gpu_install", "cuda_install", "newest_for", "NEWEST_CAPABILITY",
           "DRIVER_FOR_CUDA", "LAST_RELEASE_FOR"]


class Release(NamedTuple):
    """A TensorFlow release (`"2.15"`): its Pythons (oldest, newest minor of 3), and the CUDA and cuDNN of its
    GPU build (TensorFlow's tested build configurations)."""

    version: str
    pythons: tuple[int, int]
    cuda: str
    cudnn: str


RELEASES = tuple(Release(*row) for row in (
    ("1.15", (5, 7), "10.0", "7.4"), ("2.0", (5, 7), "10.0", "7.4"), ("2.1", (5, 7), "10.1", "7.6"),
    ("2.2", (5, 8), "10.1", "7.6"), ("2.3", (5, 8), "10.1", "7.6"), ("2.4", (6, 8), "11.0", "8.0"),
    ("2.5", (6, 9), "11.2", "8.1"), ("2.6", (6, 9), "11.2", "8.1"), ("2.7", (7, 9), "11.2", "8.1"),
    ("2.8", (7, 10), "11.2", "8.1"), ("2.9", (7, 10), "11.2", "8.1"), ("2.10", (7, 10), "11.2", "8.1"),
    ("2.11", (7, 10), "11.2", "8.1"), ("2.12", (8, 11), "11.8", "8.6"), ("2.13", (8, 11), "11.8", "8.6"),
    ("2.14", (9, 11), "11.8", "8.7"), ("2.15", (9, 11), "12.2", "8.9"), ("2.16", (9, 12), "12.3", "8.9"),
    ("2.17", (9, 12), "12.3", "8.9"), ("2.18", (9, 12), "12.5", "9.3"), ("2.19", (9, 12), "12.5", "9.3"),
    ("2.20", (9, 13), "12.5", "9.3"), ("2.21", (10, 13), "12.5", "9.3"),
))
# The newest compute capability each CUDA release compiles for and knows (CUDA's release notes): a build's PTX
# serves a newer GPU only as far as its CUDA knew GPUs.
NEWEST_CAPABILITY = ((10, 0, "7.5"), (11, 0, "8.0"), (11, 1, "8.6"), (11, 4, "8.7"), (11, 8, "9.0"),
                     (12, 8, "12.0"), (12, 9, "12.1"))
# The oldest NVIDIA Linux driver each CUDA major runs on (CUDA's minor version compatibility; 10.x per minor).
DRIVER_FOR_CUDA = {(10, 0): "410.48", (10, 1): "418.39", (10, 2): "440.33", (11,): "450.80.02", (12,): "525.60.13",
                   (13,): "580.65.06"}
# The last release with machine code for an older GPU architecture (compute capability major).
LAST_RELEASE_FOR = {3: "2.14", 5: "2.16"}


def release_of(version: Optional[str]) -> Optional[Release]:
    """The release a TensorFlow version (`2.15.1`, `2.16.0rc0`) belongs to, None when the table lacks it."""
    key = ".".join(map(str, version_tuple(version or "")[:2]))
    return next((r for r in RELEASES if r.version == key), None)


def newest_capability(cuda: str) -> Optional[str]:
    """The newest compute capability a CUDA release knows."""
    have = version_tuple(cuda)[:2]
    return next((c for major, minor, c in reversed(NEWEST_CAPABILITY) if have >= (major, minor)), None)


def driver_for(cuda: str) -> Optional[str]:
    """The oldest Linux driver that runs CUDA `cuda`."""
    have = version_tuple(cuda)
    return DRIVER_FOR_CUDA.get(have[:2]) or DRIVER_FOR_CUDA.get(have[:1])


def cuda_install(release: Release) -> str:
    """Where a release has no `and-cuda` extra (2.13 and older): its CUDA and cuDNN from conda-forge, found
    through `LD_LIBRARY_PATH` as TensorFlow's own install guide of those releases has it."""
    return (f"conda install -y -c conda-forge cudatoolkit={release.cuda} cudnn={release.cudnn} && "
            "export LD_LIBRARY_PATH=$CONDA_PREFIX/lib:$LD_LIBRARY_PATH")


def gpu_install(version: str, system: str, machine: str, installed: Sequence[str]) -> Optional[str]:
    """The command that puts the GPU build of TensorFlow `version` on this machine (`installed`: the
    TensorFlow distributions there now, removed first unless they are the one installed), or None where the
    release has none for this platform (macOS, Linux on ARM)."""
    release = release_of(version)
    pin = f"=={version}" if re.fullmatch(r"[\d.]+", version or "") else (f"=={release.version}.*" if release else "")
    at = version_tuple(version)[:2]
    if system == "Windows":
        if at and at > (2, 10):
            return "wsl --install  # then, inside WSL2: pip install 'tensorflow[and-cuda]'"
        target, extra = ("tensorflow-gpu" if at < (2, 1) else "tensorflow"), ""
    elif system != "Linux" or machine not in ("x86_64", "AMD64", "amd64"):
        return None
    elif at and at < (2, 1):
        target, extra = "tensorflow-gpu", ""
    elif at and at < (2, 14):
        target, extra = "tensorflow", ""
    else:
        target, extra = "tensorflow", "[and-cuda]"
    install = f"pip install '{target}{extra}{pin}'"
    if not extra and release is not None:  # the wheel ships no CUDA library before `and-cuda`
        install += f"  # then CUDA {release.cuda} and cuDNN {release.cudnn}: {cuda_install(release)}"
    others = [name for name in installed if name != target]
    return f"pip uninstall -y {' '.join(others)} && {install}" if others else install


def newest_for(capability: str, python: str) -> Optional[Release]:
    """The newest release whose CUDA knows a GPU of `capability` and that has wheels for `python` (`"3.8"`)."""
    have, py = version_tuple(capability)[:2], version_tuple(python)[:2]
    fitting = [r for r in RELEASES if py and r.pythons[0] <= py[1] <= r.pythons[1] and py[0] == 3
               and version_tuple(newest_capability(r.cuda) or "0.0") >= have]
    return fitting[-1] if fitting else None
