"""What a profile says, as typed data: `Timing` and the records it holds (`tfplace.placement.profile._xspace`
reads an `XSpace` into it; steps, costs, timelines and reports read it).

Times are microseconds on the profile's own clock; devices are canonical names.

Example:
    >>> timing = Timing.empty()
    >>> timing.devices, timing.wall_us
    ({}, 0.0)
    >>> OpTime(3, 12.5).us
    12.5
"""

from __future__ import annotations

import dataclasses
from array import array
from typing import Iterator, NamedTuple, Optional, Sequence, overload

from tfplace.placement.profile._step_events import StepEvents

__all__ = ["Allocation", "CallRun", "Move", "OpRun", "OpTime", "Runs", "Timing", "TransferTime"]


class OpTime(NamedTuple):
    """Executions and busy time (µs) of one device, op or send."""

    executions: int
    us: float


class TransferTime(NamedTuple):
    """Transfers in one direction: how many, their bytes (0 where the profile does not say), their time (µs)."""

    copies: int
    bytes: int
    us: float


class OpRun(NamedTuple):
    """One counted run of an op (a kernel on a GPU): its device, op type, start and length (µs), the line
    (thread or stream) it ran on, as a number, and the index of its eager op among the capture's eager records
    (-1 for a function's node or a kernel)."""

    device: str
    op: str
    start_us: float
    duration_us: float
    line: int
    eager_index: int


class Runs(Sequence[OpRun]):
    """Every counted run, held as columns and read as `OpRun`s (a long profile has hundreds of thousands: as
    columns they are a few objects, which Python's garbage collector does not walk one by one).

    >>> runs = Runs()
    >>> runs.append(OpRun("/device:CPU:0", "MatMul", 10.0, 2.5, 0, -1))
    >>> len(runs), runs[0].op, [run.duration_us for run in runs]
    (1, 'MatMul', [2.5])
    """

    def __init__(self) -> None:
        self._devices: list[str] = []
        self._ops: list[str] = []
        self._starts, self._durations = array("d"), array("d")
        self._lines, self._eager = array("q"), array("q")

    def append(self, run: OpRun) -> None:
        self._devices.append(run.device)
        self._ops.append(run.op)
        self._starts.append(run.start_us)
        self._durations.append(run.duration_us)
        self._lines.append(run.line)
        self._eager.append(run.eager_index)

    def __len__(self) -> int:
        return len(self._starts)

    @overload
    def __getitem__(self, index: int) -> OpRun: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[OpRun]: ...

    def __getitem__(self, index: "int | slice") -> "OpRun | Sequence[OpRun]":
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return OpRun(self._devices[index], self._ops[index], self._starts[index], self._durations[index],
                     self._lines[index], self._eager[index])

    def __iter__(self) -> Iterator[OpRun]:
        return map(OpRun._make, zip(self._devices, self._ops, self._starts, self._durations, self._lines,
                                    self._eager))

    def spans(self) -> list[tuple[float, float]]:
        """Each run's (start, µs), in order."""
        return list(zip(self._starts, self._durations))

    def per_device(self) -> dict[str, list[tuple[float, float]]]:
        """Device -> its runs' (start, µs)."""
        found: dict[str, list[tuple[float, float]]] = {}
        for device, start, duration in zip(self._devices, self._starts, self._durations):
            found.setdefault(device, []).append((start, duration))
        return found

    def of_eager(self) -> dict[int, tuple[float, float]]:
        """An eager op's index among the capture's eager records -> its run's (start, µs), where one ran."""
        return {index: (start, duration) for index, start, duration in zip(self._eager, self._starts,
                                                                           self._durations) if index >= 0}


class Move(NamedTuple):
    """One transfer between devices: from, to, start and length (µs)."""

    source: str
    target: str
    start_us: float
    duration_us: float


class CallRun(NamedTuple):
    """One eager call of a function (`__inference_f_12`): start and length (µs); not busy time."""

    start_us: float
    duration_us: float
    function: str


class Allocation(NamedTuple):
    """One `MemoryAllocation` or `MemoryDeallocation` event of a TensorFlow (or XLA) BFC allocator.

    Attributes:
      allocator: the allocator's name (`GPU_0_bfc`, `mklcpu`, `bfc_cpu_allocator_for_gpu`).
      start_us: when it happened.
      freed: True for a deallocation.
      bytes_allocated: the allocator's bytes in use after it.
      bytes_reserved: bytes the allocator holds reserved (XProf's peak adds them).
      peak_bytes_in_use: the allocator's peak over its lifetime, as it reports it.
      requested_bytes: what the op asked for (0 on a free).
      allocation_bytes: the chunk given (up to twice the request).
      address: the chunk's address (a free matches its allocation by it).
      node: the node that allocated as the placer names it (`tf_op`; "" on frees and where not written).
      region: `output`, `temp` or "".
      dtype: the DataType's enum value written, or None.
      shape: the shape as written (`[64,1024]`), "" where not.
    """

    allocator: str
    start_us: float
    freed: bool
    bytes_allocated: int
    bytes_reserved: int
    peak_bytes_in_use: int
    requested_bytes: int
    allocation_bytes: int
    address: int
    node: str
    region: str
    dtype: Optional[int]
    shape: str


@dataclasses.dataclass(frozen=True)
class Timing:
    """What a profile says about a block.

    Attributes:
      devices: canonical device name -> executions and busy µs.
      ops: (device, op type) -> executions and µs; on a GPU, kernels (an op may launch several), under the op
        type of the launching op where the profile names it, else the kernel's name.
      transfers: (from device, to device) -> count, bytes (0 where unknown) and µs.
      nodes: function node name -> executions (`_Send` and `_Recv` nodes included).
      sends: (producer node, consumer node) -> executions and µs of the `_Send` between them (in a loop, the
        send at the loop's exit runs once more per run, carrying no value).
      wall_us: the span of the counted events.
      threads: how many thread and stream lines had counted work.
      eager: (device, op type) -> executions of eager ops seen on the host (for a device timed from its own
        plane, not a part of `ops`).
      unattributed: events whose device is unknown (eager events beyond the records passed, nodes without a
        device).
      runs: each counted run, for a timeline and the steps' phases.
      moves: each transfer with its start and time.
      calls: each eager function call, in order of start.
      steps: the events that tell steps (`StepEvents`).
      allocations: the allocators' events, in order of time.
    """

    devices: dict[str, OpTime]
    ops: dict[tuple[str, str], OpTime]
    transfers: dict[tuple[str, str], TransferTime]
    nodes: dict[str, int]
    sends: dict[tuple[str, str], OpTime]
    wall_us: float
    threads: int
    eager: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    unattributed: int = 0
    runs: Runs = dataclasses.field(default_factory=Runs)
    moves: tuple[Move, ...] = ()
    calls: tuple[CallRun, ...] = ()
    steps: StepEvents = dataclasses.field(default_factory=StepEvents)
    allocations: tuple[Allocation, ...] = ()

    @classmethod
    def empty(cls) -> "Timing":
        """A profile that saw nothing."""
        return cls({}, {}, {}, {}, {}, 0.0, 0)
