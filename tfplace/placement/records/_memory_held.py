"""What each device held, from the allocators' `MemoryAllocation`/`MemoryDeallocation` events replayed in order:
the peak inside the block (what was alive before it, and every allocation inside functions too), the rows held
at that moment by the user's line (`Held`), the lines whose bytes stay allocated step after step (`Growth`),
and what the device held when an allocation failed.

A free matches its allocation by allocator and address. What an allocator held before the block's first event is
its `bytes_allocated` then ("before"); a free of an address allocated before the block lowers it. An allocation
is told its line by `Places`: a function's node by its placement record, an eager op by its run's time, and
whether it lives inside a function call that had not returned ("intermediate") or was returned by one
("returned", the call's line).

Example:
    >>> from tfplace.placement.profile._model import Allocation
    >>> def event(at, freed, size, address, node, in_use):
    ...     return Allocation("GPU_0_bfc", at, freed, in_use, 0, 0, size, size, address, node, "output", 1, "[4]")
    >>> events = [event(1.0, False, 64, 0xA, "Tile", 1088), event(2.0, False, 16, 0xB, "Sum", 1104),
    ...           event(3.0, True, 64, 0xA, "", 1040)]
    >>> places = Places(nodes={"Tile": ("/device:GPU:0", "train.py:7", "Tile"), "Sum": ("/device:GPU:0",
    ...                        "train.py:8", "Sum")}, calls=((0.5, 2.5, "__inference_step_3", "train.py:12"),))
    >>> held = replay(events, places)["/device:GPU:0"]
    >>> held.peak_bytes, held.peak_node
    (1104, 'Sum at train.py:8')
    >>> [(row.kind, row.source, row.bytes) for row in held.at_peak]  # doctest: +NORMALIZE_WHITESPACE
    [('before', '', 1024), ('intermediate', 'train.py:7', 64), ('intermediate', 'train.py:8', 16)]
"""

from __future__ import annotations

import bisect
from typing import Callable, Iterator, Mapping, NamedTuple, Optional, Sequence

from tfplace._names import is_function_call
from tfplace.placement.profile._model import Allocation

__all__ = ["Held", "Growth", "Places", "DeviceHeld", "replay", "in_use", "allocator_devices", "grown", "dtype_name",
           "GROWTH_MIN_STEPS"]

GROWTH_MIN_STEPS = 3  # a line grows when its bytes rose over at least this many steps, and never fell
_SAMPLES = 24  # the most steps sampled to find growth (evenly spread): a long run costs what a short one does

# TensorFlow's DataType enum (types.proto) as the events write it, to the dtype's name
_DTYPES = {1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 7: "string", 8: "complex64",
           9: "int64", 10: "bool", 11: "qint8", 12: "quint8", 13: "qint32", 14: "bfloat16", 17: "uint16",
           18: "complex128", 19: "float16", 20: "resource", 21: "variant", 22: "uint32", 23: "uint64"}


class Held(NamedTuple):
    """Bytes a device held at one moment, one row per node (or eager line) and kind.

    Attributes:
      source: the user's line ("file.py:LINE"; "" where unknown).
      bytes: requested bytes summed (for "before", what the allocator held when the block opened).
      kind: "intermediate" (inside a function call that had not returned), "returned" (an output of a
        function call or eager op still alive), "variable" or "before" (alive when the block opened).
      op: the op type; node: TensorFlow's node name as the profiler writes it (an eager op's, its op type).
      dtype, shape: of the largest allocation of the row; count: the allocations summed.
    """

    source: str
    bytes: int
    kind: str
    op: str
    node: str
    dtype: str
    shape: tuple[int, ...]
    count: int  # type: ignore[assignment]  # (the contract's name; a tuple's count() method is not used)


class Growth(NamedTuple):
    """A line whose bytes stayed allocated step after step: bytes added per step over `steps` steps."""

    source: str
    bytes_per_step: int
    steps: int


class Places(NamedTuple):
    """What tells an allocation its device and line.

    Attributes:
      nodes: a function's node name -> (device, source, op type), from placement records.
      eager: eager op runs (start µs, end µs, device, source, op type), in order of start.
      calls: function call runs (start µs, end µs, function, the call's source), in order of start.
      variables: (device, source, bytes) of the variables the block created.
      cpus: the logical CPUs (which share the host's allocators).
    """

    nodes: Mapping[str, tuple[str, str, str]] = {}
    eager: Sequence[tuple[float, float, str, str, str]] = ()
    calls: Sequence[tuple[float, float, str, str]] = ()
    variables: frozenset[tuple[str, str, int]] = frozenset()
    cpus: tuple[str, ...] = ("/device:CPU:0",)


