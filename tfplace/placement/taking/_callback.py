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
from types import CodeType
from typing import Any, Callable, Optional, Sequence, cast

from tfplace import _contained, _tensorflow
from tfplace.placement.functions import _datasets, _graphs
from tfplace.placement.functions._function_sources import made_in_graph
from tfplace.placement.records import _origins
from tfplace.placement.records._records import CUSTOM_DEVICE, CopyRecord, Origin, PlacementRecord
from tfplace.placement.session import _session
from tfplace.placement.session._sources import user_frame, user_line
from tfplace.placement.taking import _eager, _events, _function_calls

__all__ = ["Hook", "thread_hooks"]

_INPUT = Origin.INPUT
_OP, _EXPLICIT, _CUSTOM = _eager.OP, _eager.EXPLICIT, CUSTOM_DEVICE
_getframe = sys._getframe  # pylint: disable=protected-access
_DATASET_OPS = _datasets.READS | {"DatasetCardinality"}
_COPYING = (_OP, _EXPLICIT)  # what an op's kind may be when its inputs can be copied implicitly
_KEPT = 8  # per op type, the deciding codes kept; per call, the (device, scope, attributes) kept
_RECENT = 64  # the graph's last ops searched for one another op callback made its outputs hide (`_made_name`)
# the host, where a kernel wants its int32 host-memory arguments (`_eager.copies_to_host`)
_HOST_DEVICE = "/device:CPU:0"


class Hook:
    """The op callback of one thread (and of the threads that inherit it)."""

    def __init__(self, session: _session.Session) -> None:
        self.session = session  # the capture session it belongs to: its caches, its threads' device scopes
        self.listeners: list[_events.Listener] = []
        self.calls: tuple[tuple[Callable, bool], ...] = ()  # each listener's on_op, and whether it keeps sources
        self.plain_calls: tuple[Callable, ...] = ()
        self.copies_only = False  # every listener hears only of eager ops that copy (and of function calls)
        self.later = False  # every listener takes a function's records when its log is read (`_collected.Later`)
        self.outputs: tuple[tuple[Callable, bool], ...] = ()  # the listeners that count the tensors ops return
        self.counter: Optional[tuple[Callable, bool]] = None  # the one listener that counts them, where only one does
        self.sources = False
        self.thread_data = _tensorflow.thread_data()  # per thread inside
        # the callback lists holding `callback`: its thread's, inheriting threads'
        self.lists: list[list[Callable]] = []
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
        self.outputs = tuple((cast(_events.CountingListener, listener).on_outputs, listener.sources)
                             for listener in self.listeners if getattr(listener, "memory", False))
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
        if graph is None and outputs and not self.session.waiting and self._stays(op_type, inputs, outputs[0].device):
            return None
        return self(op_type, inputs, attrs, outputs, op_name, graph)

    def _stays(self, op_type: Any, inputs: Sequence[Any], full: str) -> bool:
        """True for an eager op that copies nothing implicitly: its type can copy its inputs, it ran on no custom
        device, and every input is where it ran (an identity under a tf.device scope copies explicitly: told
        apart in `__call__`)."""
        copying = self.copying.get(op_type)
        if copying is None:
            copying = self._copying(op_type)
        if not copying or _CUSTOM in full:
            return False
        for tensor in inputs:
            if tensor.backing_device != full:
                return False
        return full.endswith(_HOST_DEVICE) or not _eager.copies_to_host(op_type, full)

    def on_host(self, op_type: bytes, attrs: tuple) -> None:
        """An op TensorFlow's C++ runs on the host where no op callback hears it (a conversion's `Cast`),
        recorded as an eager op there, with its origin and line read from the live stack."""
        try:
            if not self.calls:
                return
            session = self.session
            op, _, record = _eager.described(session, op_type, _tensorflow.host_cpu(), "", attrs)
            origin = _origins.live(1) or Origin.USER
            if origin != record.origin:  # kept in the session, as `__call__` keeps them: caches key on identity
                noted = (id(record), origin, "")
                record = session.noted.get(noted) or session.noted.setdefault(noted, record._replace(origin=origin))
            plain = record
            if self.sources:
                record, _ = self.sourced(session, record, ())
            for call, sources in self.calls:
                call(record if sources else plain, ())
        except Exception as error:  # pylint: disable=broad-except  # tfplace's own failure, never the program's
            _contained.failed("the host op hook", error)

    def records(self, key: _events.EventKey, records: Sequence[PlacementRecord]) -> None:
        for listener in tuple(self.listeners):
            listener.on_records(key, records)

    def __call__(self, op_type: Any, inputs: Sequence[Any], attrs: Any, outputs: Any,
                 op_name: Optional[str] = None, graph: Any = None) -> None:
        # It runs per eager op: every statement counts (`benchmarks/bench_callback.py`). An op this thread ran
        # before from the same line, with the same device, scope and attributes, is one look-up (`seen`); any
        # other op that is no function call, iterator or DTensor op is done here; the others go on in
        # `_function_calls.called()`.
        try:
            session = self.session
            if session.waiting:  # a function's tracing (graph) may come before the first eager op
                _graphs.start()
            if graph is not None:  # an op made while a function is traced: what its maker says, read here
                if session.watchers:  # from the live stack, where repeated makers are known (`_function_sources`)
                    made_in_graph(session, graph, _made_name(op_type, outputs, op_name, graph), op_type,
                                  _getframe(1))
                return None
            if not self.calls:
                return None
            full = outputs[0].device if outputs else _eager.device_of(inputs)
            # no listener wants an eager op whose inputs all are where it ran (guards alone): an op without outputs,
            # or one `_copies_only` did not decide
            if self.copies_only and self._stays(op_type, inputs, full):
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
                            if (entry[1] == full and entry[2] == requested and entry[3] == scope_by
                                    and entry[4] == attrs and (entry[0] is None or _same_call(*entry[0]))):
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
                op, kind, record = _eager.described(session, op_type, full, requested, attrs)
            learn = (kind == _OP or kind == _EXPLICIT) and op not in _DATASET_OPS and _CUSTOM not in full
            user: Optional[tuple[int, CodeType, int]]  # the user's frame (depth, code, instruction), if not `decider`
            decider = user = None
            source = ""
            if learn:  # read from the live stack, kept for the next time this line runs it (`_learn`)
                origin, depth, decider = _origins.deciding(_getframe(1))
                origin = origin or Origin.USER
                if self.sources:
                    user_depth, found, source = user_frame(_getframe(1))
                    if found is not None and (user_depth != depth or found is not decider):
                        user = (user_depth + 1, found.f_code, found.f_lasti)
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
                    return _function_calls.called(self, session, op, kind, record, full, inputs, attrs, outputs)
                for tensor in inputs:
                    if tensor.backing_device != full:
                        copies = _eager.copies(op, inputs, full, record.device)
                        break
                else:
                    if inputs and not full.endswith(_HOST_DEVICE) and _eager.copies_to_host(op, full):
                        copies = _eager.copies(op, inputs, full, record.device)
                if op in _DATASET_OPS:  # what fills a cache() (tfplace.placement.functions._datasets)
                    if op == "DatasetCardinality":
                        _datasets.cardinality(inputs[0], outputs[0])
                    elif _datasets.reading():
                        _datasets.read(inputs[:1], 1)
            elif kind != _EXPLICIT:
                return _function_calls.called(self, session, op, kind, record, full, inputs, attrs, outputs)
            plain = record
            if self.sources or copies:
                record, copies = self.sourced(session, record, copies, source)
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

    def sourced(self, session: _session.Session, record: PlacementRecord, copies: Sequence[CopyRecord],
                 source: str = "") -> tuple[PlacementRecord, Sequence[CopyRecord]]:
        """The record with the user's line (`source`, else read here; when a listener asks for sources) and the
        copies with it."""
        source = source or user_line()
        if copies:
            copies = _eager.with_line(copies, record.op, source)
        if self.sources:
            sourced = (id(record), source)
            record = session.sourced.get(sourced) or session.sourced.setdefault(sourced, record._replace(source=source))
        return record, copies


