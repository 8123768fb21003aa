"""What a memory capture counted, per device (`Memory`, `DeviceMemory`), and how it is read: sizes as people
write them (`parse_size`), the assertion on a device's peak (`assert_below`). The census that
counts them is `tfplace.placement.taking._memory`.

Example:
    >>> from tfplace.placement.records._memory_figures import parse_size
    >>> parse_size("2 GiB", "example")
    2147483648
"""

from __future__ import annotations

import re
from typing import Any, Callable, NamedTuple, Optional, Sequence, Union

from tfplace._devices import canonical_name, parse_device
from tfplace._names import size_text
from tfplace.placement.profile._model import Allocation

__all__ = ["AllocatorPeak", "DeviceMemory", "Memory", "allocator_peaks", "allocator_devices", "allocated_peaks",
           "NOT_COUNTED", "renamed", "assert_below", "parse_size"]

NOT_COUNTED = "memory was not counted: capture with capture_placement(memory=True)"


class DeviceMemory(NamedTuple):
    """One device's memory during a block.

    Attributes:
      peak_bytes: the most bytes of counted tensors and variables alive at once.
      live_bytes: those still alive when the block ended.
      top: the lines holding most bytes, `(source, bytes)` pairs, most first (each line's own peak;
        source "" when the capture had no sources or the line is unknown).
      allocator_current_bytes: TensorFlow's allocator's figure at the block's end (GPUs), else None.
      allocator_peak_bytes: its peak during the block (GPUs, reset at the start), else None.
    """

    peak_bytes: int
    live_bytes: int
    top: tuple[tuple[str, int], ...]
    allocator_current_bytes: Optional[int] = None
    allocator_peak_bytes: Optional[int] = None


class AllocatorPeak(NamedTuple):
    """One allocator's own peak inside the block: the largest `bytes_allocated + bytes_reserved` of its
    `MemoryAllocation`/`MemoryDeallocation` events, as XProf's memory profile computes it, and the devices it
    serves."""

    allocator: str
    peak_bytes: int
    devices: tuple[str, ...]


