"""The GPU planes of a profile: kernels and copies per device (`tfplace.placement.profile._xspace` reads
the host plane and each `/device:GPU:<n>` plane with `gpu_plane`).

On a GPU, TensorFlow's device tracer (CUPTI) adds a `/device:GPU:<n>` plane per GPU with a
`Stream #<id>(...)` line per stream. Names as openxla/xla writes them
(`xla/tsl/profiler/utils/xplane_schema.cc`: `kGpuPlanePrefix`, the stats `kernel_details`,
`memcpy_details`, `tf_op`; `xla/backends/profiler/gpu/cupti_buffer_events.cc`: events
`MemcpyH2D`, `MemcpyD2H`, `MemcpyD2D`, `MemcpyP2P`, `MemcpyOther`, a peer copy on its source
GPU's plane; `xla/backends/profiler/gpu/cupti_collector.cc`: `kernel_details` on every kernel,
`memcpy_details` reading `kind_src:pageable kind_dst:device size:<bytes> dest:<device id>
async:1`, both as references to stat metadata, and `tf_op`, the launching op's `<node>:<type>`).
That reading is checked on XSpace protos the tests write in that schema and on a real H200 profile (the
GPU fixtures' `h200_jax_steps.xplane.pb`).

Example:
    >>> _details("kind_src:pageable kind_dst:device size:64 dest:0")["size"]
    '64'
    >>> from tensorflow.tsl.profiler.protobuf import xplane_pb2
    >>> gpu_plane(xplane_pb2.XPlane(name="/device:GPU:0"), "/device:GPU:0")
    GpuPlane(kernels=[], copies=[])
"""

from __future__ import annotations

from typing import Any, NamedTuple

from tfplace import _tensorflow
from tfplace.placement.ops import _kernels
from tfplace.placement.profile._planes import stats

__all__ = ["Copy", "GpuPlane", "Kernel", "gpu_plane"]

# Copies: where each side is, by the event's name (CUPTI's copy kind), else by memcpy_details' kinds.
_MEMCPY_SIDES = {"MemcpyH2D": (True, False), "MemcpyD2H": (False, True), "MemcpyD2D": (False, False),
                 "MemcpyP2P": (False, False)}
_HOST_MEMORY = frozenset({"pageable", "pinned"})
_HOST = "/device:CPU:0"


def _details(text: str) -> dict[str, str]:
    """`kind_src:pageable kind_dst:device size:4194304 dest:0 async:1` as a dict."""
    return dict(part.split(":", 1) for part in text.split() if ":" in part)


class Kernel(NamedTuple):
    """A kernel's run on a stream: the stream's line id, the op type that launched it (else the kernel's
    name), start and length (µs)."""

    line: int
    op: str
    start_us: float
    duration_us: float


class Copy(NamedTuple):
    """A copy a GPU's plane records: from and to (canonical devices), bytes (0 where unknown), start and
    length (µs), and for a copy from host memory whether it was `pageable` or `pinned` ("" otherwise)."""

    source: str
    target: str
    bytes: int
    start_us: float
    duration_us: float
    host_memory: str


class GpuPlane(NamedTuple):
    """What one GPU's plane holds: its kernels and its copies."""

    kernels: list[Kernel]
    copies: list[Copy]


def gpu_plane(plane: Any, device: str) -> GpuPlane:
    """The kernels and copies of a GPU's plane (`device`: the GPU it is)."""
    kinds = {key: metadata.name for key, metadata in plane.event_metadata.items()}
    found = GpuPlane([], [])
    for line in plane.lines:
        base_us = line.timestamp_ns / 1e3
        for event in line.events:
            name = kinds.get(event.metadata_id, "")
            said = stats(plane, event)
            start, duration = base_us + event.offset_ps / 1e6, event.duration_ps / 1e6
            if "memcpy_details" in said:
                details = _details(str(said["memcpy_details"]))
                sides = _MEMCPY_SIDES.get(name) or (details.get("kind_src") in _HOST_MEMORY,
                                                    details.get("kind_dst") in _HOST_MEMORY)
                if sides == (True, True):
                    continue  # host to host: no device's transfer
                dest = details.get("dest", "")
                target = _HOST if sides[1] else f"/device:GPU:{dest}" if dest.isdigit() else device
                written = details.get("size", "")
                size = int(written) if written.isdigit() else 0
                memory = details.get("kind_src", "") if sides[0] else ""  # pinned or pageable: for the steps
                found.copies.append(Copy(_HOST if sides[0] else device, target, size, start, duration,
                                         memory if memory in _HOST_MEMORY else ""))
            elif "kernel_details" in said:
                found.kernels.append(Kernel(line.id, _gpu_op(name, str(said.get("tf_op", ""))), start, duration))
    return found


def _gpu_op(kernel: str, tf_op: str) -> str:
    """The op type of a GPU kernel: from its `tf_op` stat (`<node>:<type>`) when that names an op
    TensorFlow defines, else the kernel's name."""
    op = _kernels.op_type(tf_op.rpartition(":")[2]) if ":" in tf_op else ""
    return op if op and _tensorflow.op_def(op) is not None else kernel
