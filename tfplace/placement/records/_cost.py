"""Where the time and bytes went: transfers grouped, and per device executions and busy time.

`transfers()` groups a log's copies into one `Transfer` row per distinct transfer;
`cost()` adds up executions per device and op (eager records, plus every node of
each function call) and transfers per direction, with the profiler's times when
the capture ran with `timing=True` (`tfplace.placement.profile`). Without timing,
or when another profiler session held TensorFlow's profiler, every time is None:
never a guess presented as a figure.

Example:
    >>> from tfplace.placement.records._records import CopyRecord, PlacementRecord
    >>> from tfplace.placement.records import _cost
    >>> copy = CopyRecord("MatMul", 0, "/device:CPU:0", "/device:CPU:1", "train.py:3", dtype="float32", bytes=64)
    >>> [(t.op, t.count, t.total_bytes) for t in _cost.transfers([copy, copy])]
    [('MatMul', 2, 128)]
    >>> _cost.cost([PlacementRecord("MatMul", "", "/device:CPU:1", "execute")], [copy], {}).devices
    {'/device:CPU:1': DeviceCost(executions=1, busy_us=None, share=None)}
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping, NamedTuple, Optional, Sequence

from tfplace.placement.records._records import ARGUMENT_OPS, CopyRecord, Kind, PlacementRecord
from tfplace._names import is_function_call
from tfplace.placement.profile._model import Timing

__all__ = ["Transfer", "DeviceCost", "OpCost", "DirectionCost", "Cost", "transfers", "cost"]


class Transfer(NamedTuple):
    """One distinct transfer of a log, with how often it ran.

    Attributes:
      kind, function, node, op, input_index, from_device, to_device, source, tensor,
        dtype: as in `CopyRecord`.
      count: how many times it ran in the block.
      bytes: bytes per transfer (None when the shape is not known).
      total_bytes: `count * bytes` (None when `bytes` is).
      time_us: with timing, the time of its `_Send` node in the profile (a function's
        transfer; between logical CPUs a handover, on GPUs the send's side of the copy),
        else None.
      lower_bound: True when `count` counts one per call of a loop body's transfer,
        which ran at least that often.
      call: the user's line of the (first) call of `function` that ran it ("" for eager).
    """

    kind: str
    function: str
    node: str
    op: str
    input_index: int
    from_device: str
    to_device: str
    source: str
    tensor: str
    dtype: str
    count: int  # type: ignore[assignment]  # a field named as tuple.count(), which it hides (mypy: an override)
    bytes: Optional[int]
    total_bytes: Optional[int]
    time_us: Optional[float] = None
    lower_bound: bool = False
    call: str = ""

    def to_json(self) -> dict[str, Any]:
        return self._asdict()


class DeviceCost(NamedTuple):
    """Per device: op executions, busy time (µs) and its share of all devices' busy time."""

    executions: int
    busy_us: Optional[float]
    share: Optional[float]


class OpCost(NamedTuple):
    """Per (device, op): executions and time (µs)."""

    executions: int
    time_us: Optional[float]


class DirectionCost(NamedTuple):
    """Per (from_device, to_device): transfers, bytes (of those whose size is known) and time (µs)."""

    count: int  # type: ignore[assignment]  # a field named as tuple.count(), which it hides (mypy: an override)
    bytes: Optional[int]
    time_us: Optional[float]


class Cost(NamedTuple):
    """Where the time and bytes of a block went (`PlacementLog.cost()`).

    Attributes:
      devices: canonical device name -> `DeviceCost`.
      ops: (device, op) -> `OpCost`.
      directions: (from_device, to_device) -> `DirectionCost`.
      timed: True when the times come from TensorFlow's profiler.
      missing: what is missing and why ("" when nothing is).
    """

    devices: dict[str, DeviceCost]
    ops: dict[tuple[str, str], OpCost]
    directions: dict[tuple[str, str], DirectionCost]
    timed: bool = False
    missing: str = ""

    def to_json(self) -> dict[str, Any]:
        """JSON-ready data: lists of objects, keys spelled out."""
        return {"timed": self.timed, "missing": self.missing,
                "devices": [{"device": d, **c._asdict()} for d, c in self.devices.items()],
                "ops": [{"device": d, "op": o, **c._asdict()} for (d, o), c in self.ops.items()],
                "directions": [{"from_device": f, "to_device": t, **c._asdict()}
                               for (f, t), c in self.directions.items()]}


def _key(copy: CopyRecord) -> tuple:
    return (copy.kind, copy.function, copy.node, copy.op, copy.input_index, copy.from_device, copy.to_device,
            copy.source, copy.tensor, copy.dtype, copy.bytes, copy.in_loop)


def transfers(copies: Iterable[CopyRecord], timing: Optional[Timing] = None) -> list["Transfer"]:
    """One `Transfer` per distinct transfer in `copies`, most total bytes first (unknown sizes last,
    most frequent first among them). With `timing` (the block's profile), a transfer in a loop body
    counts the `_Send` executions the profile saw between its producer and its consumer (a loop's
    exit runs its sends once more per run, without a value), and every function transfer gets their time."""
    counts = Counter(_key(c) for c in copies)
    calls: dict[tuple, str] = {}
    for copy in copies:
        if copy.call:
            calls.setdefault(_key(copy), copy.call)
    rows = []
    for key, n in counts.items():
        kind, function, node, op, index, source_device, target, source, tensor, dtype, size, in_loop = key
        ran = timing.sends.get((tensor.rpartition(":")[0], node)) if timing is not None and kind == "function" else None
        if ran and in_loop:
            n, in_loop = ran.executions, False
        rows.append(Transfer(kind, function, node, op, index, source_device, target, source, tensor, dtype, n, size,
                             None if size is None else size * n, ran.us if ran else None, in_loop, calls.get(key, "")))
    return sorted(rows, key=lambda t: (t.total_bytes is None, -(t.total_bytes or 0), -t.count))


def cost(records: Sequence[PlacementRecord], copies: Sequence[CopyRecord], runs: Mapping[tuple[str, str, str], int],
         timing: Optional[Timing] = None, missing: str = "") -> Cost:
    """Executions per device and op, transfers per direction, and with `timing` (the block's profile) the
    profiler's executions and times.

    Args:
      records: the log's records ("execute" ones count one execution each).
      copies: the log's copies.
      runs: (device, op, category) -> executions of function nodes (each call's nodes; the
        category of `tfplace.placement.records._groups`).
      timing: the profile of the block, or None.
      missing: why there is no timing although it was asked for ("" otherwise).
    """
    executions: Counter = Counter()
    for (device, op, _), n in runs.items():
        executions[(device, op)] += n
    executions.update((r.device, r.op) for r in records if r.kind == Kind.EXECUTE and r.op not in ARGUMENT_OPS
                      and not is_function_call(r.op))
    directions: dict[tuple[str, str], list[CopyRecord]] = {}
    for copy in copies:
        directions.setdefault((copy.from_device, copy.to_device), []).append(copy)
    moved = {}
    for key, group in directions.items():
        sizes = [c.bytes for c in group if c.bytes is not None]
        measured = timing.transfers.get(key) if timing is not None else None
        moved[key] = DirectionCost(len(group), sum(sizes) if sizes else None, measured.us if measured else None)
    if timing is None:
        per_device: Counter = Counter()
        for (device, _), n in executions.items():
            per_device[device] += n
        return Cost({d: DeviceCost(n, None, None) for d, n in sorted(per_device.items())},
                    {key: OpCost(n, None) for key, n in sorted(executions.items())}, moved, False, missing)
    total = sum(device.us for device in timing.devices.values()) or 0.0
    devices = {d: DeviceCost(n, busy, busy / total if total else None)
               for d, (n, busy) in sorted(timing.devices.items())}
    ops = {key: OpCost(n, time) for key, (n, time) in sorted(timing.ops.items())}
    return Cost(devices, ops, moved, True, missing)