def _made_name(op_type: str, outputs: Any, op_name: Optional[str], graph: Any) -> str:
    """The name of the op of type `op_type` just made in `graph`. Its outputs' op where they are its own; but
    another op callback may run before this one and hand on what it returned instead: None, or tensors of
    ops it made itself (a numerics checker's). Then the op TensorFlow named (`op_name`; a constant or
    placeholder made without a name comes with None), else the graph's last op of that type."""
    if outputs:
        op = outputs[0].op
        if op.type == op_type:
            return str(op.name)
    if op_name is not None:
        try:
            if graph.get_operation_by_name(op_name).type == op_type:
                return op_name
        except (KeyError, ValueError):  # a name asked for, which the graph made unique or put in a name scope
            pass
    operations = graph.get_operations()
    for op in reversed(operations[-_RECENT:]):
        if op.type == op_type:
            return str(op.name)
    return op_name or ""


def _same_call(depth: int, code: Any, lasti: int) -> bool:
    """The frame `depth` frames out of the op callback runs `code` at instruction `lasti`."""
    try:
        frame = _getframe(depth + 1)
    except ValueError:
        return False
    return frame.f_code is code and frame.f_lasti == lasti


def thread_hooks() -> list[Hook]:
    """The hooks this thread runs: its own, or those it inherited (replica threads)."""
    return [hook for hook in (getattr(c, "__self__", None) for c in _tensorflow.op_callbacks())
            if isinstance(hook, Hook)]