class DeviceHeld(NamedTuple):
    """One device's replay: its peak (requested bytes, with what was there before), what it held then, the node
    that reached it ("Tile at train.py:7"), bytes in use at the end, growth, and what it held after its last
    allocation (where an allocation failed, what the device held at the failure)."""

    peak_bytes: int
    at_peak: tuple[Held, ...]
    peak_node: str
    live_bytes: int
    growth: tuple[Growth, ...]
    at_last: tuple[Held, ...]


def dtype_name(enum: Optional[int]) -> str:
    """A DataType enum value's name (`1` -> "float32"; "" for None or one not known)."""
    return _DTYPES.get(enum, "") if enum is not None else ""


def allocator_devices(allocator: str, cpus: Sequence[str] = ("/device:CPU:0",)) -> tuple[str, ...]:
    """The devices an allocator serves, by its name: `GPU_<n>_bfc` one GPU; the CPU's allocators (`mklcpu`,
    `cpu`, `bfc_cpu_allocator_for_gpu`) and pinned host memory (`gpu_host_bfc`, `xla_gpu_host_bfc`) every logical
    CPU (`cpus`), which share them.

    >>> allocator_devices("GPU_1_bfc"), allocator_devices("mklcpu", ("/device:CPU:0", "/device:CPU:1"))
    (('/device:GPU:1',), ('/device:CPU:0', '/device:CPU:1'))
    """
    from tfplace._devices import canonical_name  # (which loads TensorFlow: the steps' thresholds import this module)

    head, _, rest = allocator.partition("_")
    if head == "GPU" and rest.partition("_")[0].isdigit():
        return (canonical_name(f"/device:GPU:{rest.partition('_')[0]}"),)
    if allocator in ("mklcpu", "cpu", "bfc_cpu_allocator_for_gpu") or allocator.endswith("host_bfc"):
        return tuple(canonical_name(cpu) for cpu in cpus)
    return ()


def _shape(text: str) -> tuple[int, ...]:
    """`[64,1024]` as (64, 1024); () for a scalar or a shape not written."""
    inside = text.strip("[] ")
    try:
        return tuple(int(d) for d in inside.split(",")) if inside else ()
    except ValueError:
        return ()


class _Attribution:
    """Each allocation's device and what it was at a moment (kind, line, op), from `Places`."""

    def __init__(self, places: Places) -> None:
        self.places = places
        self._eager_starts = [run[0] for run in places.eager]
        self._call_starts = [call[0] for call in places.calls]

    def device(self, event: Allocation, devices: tuple[str, ...]) -> str:
        """The device of an allocation of an allocator serving `devices` (its node's, where it says)."""
        if len(devices) > 1:
            placed = self.places.nodes.get(event.node)
            where = placed[0] if placed else (self._eager(event.start_us) or ("", "", ""))[0]
            if where in devices:
                return where
        return devices[0]

    def _eager(self, at: float) -> Optional[tuple[str, str, str]]:
        """(device, source, op) of the eager op running at `at`, if one was."""
        runs = self.places.eager
        i = bisect.bisect_right(self._eager_starts, at) - 1
        for j in range(i, max(i - 8, -1), -1):
            if runs[j][0] <= at <= runs[j][1]:
                return runs[j][2], runs[j][3], runs[j][4]
        return None

    def _call(self, at: float) -> Optional[tuple[float, float, str, str]]:
        """The innermost function call running at `at`, if one was."""
        calls = self.places.calls
        i = bisect.bisect_right(self._call_starts, at) - 1
        for j in range(i, max(i - 16, -1), -1):
            if calls[j][0] <= at <= calls[j][1]:
                return calls[j]
        return None

    def key(self, event: Allocation, device: str, now: float) -> tuple[str, str, str, str]:
        """(kind, source, op, node) of an allocation still alive at `now`."""
        node = event.node
        call = self._call(event.start_us)
        running = call is not None and call[1] >= now
        placed = self.places.nodes.get(node)
        if placed is not None:  # a function's node
            if running or call is None:
                return "intermediate", placed[1], placed[2], node
            return "returned", call[3] or placed[1], placed[2], node
        if call is not None and (is_function_call(node) or not node):
            return ("intermediate" if running else "returned"), call[3], node, node
        eager = self._eager(event.start_us)
        if eager is not None:
            kind = "variable" if (device, eager[1], event.requested_bytes) in self.places.variables else "returned"
            return kind, eager[1], eager[2], eager[2]  # (the op its record names, not a kernel: `_MklMatMul`)
        return ("intermediate" if running else "returned"), "", node, node


