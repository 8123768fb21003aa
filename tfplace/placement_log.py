"""`PlacementLog`: placement events as data, with queries and assertions.

Example:
    >>> from tfplace.placement_log import PlacementLog
    >>> log = PlacementLog.from_text(
    ...     "Executing op MatMul in device /job:localhost/replica:0/task:0/device:CPU:0\\n")
    >>> log.devices_for("MatMul"), log.ops_on("cpu:0")
    (('/device:CPU:0',), ('MatMul',))
    >>> log.assert_placed("MatMul", "/job:localhost/replica:0/task:0/device:CPU:0")
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable, Optional

from tfplace.devices import parse_device
from tfplace.parsing import CopyRecord, Parsed, PlacementRecord, parse_placement

__all__ = ["PlacementLog"]

_TABLE_ROWS = 20
_PLUMBING = frozenset({"_Arg", "_Retval", "_DeviceArg", "_DeviceRetval"})


class PlacementLog:
    """The placement events of a block.

    Attributes:
      records: `PlacementRecord`s (op, name, device, kind, line) in order.
      copies: `CopyRecord`s (op, input_index, source, target, line) of implicit
        cross-device copies, reported under `device_policy="warn"`.
      Both are read live while the capture is open (so a test can assert
      inside the block) and final once it ends.
      complete: False when TensorFlow could not report every event: its C++
        log level hid the eager lines (only graph placer lines are recorded),
        or placement logging was off when the runtime started.
      incomplete_reason: why, when `complete` is False.
    """

    def __init__(self) -> None:
        self._records: list[PlacementRecord] = []
        self._copies: list[CopyRecord] = []
        self.complete = True
        self.incomplete_reason = ""
        self._unmatched: Counter = Counter()
        self._pull: Optional[Callable[[], None]] = None

    def start_pulling(self, pull: Callable[[], None]) -> None:
        """Reads live: `pull` parses new output into this log before each query."""
        self._pull = pull

    def stop_pulling(self) -> None:
        """Ends live updates: called by the capture when its block ends."""
        self._pull = None

    @property
    def records(self) -> list[PlacementRecord]:
        """The placement records so far (read live while the capture is open)."""
        if self._pull is not None:
            self._pull()
        return self._records

    @property
    def copies(self) -> list[CopyRecord]:
        """The implicit-copy records so far (read live while the capture is open)."""
        if self._pull is not None:
            self._pull()
        return self._copies

    @classmethod
    def from_text(cls, text: str) -> "PlacementLog":
        """A log of the placement lines in `text` (e.g. a saved program output)."""
        log = cls()
        log.extend(text)
        return log

    def extend(self, text: str) -> Parsed:
        """Adds the placement events found in `text`; returns them and the rest of the text.

        A log fed in pieces keeps each placer event once when fd 2's pieces
        come before fd 1's.
        """
        parsed = parse_placement(text, self._unmatched)
        self.adopt(parsed.records, parsed.copies)
        return parsed

    def adopt(self, records: list[PlacementRecord], copies: list[CopyRecord]) -> None:
        """Appends events parsed elsewhere (by a capture nested in this one)."""
        self._records.extend(records)
        self._copies.extend(copies)

    def _select(self, op: Optional[str] = None, device: Optional[str] = None) -> Iterable[PlacementRecord]:
        where = parse_device(device).name if device is not None else None
        return (r for r in self.records if (op is None or r.op == op) and (where is None or r.device == where))

    def devices_for(self, op: str) -> tuple[str, ...]:
        """Devices `op` was placed on, in order of first appearance."""
        return tuple(dict.fromkeys(r.device for r in self._select(op=op)))

    def ops_on(self, device: str) -> tuple[str, ...]:
        """Ops placed on `device` (any accepted spelling), in order of first appearance."""
        return tuple(dict.fromkeys(r.op for r in self._select(device=device)))

    def summary(self) -> dict[str, dict[str, int]]:
        """Counts per device and op: `{"/device:CPU:0": {"MatMul": 2, ...}, ...}`."""
        counts: dict[str, Counter] = {}
        for record in self.records:
            counts.setdefault(record.device, Counter())[record.op] += 1
        return {device: dict(ops) for device, ops in counts.items()}

    def guide_lines(self) -> list[str]:
        """The eager events as TensorFlow's guide prints them."""
        return [
            f"Executing op {r.op} in device {parse_device(r.device).full_name}"
            for r in self.records if r.kind == "execute"
        ]

    def table(self, op: Optional[str] = None) -> str:
        """A short table of what was placed where (the rows for `op` first).

        The arguments and results of TensorFlow's internal functions (`_Arg`,
        `_Retval`, ...) are counted in one line, not listed.
        """
        records = self.records
        counts = Counter((r.op, r.device, r.kind) for r in records if r.op not in _PLUMBING)
        plumbing = sum(1 for r in records if r.op in _PLUMBING)
        rows = sorted(counts.items(), key=lambda item: (item[0][0] != op, item[0]))
        note = "" if self.complete else self._incomplete_note()
        if not rows and not plumbing:
            return "  (no placement events were recorded)" + note
        lines = [f"  {'op':<24} {'device':<18} {'kind':<8} count"]
        lines += [f"  {o:<24} {d:<18} {k:<8} {n}" for (o, d, k), n in rows[:_TABLE_ROWS]]
        if len(rows) > _TABLE_ROWS:
            lines.append(f"  ... and {len(rows) - _TABLE_ROWS} more rows")
        if plumbing:
            lines.append(f"  (+{plumbing} function argument/result events: {', '.join(sorted(_PLUMBING))})")
        return "\n".join(lines) + note

    def _incomplete_note(self) -> str:
        return "\n  (incomplete log: " + self.incomplete_reason + ")"

    def assert_placed(self, op: str, device: str) -> None:
        """Raises AssertionError, with a table of actual placements, unless `op` ran on `device`."""
        if not any(True for _ in self._select(op, device)):
            where = ", ".join(self.devices_for(op)) or "no device"
            raise AssertionError(
                f"expected {op} on {parse_device(device).name}, but it was placed on {where}:\n{self.table(op)}")

    def assert_not_placed(self, op: str, device: str) -> None:
        """Raises AssertionError, with a table of actual placements, if `op` ran on `device`."""
        hits = sum(1 for _ in self._select(op, device))
        if hits:
            raise AssertionError(
                f"expected no {op} on {parse_device(device).name}, but {hits} event(s) were placed there:\n"
                f"{self.table(op)}")

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        return f"<PlacementLog: {len(self.records)} records, {len(self.copies)} copies, complete={self.complete}>"

    def __str__(self) -> str:
        return self.table()
