"""Memory per device: what the block's tensors, variables and allocations held, on the device that holds them.

A `Census` (one per `capture_placement(memory=True)`) counts every tensor the block's eager ops and function calls
return and every variable it creates, on the device holding its memory (`backing_device`; a variable's own
device), with its bytes and the user's line that made it, and drops it when Python frees it (a weak reference's
callback). Each change is one row of a flat array (an append, whatever thread makes it: no lock on an op's
path). The block's profile adds the allocators' events (every allocation inside functions too, as far as the
allocator in force reports them); read, the census and the events replayed give per device its peak, what it
held then by line (`Held`), growth per step and coverage.

Example:
    >>> import tensorflow as tf, tfplace
    >>> with tfplace.capture_placement(memory=True, sources=True) as log:
    ...     x = tf.zeros((256, 256))                  # 256 KiB of float32
    >>> figures = log.memory().devices["/device:CPU:0"]
    >>> figures.peak_bytes >= 262144, figures.top[0][1] >= 262144
    (True, True)
"""

from __future__ import annotations

import array
import functools
import math
import re
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Optional, Sequence

from tfplace import _tensorflow
from tfplace._devices import canonical_name, parse_device
from tfplace._names import is_function_call
from tfplace.placement.functions import _function_sources
from tfplace.placement.profile._model import Allocation, Timing
from tfplace.placement.records._memory_figures import (DeviceMemory, Held, Memory, OutOfMemory, allocator_peaks,
                                                       by_line)
from tfplace.placement.records._memory_held import DeviceHeld, Places, grown, replay
from tfplace.placement.taking._memory_places import coverage, places
from tfplace.placement.records._oom import parse_oom
from tfplace.placement.records._records import Kind, PlacementRecord
from tfplace.placement.session import _session
from tfplace.placement.session._sources import shown_path

_dtype_enum, _elements = _tensorflow.dtype_enum, _tensorflow.eager_elements

__all__ = ["Census", "sized"]

_WHAT = ("peaks count what the device held at once: what was alive when the block opened, the tensors eager ops and "
         "function calls returned and the variables created (by the user's line), and every allocation the "
         "allocators reported inside functions (by node and line), as requested bytes")


class _Entry(NamedTuple):
    device: str
    size: int
    source: str
    kind: str  # "tensor" or "variable"
    dtype: str
    dims: str  # "1000,1000"; "?" for an unknown dimension or rank; "" for a tensor


@functools.lru_cache(maxsize=4096)
def sized(dtype: Any, shape: Optional[tuple]) -> tuple[int, str, str]:
    """(bytes, dtype name, dimensions text) of a value of `dtype` and dimensions `shape` (None: unknown
    rank); cached, shapes repeat."""
    each = _tensorflow.dtype_size(dtype.name)
    dims = ",".join("?" if d is None else str(d) for d in shape) if shape is not None else "?"
    return (math.prod(shape) * each if shape is not None and None not in shape and each else 0), dtype.name, dims


class _Counted(weakref.ref):
    """A weak reference to a counted tensor or variable, with its id (`key`) and its entry's `code`."""

    __slots__ = ("key", "code")
    key: int
    code: int


# A change is one int: the log's length at the change (`_CLOCK` bits up) and the code of its entry: the
# entry's index in `Census._table` plus one (`_INDEX` bits up; 0: not counted), whether it has a line
# (`_LINED`), whether the change is a free (`_FREED`).
_CLOCK, _INDEX, _LINED, _FREED = 32, 2, 2, 1
_INDEXES = 1 << (_CLOCK - _INDEX)  # entries a census can name

# The lines of the tensors a memory capture saw made, by id, while they live (for `live_tensors()`,
# after the capture too): `_session.runtime().made`.


