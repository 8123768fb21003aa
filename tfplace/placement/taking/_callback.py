"""The op callback of one thread (`Hook`): each eager op it sees becomes a record, copies, the
records of the functions it placed and the datasets it read, for its listeners
(`tfplace.placement.taking._hooks.listening` installs it; `tfplace.placement.taking._events` says what a listener gets).

An op the thread runs again from the same call (the same op type, device, `tf.device` scope and attributes,
and the same code at the same instruction in the frame that decided its origin, and in the user's frame
when sources are asked for) takes the record kept the first time (`Hook._learn`): one look-up and one frame
read, instead of describing the op and walking the stack again.

Example:
    >>> from tfplace.placement.taking import _callback
    >>> _callback.thread_hooks()   # no capture open in this thread
    []
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional, Sequence

from tensorflow.core.framework import types_pb2

from tfplace import _contained, _tensorflow
from tfplace._devices import canonical_name
from tfplace._tensorflow import dtype_enum
from tfplace.placement.functions import _calls, _datasets, _dtensor, _graphs, _pipelines, _placed
from tfplace.placement.taking import _eager, _events
from tfplace.placement.records import _origins
from tfplace.placement.session import _session
from tfplace.placement.functions._function_sources import identity_line
from tfplace.placement.records._records import CUSTOM_DEVICE, CopyRecord, Origin, PlacementRecord
from tfplace.placement.session._sources import user_frame, user_line

__all__ = ["Hook", "thread_hooks"]

_ITERATING = 4096  # functions remembered as iterating a dataset they are given
_VARIANT = types_pb2.DT_VARIANT
_INPUT = Origin.INPUT
_OP, _EXPLICIT, _CUSTOM = _eager.OP, _eager.EXPLICIT, CUSTOM_DEVICE
_getframe = sys._getframe  # pylint: disable=protected-access
_DATASET_OPS = _datasets.READS | {"DatasetCardinality"}
_NOTHING_PLACED = _graphs.Placed()  # what an op that is no function call places (made once: it runs per op)
_COPYING = (_OP, _EXPLICIT)  # what an op's kind may be when its inputs can be copied implicitly
_KEPT = 8  # per op type, the deciding codes kept; per call, the (device, scope, attributes) kept


class Hook:
    """The op callback of one thread (and of the threads that inherit it)."""

    def __init__(self, session: _session.Session) -> None:
        self.session = session  # the capture session it belongs to: its caches, its threads' device scopes
        self.listeners: list[_events.Listener] = []
        self.calls: tuple[tuple[Callable, bool], ...] = ()  # each listener's on_op, and whether it keeps sources
        self.plain_calls: tuple[Callable, ...] = ()
        self.copies_only = False  # every listener hears only of eager ops that copy (and of function calls)
        self.later = False  # every listener takes a function's records when its log is read (`_graphs.Later`)
        self.outputs: tuple[tuple[Callable, bool], ...] = ()  # the listeners that count the tensors ops return
        self.counter: Optional[tuple[Callable, bool]] = None  # the one listener that counts them, where only one does
        self.sources = False
        self.thread_data = _tensorflow.thread_data()  # per thread inside
        self.lists: list[list[Callable]] = []  # the callback lists holding `callback`: its thread's, inheriting threads'
        self.sink: Optional[Callable[[PlacementRecord], None]] = None  # the one listener's writer of a record alone
        self.seen: dict[Any, list[tuple]] = {}  # op type -> the lines that ran it before, and their records (`_learn`)
        self.copying: dict[Any, bool] = {}  # op type -> whether its inputs can be copied implicitly (`_copying`)
        # What TensorFlow's callback lists hold: `__call__`, or while every listener hears only of copies,
        # `_copies_only` (`update`, which swaps them in the lists).
        self.full_callback: Callable = self.__call__
        self.copies_callback: Callable = self._copies_only
        self.callback: Callable = self.full_callback

    def update(self) -> None:
        self.calls = tuple((listener.on_op, listener.sources) for listener in self.listeners)
        self.plain_calls = tuple(listener.on_op for listener in self.listeners)  # for a record without source
        self.copies_only = bool(self.listeners) and all(getattr(listener, "copies_only", False)
                                                        for listener in self.listeners)
        self.later = bool(self.listeners) and all(getattr(listener, "later", False) for listener in self.listeners)
        self.outputs = tuple((listener.on_outputs, listener.sources) for listener in self.listeners
                             if getattr(listener, "memory", False))
        self.counter = self.outputs[0] if len(self.outputs) == 1 else None
        self.sources = any(listener.sources for listener in self.listeners)
        self.sink = getattr(self.listeners[0], "sink", None) if len(self.listeners) == 1 else None
        self.seen = {}  # its records were made for the listeners before
        callback = self.copies_callback if self.copies_only else self.full_callback
        if callback is not self.callback:
            with self.session.lock:
                for callbacks in self.lists:
                    for index, held in enumerate(callbacks):
                        if held is self.callback:
                            callbacks[index] = callback
                self.callback = callback

    def _copies_only(self, op_type: Any, inputs: Sequence[Any], attrs: Any, outputs: Any,
                     op_name: Optional[str] = None, graph: Any = None) -> None:
        """The callback while every listener hears only of copies (transfer guards alone): an eager op whose
        inputs all are where it ran is done here; any other goes on in `__call__`."""
        if graph is None and outputs and not self.session.waiting:
            copying = self.copying.get(op_type)
            if copying is None:
                copying = self._copying(op_type)
            if copying:
                full = outputs[0].device
                if _CUSTOM not in full:
                    for tensor in inputs:
                        if tensor.backing_device != full:
                            break  # (an identity under a tf.device scope copies explicitly: told apart there)
                    else:
                        return None
        return self(op_type, inputs, attrs, outputs, op_name, graph)

    def records(self, key: _events.EventKey, records: Sequence[PlacementRecord]) -> None:
        for listener in tuple(self.listeners):
            listener.on_records(key, records)

    def __call__(self, op_type: Any, inputs: Sequence[Any], attrs: Any, outputs: Any,
                 op_name: Optional[str] = None, graph: Any = None) -> None:
        # It runs per eager op: every statement counts (`benchmarks/bench_callback.py`). An op this thread ran
        # before from the same line, with the same device, scope and attributes, is one look-up (`seen`); any
        # other op that is no function call, iterator or DTensor op is done here; the others go on in `_called()`.
        try:
            session = self.session
            if session.waiting:  # a function's tracing (graph) may come before the first eager op
                _graphs.start()
            if graph is not None:  # an op made while a function is traced: what its maker says, read here
                if session.watchers:  # from the live stack, where repeated makers are known (`_function_sources`)
                    name = outputs[0].op.name if outputs else op_name
                    made = session.made_by.get(graph)
                    if made is None:
                        made = session.made_by.setdefault(graph, {})
                    made[name] = _origins.live(1, shortcut=False)
                    if session.line_watchers:  # and the user's line
                        lines = session.lines_made.get(graph)
                        if lines is None:
                            lines = session.lines_made.setdefault(graph, {})
                        lines[name] = identity_line(op_type, _getframe(1))
                return None
            if not self.calls:
                return None
            full = outputs[0].device if outputs else _eager.device_of(inputs)
            if self.copies_only:  # no listener wants an eager op whose inputs all are where it ran (guards alone)
                copying = self.copying.get(op_type)
                if copying is None:
                    copying = self._copying(op_type)
                if copying and _CUSTOM not in full:  # (an op without outputs, or one `_copies_only` did not decide)
                    for tensor in inputs:
                        if tensor.backing_device != full:
                            break  # (an identity under a tf.device scope copies explicitly: told apart below)
                    else:
                        return None
            try:
                requested, scope_by = session.asked.scope
            except AttributeError:  # this thread's first op since the patches went in
                requested, scope_by = self._asked(session.asked)
            known = None
            groups = self.seen.get(op_type)
            if groups is not None:  # the frame that decided its origin, at the same depth, at the same call
                for depth, code, sites in groups:
                    try:
                        frame = _getframe(depth)
                    except ValueError:  # the stack is shallower this time
                        continue
                    if frame.f_code is code:
                        for entry in sites.get(frame.f_lasti, ()):
                            if (entry[1] == full and entry[2] == requested and entry[3] == scope_by and entry[4] == attrs
                                    and (entry[0] is None or _same_call(*entry[0]))):
                                known = entry
                                break
                        break
            if known is not None:
                moved = False
                if known[7] == _OP:
                    for tensor in inputs:
                        if tensor.backing_device != full:
                            moved = True
                            break
                if not moved:
                    record, plain = known[5], known[6]
                    sink = self.sink
                    if sink is not None:
                        sink(record)
                    else:
                        for call, sources in self.calls:
                            call(record if sources else plain, ())
                    counter = self.counter
                    if counter is not None:
                        counter[0](record if counter[1] else plain, outputs)
                    elif self.outputs:
                        for call, sources in self.outputs:
                            call(record if sources else plain, outputs)
                    return None
            try:
                op, kind, record = session.described[(op_type, full, requested, attrs)]
            except (KeyError, TypeError):
                op, kind, record = _describe(session, op_type, full, requested, attrs)
            learn = (kind == _OP or kind == _EXPLICIT) and op not in _DATASET_OPS and _CUSTOM not in full
            decider = user = None
            source = ""
            if learn:  # read from the live stack, kept for the next time this line runs it (`_learn`)
                origin, depth, decider = _origins.deciding(_getframe(1))
                origin = origin or Origin.USER
                if self.sources:
                    user_depth, user, source = user_frame(_getframe(1))
                    if user is not None and (user_depth != depth or user is not decider):
                        user = (user_depth + 1, user.f_code, user.f_lasti)
                    else:
                        user = None
            elif record.origin != _INPUT:  # read from the live stack: `_origins.live(1)`, its shortcut inlined
                origin = ""
                shortcut = session.origin_shortcuts.get(id(_getframe(1).f_code))
                if shortcut is not None:
                    depth, code, inner, verdict = shortcut
                    try:
                        if _getframe(1 + depth).f_code is code and (depth == 0 or _getframe(depth).f_code is inner):
                            origin = verdict
                    except ValueError:  # the stack is shallower this time
                        pass
                if not origin:
                    origin = _origins.live(1) or Origin.USER
            if record.origin != _INPUT:
                by = scope_by if record.requested else ""
                if by or origin != record.origin:  # keyed on the cached record's identity: hashing a record is slow
                    noted = (id(record), origin, by)  # (the caches are cleared together: an id is never stale)
                    record = session.noted.get(noted) or session.noted.setdefault(
                        noted, record._replace(origin=origin, requested_by=by))
            copies: Sequence[CopyRecord] = ()
            if kind == _OP:
                if _CUSTOM in full:
                    return self._called(session, op, kind, record, full, inputs, attrs, outputs)
                for tensor in inputs:
                    if tensor.backing_device != full:
                        copies = _eager.copies(op, inputs, full, record.device)
                        break
                if op in _DATASET_OPS:  # what fills a cache() (tfplace.placement.functions._datasets)
                    if op == "DatasetCardinality":
                        _datasets.cardinality(inputs[0], outputs[0])
                    elif _datasets.reading():
                        _datasets.read(inputs[:1], 1)
            elif kind != _EXPLICIT:
                return self._called(session, op, kind, record, full, inputs, attrs, outputs)
            plain = record
            if self.sources or copies:
                record, copies = self._sourced(session, record, copies, source)
                for call, sources in self.calls:  # a listener that did not ask for sources gets none
                    call(record if sources else plain, copies)
            else:
                for call in self.plain_calls:
                    call(record, copies)
            if self.outputs:
                for call, sources in self.outputs:
                    call(record if sources else plain, outputs)
            if decider is not None and not copies:
                self._learn(op_type, (user, full, requested, scope_by, attrs, record, plain, kind), depth + 1, decider)
            return None
        except _contained.ON_PURPOSE:  # a guard's verdict on the program's op
            raise
        except Exception as error:  # pylint: disable=broad-except
            _contained.failed("op callback", error)
        return None

    def _asked(self, asked: Any) -> tuple[Optional[str], str]:
        """This thread's `tf.device` scope and who entered it, where `_hooks` has not mirrored them yet."""
        asked.scope = (self.thread_data.device_name, "")
        return asked.scope

    def _copying(self, op_type: Any) -> bool:
        """Whether an eager op of this type reads inputs that may be copied implicitly (no function call,
        iterator or dataset op: those are looked at whole), found once per type."""
        op, kind = _eager.kind_of(op_type)
        copying = self.copying[op_type] = kind in _COPYING and op not in _DATASET_OPS
        return copying

    def _learn(self, op_type: Any, entry: tuple, depth: int, decider: Any) -> None:
        """Keeps an eager op's record for the next time this thread runs an op of its type from the same call
        (`__call__`'s first look-up): the frame that decided its origin (`depth` frames out of the callback) is
        then the same code at the same instruction, and where the user's line is further out, that frame too.
        Per op type, a few deciding codes, each with its calls and a few (device, scope, attributes) each."""
        groups = self.seen.get(op_type)
        if groups is None:
            groups = self.seen[op_type] = []
        code = decider.f_code
        for group in groups:
            if group[0] == depth and group[1] is code:
                sites = group[2]
                break
        else:
            if len(groups) >= _KEPT:
                groups.clear()
            sites = {}
            groups.append((depth, code, sites))
        entries = sites.setdefault(decider.f_lasti, [])
        if len(entries) >= _KEPT:
            entries.clear()
        entries.append(entry)

    def _sourced(self, session: _session.Session, record: PlacementRecord, copies: Sequence[CopyRecord],
                 source: str = "") -> tuple[PlacementRecord, Sequence[CopyRecord]]:
        """The record with the user's line (`source`, else read here; when a listener asks for sources) and the
        copies with it."""
        source = source or user_line()
        if copies:
            copies = _with_line(copies, record.op, source)
        if self.sources:
            sourced = (id(record), source)
            record = session.sourced.get(sourced) or session.sourced.setdefault(sourced, record._replace(source=source))
        return record, copies

    def _called(self, session: _session.Session, op: str, kind: int, record: PlacementRecord, full: str,
                inputs: Sequence[Any], attrs: Any, outputs: Any) -> None:
        """The rest of `__call__` for a function call, an iterator's making and an op on DTensor's device:
        what they placed, ran and moved, and the records of the datasets they read."""
        placed = waiting = False
        ran = found = _NOTHING_PLACED
        copies: Sequence[CopyRecord] = ()
        later: Optional[tuple[_events.EventKey, Sequence[PlacementRecord]]] = None
        unseen = ""
        uncertain: Sequence[PlacementRecord] = ()  # records of `unseen`'s functions, where it names some
        executed: Sequence[PlacementRecord] = ()
        if kind <= _eager.FUNCTION and _CUSTOM in full:  # DTensor's device: per-device functions (`_dtensor`)
            host = _dtensor.on_host(op) if kind == _OP else ""
            if host:  # one eager op on the host, its result broadcast: no function of DTensor's ran
                executed = (record._replace(device=canonical_name(host), requested="", requested_by=""),)
            else:
                collected = _graphs.collect_dtensor(op, record.origin)
                mesh = _dtensor.after(_dtensor.key(op, attrs, inputs), collected)
                found, placed = collected.placed, collected.placed.functions > 0
                ran, copies, executed = mesh.placed, mesh.placed.transfers, mesh.executed
                kind = _eager.FUNCTION  # listeners hear of it as of a function call (its records, its runs)
        elif kind == _eager.FUNCTION:
            if _placed.is_xla(op):
                later = _events.EventKey(_events.Event.COMPILED, op, record.device), _placed.compiled_records(op, full)
                placed = True
                ran = _graphs.Placed(1, later[1], runs=_placed.compiled_runs(op, full))
            else:
                found = _graphs.collect(op, _graphs.in_flight_elsewhere(session), (op, full, _calls.argument_devices(inputs)),
                                        later=self.later)
                placed = found.functions > 0 or bool(found.unseen)
                unseen = found.unseen
                ran = _calls.after(op, full, inputs, found)
                # a call that can move tensors, whose records wait for its listeners' logs: its transfers too
                waiting = self.later and isinstance(ran, _graphs.Later) and not ran.made and ran.moves
                # the tf.data functions the call's iterators instantiate: again at every call
                copies = (() if waiting else ran.transfers) + (found.dataset_transfers if placed else ran.dataset_transfers)
                if _datasets.reading():
                    _datasets.read_in_call(inputs, ran.records)
                # its iterators instantiate the dataset's functions at every call: looked up at its first call, and
                # at later ones where that found a dataset (another variant, a TensorList, needs no look-up per call)
                iterates = _session.runtime().iterating
                for tensor in inputs if placed or op in iterates else ():
                    if dtype_enum(tensor) == _VARIANT:  # pylint: disable=protected-access
                        pipeline = _datasets.pipeline_of(tensor)
                        if pipeline is not None:
                            if placed and len(iterates) < _ITERATING:
                                iterates.add(op)
                            records, moved = _pipelines.iterator_placement(pipeline, full)
                            later, copies = (_events.EventKey(_events.Event.DATASET, op), records), copies + moved
                            if pipeline.unseen and not unseen:
                                unseen, uncertain = pipeline.unseen, _pipelines.uncertain_records(pipeline, full)
        elif kind == _eager.ITERATOR and inputs:
            own = tuple(_eager.function_name(attrs[i + 1]) for i in range(0, len(attrs), 2) if attrs[i] == "f")
            pipeline = _datasets.pipeline_of(inputs[0], own, iterator=inputs[1] if len(inputs) > 1 else None)
            if pipeline is not None:
                records, copies = _pipelines.iterator_placement(pipeline, full)
                later = _events.EventKey(_events.Event.DATASET, op), records
                unseen = pipeline.unseen
                uncertain = _pipelines.uncertain_records(pipeline, full) if unseen else ()
        plain = record
        if waiting:  # the call's transfers are made when its listeners' logs are read, with its line read now
            source = user_line()
            record = self._sourced(session, record, (), source)[0]
            waited, moved = ran, tuple(copies)

            def made() -> list[CopyRecord]:
                return _with_line(waited.transfers + moved, plain.op, source)

            for listener in tuple(self.listeners):
                listener.on_op_later(record if listener.sources else plain, made)
        else:
            if self.sources or copies:
                record, copies = self._sourced(session, record, copies)
            for call, sources in self.calls:  # a listener that did not ask for sources gets none
                call(record if sources else plain, copies)
        for call, sources in self.outputs:
            call(record if sources else plain, outputs)
        if kind == _eager.FUNCTION:
            if isinstance(found, _graphs.Later) and not found.made:  # its records, made when its listeners' logs are read
                if found.functions:
                    self.records(_events.EventKey(_events.Event.PLACED, op), found)
            elif found.instantiated:
                self.records(_events.EventKey(_events.Event.PLACED, op), found.instantiated)
            elif not placed and ran.datasets:
                self.records(_events.EventKey(_events.Event.DATASET, op), ran.datasets)
            for listener in tuple(self.listeners):
                listener.on_function(record, placed, ran)
        if executed:
            self.records(_events.EventKey(_events.Event.DTENSOR, op), executed)
        if later is not None:
            self.records(*later)
        if unseen:
            self.records(_events.EventKey(_events.Event.UNSEEN, unseen), uncertain)
        return None


