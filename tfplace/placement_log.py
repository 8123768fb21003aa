"""`PlacementLog`: placement events as data, with queries and assertions.

Example:
    >>> from tfplace.placement_log import PlacementLog
    >>> log = PlacementLog.from_text(
    ...     "Executing op _MklMatMul in device /job:localhost/replica:0/task:0/device:CPU:0\\n")
    >>> log.devices_for("MatMul"), log.ops_on("cpu:0")
    (('/device:CPU:0',), ('MatMul',))
    >>> log.assert_placed("MatMul", "/job:localhost/replica:0/task:0/device:CPU:0")
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable, Optional

from tfplace.devices import parse_device
from tfplace.parsing import parse_placement
from tfplace.records import PLUMBING, CopyRecord, PlacementRecord

__all__ = ["PlacementLog"]

_TABLE_ROWS = 20


class PlacementLog:
    """The placement events of a block.

    Attributes:
      records: `PlacementRecord`s (op, name, device, kind, source, line) in order.
      copies: `CopyRecord`s (op, input_index, from_device, to_device, source,
        line) of implicit cross-device copies.
      Both grow while the capture is open (a test can assert inside the
        block) and are final once it ends.
      complete: False when the block ran something whose placement was
        decided before it opened (a function placed earlier): its inner nodes
        are not in the log.
      incomplete_reason: why, when `complete` is False.
    """

    def __init__(self) -> None:
        self._records: list[PlacementRecord] = []
        self._copies: list[CopyRecord] = []
        self.complete = True
        self.incomplete_reason = ""
        self._refresh: Optional[Callable[[], object]] = None

    def add_places(self, records: list[PlacementRecord]) -> None:
        """Appends the "place" records of a function placed while the log was open."""
        self._records.extend(records)

    @property
    def records(self) -> list[PlacementRecord]:
        """The placement records so far (functions placed so far included, while the capture is open)."""
        if self._refresh is not None:
            self._refresh()
        return self._records

    @property
    def copies(self) -> list[CopyRecord]:
        """The implicit-copy records so far."""
        return self._copies

    @classmethod
    def from_text(cls, text: str) -> "PlacementLog":
        """A log of the placement lines in `text`: a saved TensorFlow log (eager lines,
        placer lines, "warn"-policy copy lines). Kernel variants such as oneDNN's
        `_MklMatMul` are read as their op type; each record keeps the printed line."""
        parsed = parse_placement(text)
        log = cls()
        log._records.extend(parsed.records)
        log._copies.extend(parsed.copies)
        return log

    def _select(self, op: Optional[str] = None, device: Optional[str] = None) -> Iterable[PlacementRecord]:
        where = parse_device(device, origin="PlacementLog's argument device").name if device is not None else None
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
        """The eager events as TensorFlow's guide prints them (op types, never kernel variants)."""
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
        counts = Counter((r.op, r.device, r.kind) for r in records if r.op not in PLUMBING)
        plumbing = sum(1 for r in records if r.op in PLUMBING)
        rows = sorted(counts.items(), key=lambda item: (item[0][0] != op, item[0]))
        note = "" if self.complete else "\n  (incomplete log: " + self.incomplete_reason + ")"
        if not rows and not plumbing:
            return "  (no placement events were recorded)" + note
        lines = [f"  {'op':<24} {'device':<18} {'kind':<8} count"]
        lines += [f"  {o:<24} {d:<18} {k:<8} {n}" for (o, d, k), n in rows[:_TABLE_ROWS]]
        if len(rows) > _TABLE_ROWS:
            lines.append(f"  ... and {len(rows) - _TABLE_ROWS} more rows")
        if plumbing:
            lines.append(f"  (+{plumbing} function argument/result events: {', '.join(sorted(PLUMBING))})")
        return "\n".join(lines) + note

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