class Census:
    """The tensors and variables of one memory capture (`add_outputs`, `add_variable`), per device.

    Each change (a tensor counted, one freed) is one int appended to a flat array, which an append
    does at once whatever thread makes it (no lock on the op's path); live bytes, peaks and the
    lines' figures are the changes replayed when they are read."""

    def __init__(self, timed: bool = False, clock: Optional[Callable[[], int]] = None,
                 records: Callable[[], Sequence[PlacementRecord]] = tuple) -> None:
        self._lock = threading.Lock()  # held by readers, and to close
        self._timed = timed
        self.clock: Callable[[], int] = clock or (lambda: 0)  # where the block is (its log's length), for `series()`
        self._records = records  # the block's placement records so far (the steps' starts, the failed op's line)
        self._entries: dict[int, _Counted] = {}  # id of a counted object alive -> its reference, with its code
        # (device, dtype, elements, line) -> the code of such tensors (0: not counted)
        self._made: dict[tuple, int] = {}
        self._table: list[_Entry] = []  # the entries codes name
        self._sources = _session.runtime().made  # the lines of tensors alive, for live_tensors()
        self._changes = array.array("q")  # each change: clock << _CLOCK | code (8 bytes)
        self._times = array.array("q")  # each change's epoch ns, in a timed block (its timeline reads them)
        self._closed_at: Optional[int] = None  # changes that count, once closed (those appended later are not read)
        self._allocator: dict[str, Optional[tuple[int, int]]] = {}  # GPUs' allocator figures at the block's end
        self._final: Optional[Memory] = None  # the figures once closed, made when first read
        self._allocations: Sequence[Allocation] = ()  # the allocators' events, where profiled
        self._places, self._boundaries = Places(), list[float]()  # what tells each event its line; steps' starts
        self._failure = ""  # the text of an out-of-memory error raised in the block
        self._gpus = [d for d in _tensorflow.logical_device_names() if parse_device(d).device_type == "GPU"] \
            if _tensorflow.runtime_started() else []
        for gpu in self._gpus:
            _tensorflow.reset_allocator_peak(gpu)
        self._freed = self._on_free()  # the callback of every reference
        self.add_outputs = self._outputs_counter()

    def _on_free(self) -> Callable[["_Counted"], object]:
        """The callback of a counted object's reference: its change appended, its line dropped. It runs per
        tensor: what it reads is bound here."""
        pop, lines_pop, append, clock = self._entries.pop, self._sources.pop, self._changes.append, self.clock
        stamp, now = self._times.append, time.time_ns

        def freed(ref: _Counted, lined: int = _LINED, shift: int = _CLOCK, free: int = _FREED) -> bool:
            code = ref.code
            if code & lined:
                lines_pop(ref.key, None)
            if pop(ref.key, None) is None:
                return False
            append(clock() << shift | code | free)
            return True

        def freed_timed(ref: _Counted) -> None:
            if freed(ref):
                stamp(now())
        return freed_timed if self._timed else freed

    def _outputs_counter(self) -> Callable[[Any, Iterable[Any]], None]:
        """`add_outputs(record, outputs)`: counts the tensors an eager op or a function call returned, with its
        record's line (`source`, or ""). It runs per eager op: what it reads is bound here; an eager tensor's
        own methods are called directly."""
        census, made, setdefault, lines = self, self._made, self._entries.setdefault, self._sources
        append, clock, freed, timed, stamp, now = (self._changes.append, self.clock, self._freed, self._timed,
                                                   self._times.append, time.time_ns)

        def add_outputs(record: Any, outputs: Iterable[Any], shift: int = _CLOCK) -> None:
            source = record.source
            for tensor in outputs:
                key = (tensor.backing_device, _dtype_enum(tensor), _elements(tensor), source)
                code = made.get(key)
                if code is None:  # codes are shared by the tensors of one device, dtype, size and line
                    size, dtype, _ = sized(tensor.dtype, (key[2],))
                    code = census._code(canonical_name(key[0]), size, source, "tensor", dtype, "") if size else 0
                    if len(made) > 100_000:
                        made.clear()
                    made[key] = code
                if code:
                    ident = id(tensor)
                    ref = _Counted(tensor, freed)
                    if setdefault(ident, ref) is ref:  # (else the same object returned again: an identity)
                        ref.key, ref.code = ident, code
                        append(clock() << shift | code)
                        if timed:
                            stamp(now())
                        if source:
                            lines[ident] = source
        return add_outputs

    def add_variable(self, variable: Any, source: str) -> None:
        """Counts a variable the block created (each replica's, for a distributed one)."""
        for part in getattr(variable, "values", None) or (variable,):
            size, dtype, dims = sized(part.dtype, _tensorflow.shape_tuple(part))
            if size and self._closed_at is None:
                code = self._code(canonical_name(part.device), size, source, "variable", dtype, dims)
                key = id(part)
                ref = _Counted(part, self._freed)
                if self._entries.setdefault(key, ref) is ref:
                    ref.key, ref.code = key, code
                    self._changes.append(self.clock() << _CLOCK | code)
                    if self._timed:
                        self._times.append(time.time_ns())
                    if source:
                        self._sources[key] = source

    def _code(self, device: str, size: int, source: str, kind: str, dtype: str, dims: str) -> int:
        """The code of a new entry (`_CLOCK`)."""
        with self._lock:
            index = len(self._table) + 1  # (0: a tensor not counted)
            if index >= _INDEXES:
                raise OverflowError(f"a memory capture names at most {_INDEXES} kinds of tensor (device, dtype, "
                                    f"size, line); this block made more")
            self._table.append(_Entry(device, size, source, kind, dtype, dims))
        return index << _INDEX | (_LINED if source else 0)

    def _replay(self, series: Optional[list] = None) -> tuple[dict[str, int], dict[str, tuple[int, int]], int]:
        """(live bytes per device, (peak bytes, index of the change that reached it) per device, tensors counted)
        from the changes so far, read in place; each change's (clock, device, live bytes, epoch ns) appended to
        `series` when given (the caller holds the lock)."""
        changes, table, times = self._changes, self._table, self._times
        end = len(changes) if self._closed_at is None else self._closed_at
        live: dict[str, int] = {}
        peak: dict[str, tuple[int, int]] = {}
        counted = 0
        mask = (1 << _CLOCK) - 1
        for i in range(end):
            change = changes[i]
            code = change & mask
            entry = table[(code >> _INDEX) - 1]
            device = entry.device
            size = -entry.size if code & _FREED else entry.size
            now = live[device] = live.get(device, 0) + size
            if size > 0:
                counted += 1
                if now > peak.get(device, (0, 0))[0]:
                    peak[device] = (now, i)
            if series is not None:
                series.append((change >> _CLOCK, device, now, times[i] if self._timed else 0))
        return live, peak, counted

    def _held(self, peak: Mapping[str, tuple[int, int]], marks: Sequence[int],
              ) -> tuple[dict[str, tuple[Held, ...]], dict[str, list[dict[str, int]]], dict[str, tuple[Held, ...]]]:
        """What each device held at its peak, by line at each of `marks` (clocks: the steps' starts), and at the
        end (the caller holds the lock)."""
        changes, table = self._changes, self._table
        end = len(changes) if self._closed_at is None else self._closed_at
        moments = {index: device for device, (_, index) in peak.items()}
        alive: dict[str, dict[int, int]] = {}  # device -> entry index -> how many alive
        at_peak: dict[str, tuple[Held, ...]] = {}
        samples: dict[str, list[dict[str, int]]] = {device: [] for device in peak}
        mask, mark = (1 << _CLOCK) - 1, 0
        for i in range(end):
            change = changes[i]
            while mark < len(marks) and change >> _CLOCK > marks[mark]:  # (a call's outputs come after its record)
                for device in samples:
                    samples[device].append(dict(by_line(self._rows(alive.get(device, {})))))
                mark += 1
            code = change & mask
            index = (code >> _INDEX) - 1
            counts = alive.setdefault(table[index].device, {})
            counts[index] = counts.get(index, 0) + (-1 if code & _FREED else 1)
            if i in moments:
                at_peak[moments[i]] = self._rows(counts)
        return at_peak, samples, {device: self._rows(counts) for device, counts in alive.items()}

    def _rows(self, counts: Mapping[int, int]) -> tuple[Held, ...]:
        """`Held` rows of the entries alive (`counts`: entry index -> how many), by line and kind."""
        rows: dict[tuple[str, str], list] = {}
        for index, count in counts.items():
            if count > 0:
                entry = self._table[index]
                kind = "variable" if entry.kind == "variable" else "returned"
                row = rows.setdefault((entry.source, kind), [0, 0, entry])
                row[0] += entry.size * count
                row[1] += count
                if entry.size > row[2].size:
                    row[2] = entry
        found = [Held(source, size, kind, "", "", largest.dtype, _dims(largest.dims), count)
                 for (source, kind), (size, count, largest) in rows.items()]
        return tuple(sorted(found, key=lambda row: (-row.bytes, row.source)))

    def series(self) -> list[tuple[int, str, int, int]]:
        """(clock, device, live bytes, epoch ns: 0 unless the block was timed) at every change while the block ran,
        in order."""
        found: list[tuple[int, str, int, int]] = []
        with self._lock:
            self._replay(found)
        return found

    def close(self) -> None:
        """Freezes the figures at the block's end: later frees change nothing (they are made when first read)."""
        with self._lock:
            if self._closed_at is None:
                self._closed_at = len(self._changes)
                self._allocator = {gpu: _tensorflow.allocator_figures(gpu) for gpu in self._gpus}

    def failed(self, error: BaseException) -> bool:
        """Keeps an out-of-memory error raised in the block (`Memory.oom`; False for another error), and the lines
        of the nodes of the functions it names, which ran no further than the failure (no placement records of
        theirs)."""
        if not isinstance(error, _tensorflow.OutOfMemory):
            return False
        text = str(error)
        with self._lock:
            self._failure, self._final = text, None
            nodes = dict(self._places.nodes)
            for function in set(re.findall(r"__inference_\w+", text)):
                for node, line in _function_sources.lines(function).items():
                    nodes.setdefault(node, ("", line, _op_of(node)))
            self._places = self._places._replace(nodes=nodes)
        return True

    def profiled(self, timing: Timing, records: Sequence[PlacementRecord]) -> None:
        """Gives the census the block's profile: the allocators' events (inside functions too) and what tells
        each its line (the placement records, the runs of eager ops and calls)."""
        with self._lock:
            variables = frozenset((e.device, e.source, e.size) for e in self._table if e.kind == "variable")
            self._allocations, self._final = timing.allocations, None
            self._places, self._boundaries = places(timing, records, self._cpus(), variables)

    def figures(self) -> Memory:
        """The figures: frozen at the block's end, else so far."""
        with self._lock:
            if self._closed_at is None:
                return self._figures(final=False)
            if self._final is None:
                self._final = self._figures(final=True)
            return self._final

    def _cpus(self) -> tuple[str, ...]:
        return tuple(canonical_name(d) for d in _tensorflow.logical_device_names()
                     if parse_device(d).device_type == "CPU") or ("/device:CPU:0",)

    def _figures(self, final: bool) -> Memory:
        """The figures (the caller holds the lock): per device the allocators' replay where it saw more than the
        census, else the census's."""
        live, peak, counted = self._replay()
        records = self._records()
        at_peak, samples, at_end = self._held(peak, _most_called(records))
        events = replay(self._allocations, self._places, self._boundaries) if self._allocations else {}
        allocators = {a.allocator for a in self._allocations}
        compiled = {r.device for r in records if r.kind == Kind.COMPILED}
        devices = {}
        for device in sorted(set(peak) | set(events)):
            figures = (self._allocator.get(device) if final else
                       _tensorflow.allocator_figures(device) if device in self._gpus else None)
            current, most = figures or (None, None)
            held = events.get(device)
            if held is not None and held.peak_bytes >= peak.get(device, (0, 0))[0]:
                found = DeviceMemory(held.peak_bytes, held.live_bytes, by_line(held.at_peak), current, most,
                                     held.at_peak, held.growth, peak_node=held.peak_node)
            else:
                rows, kept = at_peak.get(device, ()), samples.get(device, [])
                found = DeviceMemory(peak[device][0], live.get(device, 0), by_line(rows), current, most, rows,
                                     grown(kept, [1] * (len(kept) - 1)))
            devices[device] = found._replace(coverage=coverage(device, allocators, self._places.cpus,
                                                               device in compiled))
        oom = self._oom(events, at_end, records) if self._failure else None
        note = _WHAT + ("" if final else "; the block is still running")
        return Memory(devices, counted, note,
                      allocator_peaks(self._allocations, self._places.cpus), oom)

    def _oom(self, events: Mapping[str, DeviceHeld], at_end: Mapping[str, tuple[Held, ...]],
             records: Sequence[PlacementRecord]) -> OutOfMemory:
        """Where an allocation failed, and what its device held then."""
        request = parse_oom(self._failure) or OutOfMemory("", 0, "", (), "", "", "")
        device = request.device or max(events, key=lambda d: events[d].peak_bytes, default="")
        _, line, op = self._places.nodes.get(request.op, ("", "", _op_of(request.op)))
        file, _, number = request.source.rpartition(":")
        source = line or (f"{shown_path(file)}:{number}" if file else "") or next(
            (r.source for r in reversed(records) if r.kind == Kind.FAILED and r.op == request.op), "")
        held = events[device].at_last if device in events else at_end.get(device, ())
        return request._replace(device=device, op=op, source=source, held=held)


def _op_of(node: str) -> str:
    """The op type a node's name says, as TensorFlow names nodes by default ("scope/Tile_1": "Tile"), where it
    is an op type ("" else: "Tile/multiples")."""
    base = re.sub(r"_\d+$", "", node.rpartition("/")[2])
    return base if base and _tensorflow.op_def(base) is not None else ""


def _dims(text: str) -> tuple[int, ...]:
    """"1000,1000" as (1000, 1000); () where a dimension is unknown or none is written."""
    try:
        return tuple(int(d) for d in text.split(",")) if text else ()
    except ValueError:
        return ()


def _most_called(records: Sequence[PlacementRecord]) -> list[int]:
    """The positions in the log of the calls of the function called most (the steps' starts), else none."""
    calls: dict[str, list[int]] = {}
    for position, record in enumerate(records):
        if record.kind == Kind.EXECUTE and is_function_call(record.op):
            calls.setdefault(record.op, []).append(position)
    return max(calls.values(), key=len, default=[])
