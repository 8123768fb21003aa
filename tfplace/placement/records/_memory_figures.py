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

from tfplace._names import size_text
from tfplace.placement.profile._model import Allocation
from tfplace.placement.records._memory_held import Growth, Held, allocator_devices

__all__ = ["AllocatorPeak", "DeviceMemory", "Memory", "OutOfMemory", "Held", "Growth", "allocator_peaks", "by_line",
           "held_lines", "NOT_COUNTED", "renamed", "assert_below", "parse_size"]

NOT_COUNTED = "memory was not counted: capture with capture_placement(memory=True)"


class DeviceMemory(NamedTuple):
    """One device's memory during a block.

    Attributes:
      peak_bytes: the most bytes the device held at once inside the block, everything counted (what was alive
        when the block opened, variables, eager tensors, every allocation inside functions the allocators
        reported), as requested bytes; the rows of `at_peak` sum to it.
      live_bytes: those still held when the block ended.
      top: `at_peak` summed by line, `(source, bytes)` pairs, most first (source "" where unknown).
      allocator_current_bytes: TensorFlow's allocator's figure at the block's end (GPUs), else None.
      allocator_peak_bytes: its peak during the block (GPUs, reset at the start), else None.
      at_peak: what the device held at its peak, `Held` rows, most bytes first.
      growth: the lines whose bytes stayed allocated step after step (`Growth`).
      coverage: "" when every allocation on the device was seen, else what was not and how to see it.
      peak_node: the node (or eager op) whose allocation reached the peak, with its line.
    """

    peak_bytes: int
    live_bytes: int
    top: tuple[tuple[str, int], ...]
    allocator_current_bytes: Optional[int] = None
    allocator_peak_bytes: Optional[int] = None
    at_peak: tuple[Held, ...] = ()
    growth: tuple[Growth, ...] = ()
    coverage: str = ""
    peak_node: str = ""

    def to_json(self, device: str) -> dict[str, Any]:
        """The figures as JSON-ready data, keyed by their names, with `device`."""
        return {"device": device, "peak_bytes": self.peak_bytes, "live_bytes": self.live_bytes,
                "top": [[source, size] for source, size in self.top],
                "allocator_current_bytes": self.allocator_current_bytes,
                "allocator_peak_bytes": self.allocator_peak_bytes, "at_peak": [_held_json(h) for h in self.at_peak],
                "growth": [g._asdict() for g in self.growth], "coverage": self.coverage, "peak_node": self.peak_node}


class AllocatorPeak(NamedTuple):
    """One allocator's own peak inside the block: the largest `bytes_allocated + bytes_reserved` of its
    `MemoryAllocation`/`MemoryDeallocation` events, as XProf's memory profile computes it, and the devices it
    serves."""

    allocator: str
    peak_bytes: int
    devices: tuple[str, ...]