def _rows(alive: Sequence[Allocation], before: int, device: str, now: float, attribution: _Attribution,
          ) -> tuple[Held, ...]:
    """The rows of what was alive at `now`, most bytes first ("before" first of equal ones)."""
    rows: dict[tuple[str, str, str, str], list] = {}
    for event in alive:
        key = attribution.key(event, device, now)
        row = rows.setdefault(key, [0, 0, event])
        row[0] += event.requested_bytes
        row[1] += 1
        if event.requested_bytes > row[2].requested_bytes:
            row[2] = event
    found = [Held(source, size, kind, op, node, dtype_name(largest.dtype), _shape(largest.shape), count)
             for (kind, source, op, node), (size, count, largest) in rows.items()]
    if before > 0:
        found.append(Held("", before, "before", "", "", "", (), 0))
    return tuple(sorted(found, key=lambda row: (-row.bytes, row.kind != "before", row.source, row.node)))


class _Replay:
    """The allocators' events applied one at a time (`apply`): the bytes in use on each device (requested bytes,
    with what each allocator held before the block), and the allocations alive (a free matches by allocator and
    address). `device_of(event, devices)` says which of the devices its allocator serves an allocation is on."""

    def __init__(self, allocations: Sequence[Allocation], cpus: Sequence[str],
                 device_of: Callable[[Allocation, tuple[str, ...]], str]) -> None:
        self.allocations, self._cpus, self._device_of = allocations, cpus, device_of
        self.live: dict[str, int] = {}
        self._served: dict[str, tuple[str, ...]] = {}
        self._before: dict[str, int] = {}  # per allocator, what it held before the block, as far as not freed since
        self._base: dict[str, str] = {}  # per allocator, the device its "before" is counted on
        self._alive: dict[tuple[str, int], tuple[str, int]] = {}  # (allocator, address) -> (device, event index)

    def apply(self, index: int) -> str:
        """Applies event `index`: the device whose bytes it changed ("" for an allocator that serves none)."""
        event = self.allocations[index]
        name = event.allocator
        devices = self._served.get(name)
        if devices is None:  # its first event: what it held before
            devices = self._served[name] = allocator_devices(name, self._cpus)
            if devices:
                self._before[name] = max(event.bytes_allocated + (1 if event.freed else -1) * event.allocation_bytes, 0)
                self._base[name] = devices[0]
                self.live[devices[0]] = self.live.get(devices[0], 0) + self._before[name]
        if not devices:
            return ""
        key = (name, event.address)
        if not event.freed:
            device = self._device_of(event, devices)
            self._alive[key] = (device, index)
            self.live[device] = self.live.get(device, 0) + event.requested_bytes
            return device
        found = self._alive.pop(key, None)
        if found is not None:
            self.live[found[0]] -= self.allocations[found[1]].requested_bytes
            return found[0]
        size = min(event.allocation_bytes, self._before[name])  # an allocation made before the block
        self._before[name] -= size
        self.live[self._base[name]] -= size
        return self._base[name]

    def held(self, device: str) -> list[Allocation]:
        """The allocations alive on `device`."""
        return [self.allocations[index] for where, index in self._alive.values() if where == device]

    def before(self, device: str) -> int:
        """What the allocators whose "before" is counted on `device` held before the block, as far as not freed."""
        return sum(size for name, size in self._before.items() if self._base[name] == device)


def in_use(allocations: Sequence[Allocation], cpus: Sequence[str] = ("/device:CPU:0",),
           ) -> Iterator[tuple[Allocation, str, int]]:
    """Each event of an allocator that serves a device, with that device and its bytes in use after it (logical
    CPUs sharing an allocator counted on the first), as `replay` counts them."""
    replayed = _Replay(allocations, cpus, lambda event, devices: devices[0])
    for index, event in enumerate(allocations):
        device = replayed.apply(index)
        if device:
            yield event, device, replayed.live[device]


def replay(allocations: Sequence[Allocation], places: Places = Places(),
           boundaries: Sequence[float] = ()) -> dict[str, DeviceHeld]:
    """Each device's replay of the allocators' events (in order of time); `boundaries`, the starts of the block's
    steps, for growth."""
    attribution = _Attribution(places)
    first = _Replay(allocations, places.cpus, attribution.device)
    peak: dict[str, tuple[int, int]] = {}  # device -> (bytes, index of the event that reached them)
    last: dict[str, int] = {}  # device -> index of its last allocation
    for index, event in enumerate(allocations):
        device = first.apply(index)
        if device and not event.freed:
            last[device] = index
            if first.live[device] > peak.get(device, (-1, 0))[0]:
                peak[device] = (first.live[device], index)
    return _held(allocations, attribution, peak, last, first.live, boundaries)


