"""Memory per device: the tensors a block made, on the device that holds them, until they are freed.

A `Census` (one per `capture_placement(memory=True)`) counts every tensor the block's eager ops
and function calls return and every variable it creates, on the device holding its memory
(`backing_device`; a variable's own device), with its bytes and the user's line that made it,
and drops it when Python frees it (a weak reference's callback). Each change is one row of a flat array
(an append, whatever thread makes it: no lock on an op's path); read, the rows give per device the live
bytes and their peak, and per line the most bytes that line held at once. Allocations inside functions (their
intermediate tensors) never reach Python: on a GPU, TensorFlow's allocator figures
(`tf.config.experimental.get_memory_info`, reset at the block's start) are kept beside tfplace's;
logical CPUs share one allocator, whose figures cannot tell CPU:0 from CPU:1, so none are kept
for CPUs.

`live_tensors()` lists the eager tensors and variables alive now (like `jax.live_arrays()`), with
the line that made them where a memory capture saw it.

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
from typing import Any, Callable, Iterable, NamedTuple, Optional, Sequence, Union

from tfplace import _tensorflow
from tfplace._devices import canonical_name, parse_device
from tfplace._names import size_text
from tfplace.placement.profile._model import Allocation
from tfplace.placement.records._memory_figures import DeviceMemory, Memory, allocated_peaks, allocator_peaks
from tfplace.placement.session import _session

_dtype_enum, _elements = _tensorflow.dtype_enum, _tensorflow.eager_elements

__all__ = ["Census", "LiveTensor", "live_tensors"]

_TOP = 5
_WHAT = ("tfplace counts the tensors the block's eager ops and function calls returned and the variables it "
         "created, on the device holding their memory, until Python freed them")


class _Entry(NamedTuple):
    device: str
    size: int
    source: str
    kind: str  # "tensor" or "variable"
    dtype: str
    dims: str  # "1000,1000"; "?" for an unknown dimension or rank; "" for a tensor (its own, read when listed)

    @property
    def what(self) -> str:
        """How a note names it: "float32[1000,1000] tensor"."""
        return f"{self.dtype}[{self.dims}] {self.kind}"


@functools.lru_cache(maxsize=4096)
def _sized(dtype: Any, shape: Optional[tuple]) -> tuple[int, str, str]:
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

    def __init__(self, timed: bool = False, clock: Optional[Callable[[], int]] = None) -> None:
        self._lock = threading.Lock()  # held by readers, and to close
        self._timed = timed
        self.clock: Callable[[], int] = clock or (lambda: 0)  # where the block is (its log's length), for `series()`
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
        self._allocations: Optional[Sequence[Allocation]] = None  # the allocators' events, where profiled
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
                    size, dtype, _ = _sized(tensor.dtype, (key[2],))
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
            size, dtype, dims = _sized(part.dtype, _tensorflow.shape_tuple(part))
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

    def _replay(self, series: Optional[list] = None) -> tuple[dict, dict, dict, int]:
        """(live and peak bytes per device, peak per (device, line), tensors counted) from the changes so
        far, read in place; each change's (clock, device, live bytes, epoch ns) appended to `series` when
        given (the caller holds the lock)."""
        changes, table, times = self._changes, self._table, self._times
        end = len(changes) if self._closed_at is None else self._closed_at
        live: dict[str, int] = {}
        peak: dict[str, int] = {}
        line_live: dict[tuple[str, str], int] = {}
        line_peak: dict[tuple[str, str], int] = {}
        counted = 0
        mask = (1 << _CLOCK) - 1
        for i in range(end):
            change = changes[i]
            code = change & mask
            entry = table[(code >> _INDEX) - 1]
            device = entry.device
            size = -entry.size if code & _FREED else entry.size
            now = live[device] = live.get(device, 0) + size
            where = (device, entry.source)
            held = line_live[where] = line_live.get(where, 0) + size
            if size > 0:
                counted += 1
                if now > peak.get(device, 0):
                    peak[device] = now
                if held > line_peak.get(where, 0):
                    line_peak[where] = held
            if series is not None:
                series.append((change >> _CLOCK, device, now, times[i] if self._timed else 0))
        return live, peak, line_peak, counted

    def series(self) -> list[tuple[int, str, int, int]]:
        """(clock, device, live bytes, epoch ns: 0 unless the block was timed) at every change while the block ran,
        in order."""
        found: list[tuple[int, str, int, int]] = []
        with self._lock:
            self._replay(found)
        return found

    def largest(self, device: str, count: int = _TOP) -> list[_Entry]:
        """The largest counted tensors and variables alive now on `device`, with their dimensions."""
        with self._lock:
            table = self._table
            found = [(table[(ref.code >> _INDEX) - 1], ref) for ref in list(self._entries.values())]
        found = sorted(((entry, ref) for entry, ref in found if entry.device == device), key=lambda pair: -pair[0].size)
        largest = []
        for entry, ref in found:
            obj = ref()
            if obj is not None:  # (a tensor's entry names its size alone: its dimensions are read here)
                largest.append(entry._replace(dims=entry.dims or _sized(obj.dtype, _tensorflow.shape_tuple(obj))[2]))
                if len(largest) == count:
                    break
        return largest

    def oom_note(self, error: BaseException) -> str:
        """What an out-of-memory error's device held: the largest live tensors with their lines."""
        match = re.search(r" on (/job:\S+?/device:[A-Za-z_]+:\d+)", str(error))
        with self._lock:
            live = self._replay()[0]
        device = canonical_name(match[1]) if match else max(live, key=live.__getitem__, default="")
        largest = self.largest(device)
        if not largest:
            return f"tfplace (memory=True): no tensor of the block was alive on {device or 'that device'}"
        rows = "\n".join(f"  {size_text(e.size):>10}  {e.what}, made at {e.source or 'an unknown line'}"
                         for e in largest)
        return (f"tfplace (memory=True): the largest tensors of the block alive on {device} when it ran out of "
                f"memory ({size_text(live.get(device, 0))} in all):\n{rows}")

    def close(self) -> None:
        """Freezes the figures at the block's end: later frees change nothing (they are made when first read)."""
        with self._lock:
            if self._closed_at is None:
                self._closed_at = len(self._changes)
                self._allocator = {gpu: _tensorflow.allocator_figures(gpu) for gpu in self._gpus}

    def profiled(self, allocations: Sequence[Allocation]) -> None:
        """Gives the census the allocators' events of the block's profile (inside functions too)."""
        with self._lock:
            self._allocations, self._final = tuple(allocations), None

    def figures(self) -> Memory:
        """The figures: frozen at the block's end, else so far."""
        with self._lock:
            if self._closed_at is None:
                return self._figures(final=False)
            if self._final is None:
                self._final = self._figures(final=True)
            return self._final

    def _figures(self, final: bool) -> Memory:
        """The figures (the caller holds the lock)."""
        live, peak, line_peak, counted = self._replay()
        cpus = [d for d in _tensorflow.logical_device_names() if parse_device(d).device_type == "CPU"] \
            if self._allocations else []
        allocated = allocated_peaks(self._allocations or (), cpus)
        for device, most in allocated.items():  # what functions allocated inside, beyond their outputs
            peak[device] = max(peak.get(device, 0), most)
            live.setdefault(device, 0)
        devices = {}
        for device in sorted(peak):
            top = sorted(((source, size) for (where, source), size in line_peak.items() if where == device),
                         key=lambda item: (-item[1], item[0]))[:_TOP]
            figures = (self._allocator.get(device) if final else
                       _tensorflow.allocator_figures(device) if device in self._gpus else None)
            devices[device] = DeviceMemory(peak[device], live[device], tuple(top), *(figures or (None, None)))
        note = _WHAT + ("; TensorFlow's allocator figures beside them count everything on the GPU"
                        if self._gpus else "") + _seen(self._allocations, bool(allocated)) + ("" if final else
                                                                               "; the block is still running")
        return Memory(devices, counted, note, allocator_peaks(self._allocations or (), cpus))


