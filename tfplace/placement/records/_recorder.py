"""`Recorder`: what a capture writes a placement log through, and what it holds: records in order, copies
each beside its record, node runs of function calls, what waits to be made when the log is first read, and
why the log is incomplete. `tfplace.PlacementLog` is a `Recorder` with queries, assertions and views.

Example:
    >>> from tfplace.placement.records._recorder import Recorder
    >>> from tfplace.placement.records._records import PlacementRecord
    >>> log = Recorder()
    >>> log.add_later(lambda: [PlacementRecord("MatMul", "m", "/device:CPU:0", "place")])
    >>> log.add_event(PlacementRecord("AddV2", "", "/device:CPU:0", "execute"))
    >>> [r.op for r in log.records], log.complete
    (['MatMul', 'AddV2'], True)
"""

from __future__ import annotations

import bisect
import itertools
import threading
import warnings
from collections import Counter
from typing import Any, Callable, Iterable, Optional, Sequence

from tfplace.placement.records._records import CopyRecord, PlacementRecord

__all__ = ["Recorder"]


def _taken(waiting: list) -> list:
    """What `waiting` holds now, taken out of it (what another thread appends meanwhile stays)."""
    taken = waiting[:len(waiting)]
    del waiting[:len(taken)]
    return taken


class Recorder:
    """The events of a block as a capture writes them: `add()`, `add_event()`, `add_event_later()`,
    `add_later()`, `add_runs()` and `mark_incomplete()` are its only writers; everything else only reads.
    While the capture is open it grows (a test can assert inside the block); reading it never changes what it
    says (what `add_later()` left to be made is made then, in its place)."""

    def __init__(self, records: Iterable[PlacementRecord] = (), copies: Iterable[CopyRecord] = ()) -> None:
        self._records: list[PlacementRecord] = list(records)
        self._copies: list[CopyRecord] = list(copies)
        self._copy_slots: list[int] = [-1] * len(self._copies)  # per copy, the index of the record it came with
        self._reasons: list[str] = []
        self._uncertain: list[PlacementRecord] = []  # records of functions instantiated a varying number of times
        self._uncertain_reasons: set[str] = set()  # the reasons that only those functions make
        self._lock = threading.Lock()
        self._runs: Counter = Counter()  # (device, op, category) -> executions of function nodes
        # Made when the log is read (`add_later`): (index in `_records`, the records' maker), and function calls
        # whose node runs count then (`tfplace.placement.functions._collected.Later`).
        self._later: list[tuple[int, Callable[[], Sequence[PlacementRecord]]]] = []
        self._later_runs: list[Any] = []
        self._later_copies: list[tuple[int, int, Callable[[], Sequence[CopyRecord]]]] = []  # (index, record, maker)

    def add(self, records: Sequence[PlacementRecord] = (), copies: Sequence[CopyRecord] = ()) -> None:
        """Appends events (the capture's writer; each extend is atomic, so threads may add at once)."""
        if copies:  # (under the lock, as the records' places move when waiting records are made: `_settle`)
            with self._lock:
                self._records.extend(records)
                self._copy_slots.extend([len(self._records) - 1] * len(copies))
                self._copies.extend(copies)
        else:
            self._records.extend(records)

    def add_event(self, record: PlacementRecord, copies: Sequence[CopyRecord] = ()) -> None:
        """Appends one event and its copies (`add()` for one eager op, the capture's hot path)."""
        if copies:
            self.add((record,), copies)
        else:
            self._records.append(record)

    def add_event_later(self, record: PlacementRecord, copies: Callable[[], Sequence[CopyRecord]]) -> None:
        """Appends one event whose copies are made when the log is first read (`copies()`), in their place."""
        with self._lock:
            self._records.append(record)
            self._later_copies.append((len(self._copies), len(self._records) - 1, copies))

    def add_later(self, records: Optional[Callable[[], Sequence[PlacementRecord]]] = None, runs: Any = None) -> None:
        """Appends records made when the log is first read (`records()` makes them, in their place among the
        events), or counts the node runs of a function call then
        (`runs`: a `tfplace.placement.functions._collected.Later`)."""
        if records is not None:
            self._later.append((len(self._records), records))
        if runs is not None:
            self._later_runs.append(runs)

    def _settle(self) -> None:
        """Makes what waited (`add_later`, `add_event_later`): each record and copy in its place, each copy
        still with its record."""
        if not (self._later or self._later_runs or self._later_copies):
            return
        with self._lock:  # (writers of copies wait; records appended meanwhile stay after what is made)
            later = _taken(self._later)
            for call in _taken(self._later_runs):
                for key, count in call.runs:
                    self._runs[key] += count
            records, end = self._records, len(self._records)
            merged: list[PlacementRecord] = []
            start = 0
            inserted = []
            for position, make in sorted(later, key=lambda entry: entry[0]):
                made = make()
                merged += records[start:position]
                merged += made
                inserted.append((position, len(made)))
                start = position
            if inserted:
                records[:end] = merged + records[start:end]

            positions = [position for position, _ in inserted]
            before = list(itertools.accumulate(n for _, n in inserted))

            def moved(slot: int) -> int:  # where the record at `slot` is now: after what was made before it
                k = bisect.bisect_right(positions, slot)
                return slot + before[k - 1] if k else slot

            copies, slots = [], []
            start = 0
            for position, slot, make in sorted(_taken(self._later_copies), key=lambda entry: entry[0]):
                made = list(make())
                copies += self._copies[start:position]
                slots += self._copy_slots[start:position]
                copies += made
                slots += [slot] * len(made)
                start = position
            self._copies[:] = copies + self._copies[start:]
            self._copy_slots[:] = [moved(slot) for slot in slots + self._copy_slots[start:]]

    def writer(self) -> Callable[[PlacementRecord], None]:
        """The capture's writer of one record that came without copies, for its hottest path (the list's own append)."""
        return self._records.append

    def counter(self) -> Callable[[], int]:
        """How many records the log holds, as the list's own length (a memory census stamps each change with it)."""
        return self._records.__len__

    def add_runs(self, runs: Iterable[tuple[tuple[str, str, str], int]]) -> None:
        """Counts one function call's node executions, ((device, op, category), count) pairs (the capture's writer)."""
        with self._lock:
            for key, count in runs:
                self._runs[key] += count

    def mark_incomplete(self, reason: str, *, stacklevel: int = 2, uncertain: Sequence[PlacementRecord] = ()) -> None:
        """Records that the log misses something, and warns once per distinct reason; `uncertain`: the
        records (held in the log) of functions whose number of instantiations is all it misses."""
        with self._lock:
            if uncertain:
                self._uncertain.extend(uncertain)
                self._uncertain_reasons.add(reason)
            if reason in self._reasons:
                return
            self._reasons.append(reason)
        warnings.warn(f"tfplace: incomplete placement log: {reason}", RuntimeWarning, stacklevel=stacklevel + 1)

    @property
    def complete(self) -> bool:
        """True while nothing the block ran escaped the log."""
        return not self._reasons

    @property
    def incomplete_reason(self) -> str:
        """Why the log is incomplete ("" when it is complete)."""
        return "; ".join(self._reasons)

    @property
    def uncertain(self) -> tuple[PlacementRecord, ...]:
        """The records of functions that TensorFlow's own threads instantiate a varying number of times
        (a parallel interleave's inner datasets' functions): the log holds them, once per iterator, and
        is incomplete for them (`incomplete_reason` names them)."""
        return tuple(self._uncertain)

    @property
    def only_uncertain(self) -> bool:
        """True when the log is incomplete only for its `uncertain` functions: everything else is exact."""
        return bool(self._reasons) and all(reason in self._uncertain_reasons for reason in self._reasons)

    @property
    def records(self) -> list[PlacementRecord]:
        """The placement records so far, in order (a copy)."""
        self._settle()
        return list(self._records)

    @property
    def runs(self) -> dict[tuple[str, str, str], int]:
        """Executions of function nodes so far: (device, op, category) -> count, each call's nodes once
        (a loop body's once per call); the category of `tfplace.placement.records._groups`."""
        self._settle()
        return dict(self._runs)

    @property
    def copies(self) -> list[CopyRecord]:
        """The implicit-copy records so far, in order (a copy)."""
        self._settle()
        return list(self._copies)