def _held(allocations: Sequence[Allocation], attribution: _Attribution, peak: Mapping[str, tuple[int, int]],
          last: Mapping[str, int], live: Mapping[str, int], boundaries: Sequence[float]) -> dict[str, DeviceHeld]:
    """The second pass: what each device held at its peak, after its last allocation, and at the steps'
    boundaries."""
    moments = {index: device for device, (_, index) in peak.items()}
    ends = {index: device for device, index in last.items()}
    marks = list(_sampled(boundaries))
    samples: dict[str, list[dict[str, int]]] = {device: [] for device in peak}
    snapshots: dict[str, tuple[Held, ...]] = {}
    finals: dict[str, tuple[Held, ...]] = {}
    second = _Replay(allocations, attribution.places.cpus, attribution.device)

    def rows(device: str, now: float) -> tuple[Held, ...]:
        return _rows(second.held(device), second.before(device), device, now, attribution)

    mark = 0
    for index in range(len(allocations) + 1):  # (the last, past the events: the marks after them)
        until = allocations[index].start_us if index < len(allocations) else float("inf")
        while mark < len(marks) and until >= marks[mark]:  # bytes by line at each step's start before it
            for device in samples:
                samples[device].append(_by_line(rows(device, marks[mark])))
            mark += 1
        if index < len(allocations) and second.apply(index) and not allocations[index].freed:
            for held, moment in ((snapshots, moments.get(index)), (finals, ends.get(index))):
                if moment is not None:
                    held[moment] = rows(moment, allocations[index].start_us)
    found = {}
    for device, (size, index) in sorted(peak.items()):
        event = allocations[index]
        node = attribution.key(event, device, event.start_us)
        steps = _steps_between(boundaries, marks)
        name, line = node[3] or node[2], node[1] or "an unknown line"
        reached = f"{name} at {line}" if name else f"an allocation no node names, at {line}"
        found[device] = DeviceHeld(size, snapshots[device], reached, live[device], grown(samples[device], steps),
                                   finals[device])
    return found


def _by_line(rows: Sequence[Held]) -> dict[str, int]:
    """Bytes by line of what no running call holds (a step's own intermediates come and go)."""
    found: dict[str, int] = {}
    for row in rows:
        if row.kind != "intermediate":
            found[row.source] = found.get(row.source, 0) + row.bytes
    return found


def _sampled(boundaries: Sequence[float]) -> list[float]:
    """At most `_SAMPLES` of the steps' starts, evenly spread, the first and last kept."""
    if len(boundaries) <= _SAMPLES:
        return list(boundaries)
    step = (len(boundaries) - 1) / (_SAMPLES - 1)
    return [boundaries[round(k * step)] for k in range(_SAMPLES)]


def _steps_between(boundaries: Sequence[float], marks: Sequence[float]) -> list[int]:
    """How many steps lie between consecutive sampled marks."""
    positions = {at: k for k, at in enumerate(boundaries)}
    return [positions[b] - positions[a] for a, b in zip(marks, marks[1:])]


def grown(samples: Sequence[Mapping[str, int]], steps: Sequence[int]) -> tuple[Growth, ...]:
    """The lines whose bytes rose from sample to sample (bytes by line at the steps' starts, `steps` between
    consecutive samples) and never fell, most bytes per step first.

    >>> grown([{"a.py:3": 0}, {"a.py:3": 4}, {"a.py:3": 8}, {"a.py:3": 12}], [1, 1, 1])
    (Growth(source='a.py:3', bytes_per_step=4, steps=3),)
    """
    if len(samples) < GROWTH_MIN_STEPS + 1:
        return ()
    found = []
    for source in set().union(*samples):
        values = [sample.get(source, 0) for sample in samples]
        rises = sum(b > a for a, b in zip(values, values[1:]))
        if values[-1] > values[0] and all(b >= a for a, b in zip(values, values[1:])) \
                and rises >= max(GROWTH_MIN_STEPS, 0.75 * (len(values) - 1)):
            found.append(Growth(source, round((values[-1] - values[0]) / sum(steps)), sum(steps)))
    return tuple(sorted(found, key=lambda g: (-g.bytes_per_step, g.source)))