class OutOfMemory(NamedTuple):
    """Where an allocation failed (a `ResourceExhaustedError` raised inside the block): the request (read from
    TensorFlow's message: bytes, dtype, shape, the node's op type; `source` the user's line of the node or eager
    op), the allocator, and what the device held at the failure (`Held` rows, most bytes first)."""

    device: str
    requested_bytes: int
    dtype: str
    shape: tuple[int, ...]
    op: str
    source: str
    allocator: str
    held: tuple[Held, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return self._asdict() | {"shape": list(self.shape), "held": [_held_json(h) for h in self.held]}

    def lines(self) -> list[str]:
        """What failed and what the device held, as text (the error's note, the report's lines)."""
        what = f"{self.dtype or 'a tensor'}{list(self.shape) if self.shape else ''}".replace(" ", "")
        held = sum(row.bytes for row in self.held)
        found = [f"out of memory on {self.device or 'a device'}: {size_text(self.requested_bytes)} requested for "
                 f"{what} by {self.op or 'an op'} at {self.source or 'an unknown line'}"
                 f"{' (allocator ' + self.allocator + ')' if self.allocator else ''}; the device held "
                 f"{size_text(held)}" + (", largest first:" if self.held else " as far as seen")]
        return found + held_lines(self.held)


def held_lines(rows: Sequence[Held], count: int = 8) -> list[str]:
    """`Held` rows as text, the largest `count`, and how many more."""
    found = [f"  {size_text(row.bytes):>10}  {row.source or 'an unknown line'}  {row.kind}"
             f"{(' ' + row.node) if row.node and row.node != row.op else ''}{(' ' + row.op) if row.op else ''}"
             f"{' ' + row.dtype if row.dtype else ''}{str(list(row.shape)).replace(' ', '') if row.shape else ''}"
             f"{' x' + str(row.count) if row.count > 1 else ''}" for row in rows[:count]]
    if len(rows) > count:
        found.append(f"  ... {len(rows) - count} more rows, {size_text(sum(r.bytes for r in rows[count:]))}")
    return found


def _held_json(row: Held) -> dict[str, Any]:
    return row._asdict() | {"shape": list(row.shape)}


class Memory(NamedTuple):
    """What a memory capture counted: `devices` maps each canonical device name to its `DeviceMemory`.

    Attributes:
      devices: canonical device name -> `DeviceMemory`.
      tracked: how many tensors and variables the census counted (returned by eager ops and calls, created).
      note: which figure is which, or why there are none.
      allocators: each allocator's own peak, where the profile holds its events.
      oom: where an allocation failed inside the block (`OutOfMemory`), else None.
    """

    devices: dict[str, DeviceMemory]
    tracked: int = 0
    note: str = NOT_COUNTED
    allocators: tuple[AllocatorPeak, ...] = ()
    oom: Optional[OutOfMemory] = None

    def to_json(self) -> dict[str, Any]:
        """The figures as JSON-ready data (keys are the attribute names)."""
        return {"note": self.note, "tracked": self.tracked,
                "devices": [m.to_json(device) for device, m in self.devices.items()],
                "allocators": [a._asdict() | {"devices": list(a.devices)} for a in self.allocators],
                "oom": self.oom.to_json() if self.oom is not None else None}

    def lines(self) -> list[str]:
        """The figures as text: per device its peak, the lines held at it, growth and coverage (what reports
        print)."""
        if not self.devices:
            return [f"  ({self.note})"]
        found = []
        for device, m in self.devices.items():
            allocator = (f"; TensorFlow's allocator: {size_text(m.allocator_current_bytes)} at the end, peak "
                         f"{size_text(m.allocator_peak_bytes)}" if m.allocator_peak_bytes is not None else "")
            found.append(f"  {device}: peak {size_text(m.peak_bytes)}"
                         f"{' (reached by ' + m.peak_node + ')' if m.peak_node else ''}, held at the end "
                         f"{size_text(m.live_bytes)}{allocator}")
            if m.at_peak:
                found += ["    held at the peak:"] + ["  " + line for line in held_lines(m.at_peak, 6)]
            found += [f"    grows {size_text(g.bytes_per_step)} per step over {g.steps} steps: "
                      f"{g.source or 'an unknown line'}" for g in m.growth]
            if m.coverage:
                found.append(f"    not seen: {m.coverage}")
        found += [f"  allocator {a.allocator} ({', '.join(a.devices) or 'its devices unknown'}): peak "
                  f"{size_text(a.peak_bytes)}" for a in self.allocators]
        if self.oom is not None:
            found += ["  " + line for line in self.oom.lines()]
        return found + [f"  ({self.note})"]


def allocator_peaks(allocations: Sequence[Allocation],
                    cpus: Sequence[str] = ("/device:CPU:0",)) -> tuple[AllocatorPeak, ...]:
    """Per allocator its own peak: the largest `bytes_allocated + bytes_reserved` of its events (XProf's)."""
    peaks: dict[str, int] = {}
    for event in allocations:
        peaks[event.allocator] = max(peaks.get(event.allocator, 0), event.bytes_allocated + event.bytes_reserved)
    return tuple(AllocatorPeak(name, peak, allocator_devices(name, cpus)) for name, peak in sorted(peaks.items()))


def by_line(rows: Sequence[Held]) -> tuple[tuple[str, int], ...]:
    """`at_peak` rows summed by line, most bytes first (`DeviceMemory.top`)."""
    found: dict[str, int] = {}
    for row in rows:
        found[row.source] = found.get(row.source, 0) + row.bytes
    return tuple(sorted(found.items(), key=lambda item: (-item[1], item[0])))


_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def renamed(found: Memory, rename: Optional[Callable[[str], str]]) -> Memory:
    """`found` with the lines of its top tensors renamed (as IPython names a cell's lines)."""
    if rename is None:
        return found
    def rows(held: Sequence[Held]) -> tuple[Held, ...]:
        return tuple(row._replace(source=rename(row.source) if row.source else "") for row in held)

    def growth(found: Sequence[Growth]) -> tuple[Growth, ...]:
        return tuple(g._replace(source=rename(g.source) if g.source else "") for g in found)

    oom = found.oom._replace(held=rows(found.oom.held), source=rename(found.oom.source) if found.oom.source else "") \
        if found.oom is not None else None
    return found._replace(devices={device: m._replace(top=tuple((rename(source) if source else "", size)
                                                               for source, size in m.top),
                                                      at_peak=rows(m.at_peak), growth=growth(m.growth),
                                                      peak_node=_renamed_node(m.peak_node, rename))
                                   for device, m in found.devices.items()}, oom=oom)


def _renamed_node(text: str, rename: Callable[[str], str]) -> str:
    """"Tile at <ipython-input-3>:7" with its line renamed."""
    node, at, source = text.rpartition(" at ")
    return f"{node}{at}{rename(source)}" if at and ":" in source else text


def assert_below(found: Memory, device: str, limit: Union[int, float, str]) -> None:
    """Raises AssertionError, with the lines holding most bytes, unless the peak of `found` on `device`
    (any accepted spelling) stayed below `limit` (`PlacementLog.assert_memory_below`)."""
    __tracebackhide__ = True
    from tfplace._devices import parse_device  # (which loads TensorFlow: the out-of-memory parser imports this)

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
