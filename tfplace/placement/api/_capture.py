"""`capture_placement()`: where each op of a block ran, recorded from TensorFlow's own Python hooks.

Eager ops come from an op callback (`tfplace.placement.taking._hooks`), function nodes from
TensorFlow's graph collection (`tfplace.placement.functions._graphs`). Nothing reads TensorFlow's
log text: a capture works at any point of a program, before or after the
runtime starts, with or without `configure()`, whatever
`TF_CPP_MIN_LOG_LEVEL` says, and never touches the process's output.

Captures nest (both logs see the inner block). Ops of the block's thread and
of the threads TensorFlow starts for it (`MirroredStrategy`'s replicas,
collective launchers, `tf.py_function`) are recorded, and with
`all_threads=True` those of every Python thread started in the block; every
function placed while the block is open is recorded, whichever thread ran it.

Example:
    >>> import tensorflow as tf, tfplace
    >>> with tfplace.capture_placement() as log:
    ...     c = tf.matmul(tf.ones((2, 3)), tf.ones((3, 2)))
    >>> log.devices_for("MatMul")
    ('/device:CPU:0',)
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator, Optional, Sequence, Union

from tfplace import _contained, _tensorflow
from tfplace._devices import local_task
from tfplace._errors import add_note
from tfplace.placement.api._log import PlacementLog
from tfplace.placement.functions import _collected, _function_sources, _graphs, _placed
from tfplace.placement.records._records import Kind, PlacementRecord
from tfplace._names import is_function_call
from tfplace.placement.session import _session
from tfplace.placement.session._sources import user_line, user_stacklevel
from tfplace.placement.shown import _report
from tfplace.placement.taking import _events, _hooks

__all__ = ["capture_placement", "capture_into"]


class _Recorder:
    """The hook listener of one capture: the only writer of its log."""

    def __init__(self, log: PlacementLog, sources: bool, all_threads: bool, census: Optional[Any] = None) -> None:
        self.log = log
        self.on_op = log.add_event  # the hot path: one call per eager op
        self.on_op_later = log.add_event_later  # a function call whose transfers are made when the log is read
        self.sink = log.writer()  # hotter: an eager op's record that came alone
        self.sources = sources
        self.all_threads = all_threads
        self.memory = census is not None
        # a function's records are made when the log is read (a census counts records as they come)
        self.later = census is None
        self.census = census
        if census is not None:  # the tensors each op returns, with the record's line (none without sources)
            self.on_outputs = census.add_outputs
        self.placed_here: set[str] = set()
        self.keys: set[tuple] = set()
        self.stripped: tuple[tuple, tuple] = ((), ())  # a Session run's transfers, and the same without lines

    def on_function(self, record: PlacementRecord, placed: bool,
                    call: Union[_collected.Placed, _collected.Later]) -> None:
        if isinstance(call, _collected.Later) and not call.made:
            if call.functions:
                self.log.add_later(runs=call)
        elif call.runs:
            self.log.add_runs(call.runs)
        if placed:
            self.placed_here.add(record.op)
        elif record.op not in self.placed_here:
            self.placed_here.add(record.op)  # one reason per function
            if _placed.places_nothing(record.op):
                return
            task = local_task()
            if task and record.device.startswith("/job:") and not record.device.startswith(task + "/"):
                served = _tensorflow.served_here()
                reason = _report.remote_function(record.op, record.device,
                                                 any(record.device.startswith(t + "/") for t in served))
            else:
                reason = (f"the block ran function {record.op}, which TensorFlow placed before the block opened; "
                          "TensorFlow places a function once, at its first call (per device), so its nodes are not "
                          "in this log. Open the capture before the function's first call to record them")
            self.log.mark_incomplete(reason, stacklevel=user_stacklevel())

    def creator(self, next_creator: Any, **kwargs: Any) -> Any:
        """A variable creator (`tf.variable_creator_scope`): the block's variables are counted."""
        variable = next_creator(**kwargs)
        try:
            census = self.census
            assert census is not None, "capture_into installs the creator only where a census counts memory"
            census.add_variable(variable, user_line() if self.sources else "")
        except Exception as error:  # pylint: disable=broad-except
            _contained.failed("memory census of a variable", error)
        return variable

    def on_records(self, key: _events.EventKey, records: Sequence[PlacementRecord]) -> None:
        if key.event == _events.Event.SESSION:  # a Session's run: what it placed, ran and moved, and what is unseen
            ran = key.about
            if ran.unseen:
                self.log.mark_incomplete(ran.unseen, stacklevel=user_stacklevel())
            transfers = ran.transfers
            if not self.sources and transfers:  # without lines; a loop's runs share one tuple: stripped once
                if self.stripped[0] is not transfers:
                    self.stripped = (transfers, tuple(t._replace(source="", call="") for t in transfers))
                transfers = self.stripped[1]
            self.log.add(records if self.sources else _placed.without_sources(records), transfers)
            if ran.runs:
                self.log.add_runs(ran.runs)
            return
        if key.event == _events.Event.UNSEEN:  # with the records of the functions it names, if any
            self.log.mark_incomplete(key.about, stacklevel=user_stacklevel(), uncertain=records)
            return
        if key.event == _events.Event.COMPILED:  # once per function and device; tf.data's placed per iterator
            if key in self.keys:
                return
            self.keys.add(key)
        if isinstance(records, _collected.Later):
            self.log.add_later(records=(lambda: records.instantiated) if self.sources else
                               (lambda: _placed.without_sources(records.instantiated)))
        else:
            self.log.add(records if self.sources else _placed.without_sources(records))


