"""The doctor's finding codes as declared data: each code, its severity, what it says and the fix it gives
(`CODES`). `tfplace.machine._verdict` gives findings only under a declared code, and the doctor guide's table is
made from `CODES` when the documentation site builds (`table()`).

Example:
    >>> BY_CODE["cuda-visible-devices-hides"].fix
    '`unset CUDA_VISIBLE_DEVICES`'
    >>> table().splitlines()[0]
    '| code | severity | what it says | the fix it gives |'
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Code", "CODES", "BY_CODE", "SEVERITIES", "table"]

# A finding's severity: "error" (a GPU will not be used), "warning" (it will, with a cost or risk) or "info".
SEVERITIES = ("error", "warning", "info")


class Code(NamedTuple):
    """A finding's code: its name (`Finding.code`), its severity as the guide words it (it may depend on the
    machine), what it says and the fix it gives."""

    name: str
    severity: str
    says: str
    fix: str


CODES = (
    Code("platform-without-gpu", "error (Windows), info (macOS)",
         "TensorFlow after 2.10 uses no GPU on native Windows; none on macOS",
         "`wsl --install`, then `pip install 'tensorflow[and-cuda]'` in WSL2; `pip install tensorflow-metal`"),
    Code("wsl-libcuda-missing", "error",
         "WSL2 without the `libcuda.so.1` the Windows driver provides",
         "`export LD_LIBRARY_PATH=/usr/lib/wsl/lib:$LD_LIBRARY_PATH`"),
    Code("driver-not-answering", "error, or warning with no GPU seen",
         "NVML or `nvidia-smi` fails or hangs",
         "`sudo reboot` when the driver's kernel module and libraries differ"),
    Code("no-driver", "error with GPUs on the PCI bus, else info",
         "no NVIDIA driver runs",
         "`sudo ubuntu-drivers install && sudo reboot`"),
    Code("container-without-gpu", "warning",
         "a container started without the host's GPUs",
         "`docker run --gpus all ...`, its podman or Kubernetes equivalent"),
    Code("tensorflow-missing", "error with GPUs, else info",
         "no TensorFlow in this Python",
         "`pip install 'tensorflow[and-cuda]'`"),
    Code("conflicting-tensorflow", "warning",
         "several TensorFlow distributions, the last installed over the others",
         "the release's GPU build, the others uninstalled"),
    Code("cpu-only-tensorflow", "error with GPUs, else info",
         "a build without CUDA (`tensorflow-cpu`)",
         "the same release's GPU build"),
    Code("driver-too-old", "error",
         "the driver's CUDA is older than the build's, or cannot compile its PTX",
         "a driver of at least the version that CUDA needs"),
    Code("cuda-libraries-missing", "error (warning for those loaded when first needed)",
         "CUDA libraries that do not load",
         "the release's GPU build, or `LD_LIBRARY_PATH` where pip put them"),
    Code("library-version-mismatch", "error (warning for those loaded when first needed)",
         "a library older than the build accepts, or built for another CUDA",
         "`pip install` of the requirement, or the GPU build; a `LD_LIBRARY_PATH` without the folder that shadows it"),
    Code("cuda-visible-devices-hides", "error",
         "`CUDA_VISIBLE_DEVICES` leaves fewer GPUs visible than the driver reports",
         "`unset CUDA_VISIBLE_DEVICES`"),
    Code("compute-capability-unsupported", "error",
         "a GPU older than the build's oldest code, or newer than its CUDA knows",
         "the last release with code for it, the newest release whose CUDA knows it, or a build from source"),
    Code("ptx-jit", "warning",
         "no machine code for the GPU: PTX compiled at start, minutes on first use",
         "`export CUDA_CACHE_MAXSIZE=4294967296`"),
    Code("tensorflow-view-differs", "error or warning",
         "TensorFlow itself lists another number of GPUs than the facts predict (its log line)",
         "none to paste"),
    Code("gpu-run-failed", "error",
         "with `--run`, a `MatMul` asked of a GPU did not run there",
         "none to paste"),
)
BY_CODE = {code.name: code for code in CODES}


def table() -> str:
    """The codes as a Markdown table (the doctor guide's)."""
    rows = [f"| `{c.name}` | {c.severity} | {c.says} | {c.fix} |" for c in CODES]
    return "\n".join(["| code | severity | what it says | the fix it gives |", "|---|---|---|---|", *rows])