def _seen(allocations: Optional[Sequence[Allocation]], attributed: bool) -> str:
    """What the allocators' events covered (`attributed`: some to one device), for the figures' note."""
    if allocations is None:
        return "; tensors inside functions are TensorFlow's allocator's to count"
    if not allocations:
        return ("; the allocators wrote no events, so allocations inside functions are not counted (a CPU's "
                "allocator writes them only as a BFC allocator: TF_CPU_ALLOCATOR_USE_BFC=1 before TensorFlow "
                "starts; oneDNN's mklcpu writes those of 256 KiB and more)")
    if not attributed:
        return ("; the allocators' own peaks (`allocators`) count what functions allocated inside too; logical "
                "devices sharing one allocator are not told apart by it")
    return ("; the peaks count what the block allocated inside functions too, as the allocators reported it "
            "(requested bytes)")


class LiveTensor(NamedTuple):
    """An eager tensor or variable alive now: `kind` ("tensor" or "variable"), `device` holding its
    memory, `bytes`, `dtype`, `shape` and `source`, the line that made it where a memory capture saw it."""

    kind: str
    device: str
    bytes: int
    dtype: str
    shape: tuple
    source: str


def live_tensors(device: Union[str, Any, None] = None) -> list[LiveTensor]:
    """The eager tensors and variables alive in this process now, most bytes first (`device`: only
    those whose memory is there, written any accepted way).

    It reads Python's garbage collector (the objects it tracks), as `jax.live_arrays()` reads JAX's
    own list: tensors TensorFlow holds below Python (inside functions, in datasets) are not listed.
    Imports TensorFlow.

    >>> import tensorflow as tf, tfplace
    >>> x = tf.zeros((64, 64))
    >>> any(t.bytes == 16384 and t.shape == (64, 64) for t in tfplace.live_tensors("CPU:0"))
    True
    """
    wanted = parse_device(device, origin="tfplace.live_tensors's argument device").name if device is not None else None
    found = []
    made = _session.runtime().made
    for kind, obj in _tensorflow.live_tensor_objects():
        where = canonical_name(obj.backing_device if kind == "tensor" else obj.device)
        if wanted is not None and where != wanted:
            continue
        shape = _tensorflow.shape_tuple(obj)
        size, dtype, _ = _sized(obj.dtype, shape)
        found.append(LiveTensor(kind, where, size, dtype, shape or (), made.get(id(obj), "")))
    return sorted(found, key=lambda t: (-t.bytes, t.device))