@contextlib.contextmanager
def capture_placement(*, sources: bool = False, all_threads: bool = False, timing: bool = False,
                      memory: bool = False) -> Iterator[PlacementLog]:
    """Records where each op of the block ran, as a `PlacementLog`.

    >>> import tensorflow as tf, tfplace
    >>> with tfplace.capture_placement(sources=True) as log:
    ...     x = tf.ones(3) * 2.0
    >>> log.assert_placed("Mul", "CPU:0")
    >>> mul = [r for r in log.records if r.op == "Mul"][0]
    >>> mul.source.startswith("<doctest"), mul.source.endswith(":2")   # the line `x = tf.ones(3) * 2.0`
    (True, True)

    Args:
      sources: fill each record's `source` with the `file.py:LINE` of the
        user's code that ran the op (the first frame outside TensorFlow, Keras
        and tfplace). Copies always carry their source.
      all_threads: also record the ops of every Python thread started while
        the block is open (data loaders, say); the threads TensorFlow starts
        for the block are always recorded.
      timing: run the block under TensorFlow's own profiler, so that
        `log.cost()` has each device's busy time and each op's time (this
        starts TensorFlow's runtime). TensorFlow runs one profiler session per
        process: if another one is active (the user's own, Keras' TensorBoard
        callback), the capture warns once and the times stay None.
      memory: count every tensor the block's eager ops and function calls return, and every
        variable it creates, on the device holding its memory, until it is freed: `log.memory()`
        has each device's peak and live bytes and the lines holding most (with `sources`), and an
        out-of-memory error raised in the block carries a note listing the largest live tensors
        on its device.

    Yields:
      The `PlacementLog`, growing while the block runs. As soon as the block
      runs a function that TensorFlow placed before the block opened, the
      log's `complete` turns False, with `incomplete_reason` and a warning.
    """
    with capture_into(PlacementLog(), sources=sources, all_threads=all_threads, timing=timing, memory=memory) as log:
        yield log


@contextlib.contextmanager
def capture_into(log: PlacementLog, *, sources: bool = False, all_threads: bool = False,
                 timing: bool = False, memory: bool = False,
                 profile_dir: Optional[str] = None) -> Iterator[PlacementLog]:
    """`capture_placement()` filling a given log (the pytest fixture's, made earlier); with timing and
    `profile_dir`, TensorFlow's profile stays in that folder (`tfplace trace --profile_dir`)."""
    census = None
    if memory:
        from tfplace.placement.taking import _memory  # the census loads only when memory is asked for

        census = _memory.Census(timed=timing, clock=log.counter(), records=lambda: log.records)
        log.set_memory(census)
    recorder = _Recorder(log, sources, all_threads, census)
    with _session.hold():  # the capture session: hooks, graph collection, caches (tfplace.placement.session._session)
        _graphs.attach(log, sources=sources)
        profiling = None
        if timing or memory:  # one profiler session serves both: times, and the allocators' events
            from tfplace.placement.profile._session import ProfilerSession  # loads only when timing is asked for

            profiling = ProfilerSession.start(profile_dir)
        if profiling is not None and profiling.missing:
            asked = "timing=True" if timing else "memory=True"
            warnings.warn(f"tfplace: capture_placement({asked}) has no {'times' if timing else 'allocator events'}: "
                          f"{profiling.missing}; executions and "
                          "bytes are still counted", RuntimeWarning, stacklevel=user_stacklevel())
        finished: list[bool] = []

        def finish() -> None:
            """Closes the census and reads the block's profile, once (an out-of-memory note needs both)."""
            if not finished:
                finished.append(True)
                if census is not None:
                    census.close()
                _graphs.detach(log)
                if profiling is not None:
                    _timed(log, profiling, timing, census)

        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(_contained.reporting(log.mark_incomplete))  # tfplace's own failures in the block
                stack.enter_context(_function_sources.watching(every_line=sources))  # tells explicit copies apart
                stack.enter_context(_hooks.listening(recorder))
                if timing and profiling is not None and not profiling.missing:
                    from tfplace.placement.taking import _host_reads

                    stack.enter_context(_host_reads.marking())  # reads of device results, for steps' sync time
                if census is not None:
                    stack.enter_context(_tensorflow.variable_creator_scope(recorder.creator))
                try:
                    yield log
                except _tensorflow.OutOfMemory as error:
                    if census is not None:
                        stack.close()
                        finish()
                        note = log.memory_note(error)
                        if note:
                            add_note(error, note)
                    raise
        finally:
            finish()


def _timed(log: PlacementLog, profiling: Any, timing: bool, census: Any) -> None:
    """Gives `log` the profile of its block (function nodes on the devices their records say), with `timing`;
    gives `census` (with `memory=True`) the allocators' events."""
    from tfplace.placement.profile import _xspace

    space = profiling.stop()
    if space is None:
        if timing:
            log.set_timing(None, f"times: {profiling.missing or 'the profiler recorded nothing'}")
        return
    records = log.records
    devices = {r.name: r.device for r in records if r.name and r.kind in (Kind.PLACE, Kind.COMPILED)}
    eager = [(r.op, r.device) for r in records if r.kind == Kind.EXECUTE and not is_function_call(r.op)]
    read = _xspace.read_xspace(space, devices, eager)
    if timing:
        log.set_timing(read)
    if census is not None:
        census.profiled(read, records)