class Memory(NamedTuple):
    """What a memory capture counted: `devices` maps each canonical device name to its `DeviceMemory`.

    Attributes:
      devices: canonical device name -> `DeviceMemory`.
      tracked: how many tensors and variables were counted.
      note: which figure is which (tfplace's count, TensorFlow's allocator's), or why there are none.
      allocators: each allocator's own peak, where the profile holds its events.
    """

    devices: dict[str, DeviceMemory]
    tracked: int = 0
    note: str = NOT_COUNTED
    allocators: tuple[AllocatorPeak, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The figures as JSON-ready data."""
        return {"note": self.note, "tracked": self.tracked,
                "devices": [{"device": device, "peak_bytes": m.peak_bytes, "live_bytes": m.live_bytes,
                             "top": [[source, size] for source, size in m.top],
                             "allocator_current_bytes": m.allocator_current_bytes,
                             "allocator_peak_bytes": m.allocator_peak_bytes} for device, m in self.devices.items()],
                "allocators": [a._asdict() | {"devices": list(a.devices)} for a in self.allocators]}

    def lines(self) -> list[str]:
        """The figures as text, a device a line, then its top lines (what reports print)."""
        if not self.devices:
            return [f"  ({self.note})"]
        found = []
        for device, m in self.devices.items():
            allocator = (f"; TensorFlow's allocator: {size_text(m.allocator_current_bytes)} at the end, peak "
                         f"{size_text(m.allocator_peak_bytes)}" if m.allocator_peak_bytes is not None else "")
            found.append(f"  {device}: peak {size_text(m.peak_bytes)}, live at the end {size_text(m.live_bytes)}"
                         f"{allocator}")
            found += [f"      {source or 'an unknown line'}  {size_text(size)}" for source, size in m.top]
        found += [f"  allocator {a.allocator} ({', '.join(a.devices) or 'its devices unknown'}): peak "
                  f"{size_text(a.peak_bytes)}" for a in self.allocators]
        return found + [f"  ({self.note})"]


def allocator_devices(allocator: str, cpus: Sequence[str] = ("/device:CPU:0",)) -> tuple[str, ...]:
    """The devices an allocator serves, by its name: `GPU_<n>_bfc` one GPU; the CPU's allocators (`mklcpu`,
    `cpu`, `bfc_cpu_allocator_for_gpu`) and pinned host memory (`gpu_host_bfc`, `xla_gpu_host_bfc`) every logical
    CPU (`cpus`), which share them."""
    head, _, rest = allocator.partition("_")
    if head == "GPU" and rest.partition("_")[0].isdigit():
        return (canonical_name(f"/device:GPU:{rest.partition('_')[0]}"),)
    if allocator in ("mklcpu", "cpu", "bfc_cpu_allocator_for_gpu") or allocator.endswith("host_bfc"):
        return tuple(canonical_name(cpu) for cpu in cpus)
    return ()


def allocator_peaks(allocations: Sequence[Allocation],
                    cpus: Sequence[str] = ("/device:CPU:0",)) -> tuple[AllocatorPeak, ...]:
    """Per allocator its own peak: the largest `bytes_allocated + bytes_reserved` of its events (XProf's)."""
    peaks: dict[str, int] = {}
    for event in allocations:
        peaks[event.allocator] = max(peaks.get(event.allocator, 0), event.bytes_allocated + event.bytes_reserved)
    return tuple(AllocatorPeak(name, peak, allocator_devices(name, cpus)) for name, peak in sorted(peaks.items()))


def allocated_peaks(allocations: Sequence[Allocation], cpus: Sequence[str] = ("/device:CPU:0",)) -> dict[str, int]:
    """Per device an allocator serves alone (not logical CPUs sharing one), the most requested bytes that
    allocations made inside the profile held at once (inside functions too; a free matches its allocation by
    address)."""
    live: dict[str, int] = {}
    peak: dict[str, int] = {}
    held: dict[tuple[str, int], tuple[str, int]] = {}  # (allocator, address) -> (device, requested bytes)
    for event in allocations:
        devices = allocator_devices(event.allocator, cpus)
        if len(devices) != 1:
            continue
        key = (event.allocator, event.address)
        if event.freed:
            device, size = held.pop(key, ("", 0))
            if device:
                live[device] -= size
        else:
            held[key] = (devices[0], event.requested_bytes)
            live[devices[0]] = live.get(devices[0], 0) + event.requested_bytes
            peak[devices[0]] = max(peak.get(devices[0], 0), live[devices[0]])
    return peak


_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def renamed(found: Memory, rename: Optional[Callable[[str], str]]) -> Memory:
    """`found` with the lines of its top tensors renamed (as IPython names a cell's lines)."""
    if rename is None:
        return found
    return found._replace(devices={device: m._replace(top=tuple((rename(source) if source else "", size)
                                                               for source, size in m.top))
                                   for device, m in found.devices.items()})


def assert_below(found: Memory, device: str, limit: Union[int, float, str]) -> None:
    """Raises AssertionError, with the lines holding most bytes, unless the peak of `found` on `device`
    (any accepted spelling) stayed below `limit` (`PlacementLog.assert_memory_below`)."""
    __tracebackhide__ = True
    where = parse_device(device, origin="PlacementLog.assert_memory_below's argument device").name
    allowed = parse_size(limit, "PlacementLog.assert_memory_below's argument limit")
    figures = found.devices.get(where)
    if figures is None or figures.peak_bytes < allowed:
        return
    rows = "\n".join(f"    {size_text(size):>10}  {source or 'an unknown line'}" for source, size in figures.top)
    raise AssertionError(
        f"expected the block's memory on {where} to stay below {size_text(allowed)} ({allowed} bytes), but "
        f"it peaked at {size_text(figures.peak_bytes)} ({figures.peak_bytes} bytes; "
        f"{size_text(figures.live_bytes)} still live at the end). The lines holding most:\n{rows}\n"
        f"  ({found.note})")


def parse_size(limit: Union[int, float, str], origin: str) -> int:
    """Bytes from `limit`: a number of bytes, or a string such as "2 GiB", "512MiB", "1.5 GB", "100 kB".

    Raises:
      ValueError: anything else, naming what was received, what is allowed and `origin`.
    """
    if isinstance(limit, bool):
        limit = str(limit)
    if isinstance(limit, (int, float)) and limit >= 0:
        return int(limit)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", limit) if isinstance(limit, str) else None
    unit = match[2].lower() if match else ""
    if match is None or (unit and unit not in _UNITS):
        raise ValueError(f"{origin} received {limit!r}: allowed are a number of bytes >= 0 or a string such as "
                         f"'2 GiB', '512 MiB', '1.5 GB' "
                         f"(units {', '.join(['B', 'kB', 'MB', 'GB', 'TB', 'KiB', 'MiB', 'GiB', 'TiB'])})")
    return int(float(match[1]) * _UNITS[unit or "b"])
