"""The GPU planes of a profile: kernels and copies per device (`tfplace.placement.taking._profile` reads
the host plane and calls `gpu_plane` for each `/device:GPU:<n>` plane; its docstring says what CUPTI writes).

Example:
    >>> _details("kind_src:pageable kind_dst:device size:64 dest:0")["size"]
    '64'
"""

from __future__ import annotations

from typing import Any

from tfplace import _tensorflow
from tfplace.placement.ops import _kernels

__all__ = ["gpu_plane"]

# Copies: where each side is, by the event's name (CUPTI's copy kind), else by memcpy_details' kinds.
_MEMCPY_SIDES = {"MemcpyH2D": (True, False), "MemcpyD2H": (False, True), "MemcpyD2D": (False, False),
                 "MemcpyP2P": (False, False)}
_HOST_MEMORY = frozenset({"pageable", "pinned"})
_HOST = "/device:CPU:0"


def _details(text: str) -> dict[str, str]:
    """`kind_src:pageable kind_dst:device size:4194304 dest:0 async:1` as a dict."""
    return dict(part.split(":", 1) for part in text.split() if ":" in part)


def gpu_plane(plane: Any, tally: Any, device: str, stats_of: Any) -> None:
    """Reads a GPU plane into `tally` (`_profile._Tally`): kernels as work, copies as transfers."""
    kinds = {key: metadata.name for key, metadata in plane.event_metadata.items()}
    for line in plane.lines:
        base_us = line.timestamp_ns / 1e3
        for event in line.events:
            name = kinds.get(event.metadata_id, "")
            stats = stats_of(plane, event)
            start, duration = base_us + event.offset_ps / 1e6, event.duration_ps / 1e6
            if "memcpy_details" in stats:
                details = _details(str(stats["memcpy_details"]))
                sides = _MEMCPY_SIDES.get(name) or (details.get("kind_src") in _HOST_MEMORY,
                                                    details.get("kind_dst") in _HOST_MEMORY)
                if sides == (True, True):
                    continue  # host to host: no device's transfer
                dest = details.get("dest", "")
                target = _HOST if sides[1] else f"/device:GPU:{dest}" if dest.isdigit() else device
                written = details.get("size", "")
                size = int(written) if written.isdigit() else 0
                tally.moved(_HOST if sides[0] else device, target, size, start, duration)
                if sides[0]:  # from host memory: pinned or pageable, for the steps' copies per GPU
                    memory = details.get("kind_src", "")
                    tally.steps.host_copies.append((target, memory if memory in _HOST_MEMORY else "", size, start,
                                                    duration))
            elif "kernel_details" in stats:
                tally.ran((plane.name, line.id), device, _gpu_op(name, str(stats.get("tf_op", ""))), start, duration,
                          False)


def _gpu_op(kernel: str, tf_op: str) -> str:
    """The op type of a GPU kernel: from its `tf_op` stat (`<node>:<type>`) when that names an op
    TensorFlow defines, else the kernel's name."""
    op = _kernels.op_type(tf_op.rpartition(":")[2]) if ":" in tf_op else ""
    return op if op and _tensorflow.op_def(op) is not None else kernel