def _describe(session: _session.Session, op_type: Any, full: str, requested: Optional[str], attrs: Any) -> tuple:
    """(op type, what it is, its record without source) of an eager op, described once per session and kept
    (`_eager.describe`); keyed on the type attributes alone where an attribute is a list (strides)."""
    described = session.described
    try:
        key: tuple = (op_type, full, requested, attrs)
        hash(key)
    except TypeError:  # a list-valued attribute
        key = (op_type, full, requested, _eager.type_values(op_type, attrs))
    known = described.get(key)
    if known is None:
        known = _eager.describe(op_type, full, requested, _eager.type_values(op_type, attrs))
        if len(described) > 100_000:  # caches, bounded: records are made again when needed
            described.clear()
            session.noted.clear()
            session.sourced.clear()
        described[key] = known
    return known


def _with_line(copies: Sequence[CopyRecord], op: str, source: str) -> list[CopyRecord]:
    """Copies with the user's line of the op that made them (`source`): a function's transfer (a call's, or a
    tf.data function's) has its node's line, and the call's as its `call` (`op`: the function called)."""
    return [copy._replace(function=copy.function or op, call=source) if copy.kind == "function"
            else copy._replace(source=source) for copy in copies]


def _same_call(depth: int, code: Any, lasti: int) -> bool:
    """The frame `depth` frames out of the op callback runs `code` at instruction `lasti`."""
    try:
        frame = _getframe(depth + 1)
    except ValueError:
        return False
    return frame.f_code is code and frame.f_lasti == lasti


def thread_hooks() -> list[Hook]:
    """The hooks this thread runs: its own, or those it inherited (replica threads)."""
    return [c.__self__ for c in _tensorflow.op_callbacks() if isinstance(getattr(c, "__self__", None), Hook)]
