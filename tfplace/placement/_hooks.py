"""TensorFlow's op callbacks, turned into placement events for captures and guards.

`listening(listener)` registers one op callback for the calling thread and
calls, for every eager op of the block:

* `listener.on_op(record, copies)` after the op ran: `record` its
  "execute" `PlacementRecord` (with its source line when a listener asked for
  `sources`); `copies` its implicit copies (`CopyRecord`s): inputs whose memory
  (`backing_device`) is elsewhere than the op needs it, except resource
  handles and explicit copies (`tf.identity` under a device,
  `tfplace.to_device`); values TensorFlow keeps in host memory (strings, int32
  on accelerators, a kernel's host-memory arguments) are needed on the host;
* `listener.on_outputs(record, outputs)` after `on_op`, for a listener whose `memory` is True:
  the tensors the op or function call returned;
* `listener.on_function(record, placed, ran)` after a function call's `on_op`:
  whether TensorFlow placed the function just now (True) or earlier (False), and
  what that call ran (`_graphs.Placed`: its nodes' records and transfers, as
  collected when TensorFlow placed it, in this capture or an earlier one; a
  function call's `copies` in `on_op` are its transfers, `kind="function"`);
* `listener.on_records(key, records)` for the functions an op runs, `key` an `EventKey` naming
  the event (so that a listener can keep it once): `Event.PLACED` (`about` the function) with the
  nodes TensorFlow placed for this thread's call of it (and the `tf.data` functions they
  instantiate), as graph collection reports them (a graph another thread's call placed goes to
  that thread's listeners); for what graph collection does not report: `Event.COMPILED` with an
  XLA function's "compiled" nodes (`device` where it ran), `Event.DATASET` with the `tf.data`
  functions an iterator instantiates, `Event.FAILED` (`about` the error's id) with a "failed"
  record when an eager op raises; `Event.UNSEEN` (`about` the reason) and no records when a
  function call's graph cannot be told apart (TensorFlow's collection merged it with another
  thread's), or when an iterator runs functions that no hook can count.

Threads: the threads TensorFlow starts for the block inherit the callback
(`MirroredStrategy`'s replica threads, the thread pool of a collective
all-reduce, the threads that run `tf.py_function`); a listener whose
`all_threads` is True also gets the ops of every Python thread started while
it listens. When the last listener of the process leaves, every patch and
callback is removed: nothing stays behind. An interrupt (`KeyboardInterrupt`)
that leaves the block with tfplace's frames at the end of its traceback (it
landed in the op callback) has them cut: its traceback ends at the user's line.

Example:
    >>> import tensorflow as tf
    >>> from tfplace.placement import _hooks
    >>> class Printer:
    ...     sources = all_threads = False
    ...     def on_op(self, record, copies):
    ...         print(record.op, record.device)
    ...     def on_function(self, record, placed, call):
    ...         pass
    ...     def on_records(self, key, records):
    ...         pass
    >>> x = tf.ones(2)
    >>> with _hooks.listening(Printer()):
    ...     _ = x * 3.0
    Mul /device:CPU:0
"""

from __future__ import annotations

import contextlib
import enum
import functools
import re
import threading
from typing import Any, Callable, Iterator, NamedTuple, Optional, Protocol, Sequence

import tensorflow as tf
from tensorflow.core.framework import types_pb2

from tfplace import _tensorflow
from tfplace._devices import canonical_name, parse_device, requested_name
from tfplace._tensorflow import dtype_enum
from tfplace.placement import _calls, _datasets, _graphs, _kernels, _origins, _pipelines, _placed, _session, _transfers
from tfplace.placement._records import CopyRecord, Kind, Origin, PlacementRecord, is_function_call
from tfplace.placement._sources import end_at_user, started_by_framework, user_line

__all__ = ["Listener", "listening", "EXPLICIT_COPIES"]

EXPLICIT_COPIES = _transfers.EXPLICIT_COPIES
_ON_HOST = frozenset({types_pb2.DT_STRING, types_pb2.DT_RESOURCE})
_RESOURCE = types_pb2.DT_RESOURCE
_INT32 = types_pb2.DT_INT32
_VARIANT = types_pb2.DT_VARIANT
_HOST = "/job:localhost/replica:0/task:0/device:CPU:0"
class Listener(Protocol):
    """What `listening()` calls."""

    sources: bool
    all_threads: bool

    def on_op(self, record: PlacementRecord, copies: Sequence[CopyRecord]) -> None:
        ...

    def on_function(self, record: PlacementRecord, placed: bool, call: "_graphs.Placed") -> None:
        ...

    def on_records(self, key: EventKey, records: Sequence[PlacementRecord]) -> None:
        ...


class Event(str, enum.Enum):
    """What `on_records` hands a listener (see the module's docstring)."""

    PLACED = "placed"
    COMPILED = "compiled"
    DATASET = "dataset"
    FAILED = "failed"
    UNSEEN = "unseen"


class EventKey(NamedTuple):
    """Names one `on_records` event: `event`, what it is `about` (a function's name, an error's id,
    a reason) and, for compiled functions, the `device` they ran on."""

    event: Event
    about: Any
    device: str = ""


@functools.lru_cache(maxsize=4096)
def _type_attrs(op: str) -> frozenset[str]:
    op_def = _tensorflow.op_def(op)
    if op_def is None:
        return frozenset()
    return frozenset(a.name for a in op_def.attr if a.type in ("type", "list(type)"))


@functools.lru_cache(maxsize=4096)
def _dtypes(values: tuple) -> tuple[tuple[str, str], ...]:
    def name(value: Any) -> str:
        if isinstance(value, (list, tuple)):
            return ",".join(_kernels.dtype_name(v) for v in value)
        return _kernels.dtype_name(value)

    return tuple((key, name(value)) for key, value in values if value != ())


def _type_values(op_type: Any, attrs: Any) -> tuple:
    op = op_type.decode() if isinstance(op_type, bytes) else op_type
    names = _type_attrs(op)
    if not names or not attrs:
        return ()
    return tuple(dict((attrs[i], tuple(attrs[i + 1]) if isinstance(attrs[i + 1], list) else attrs[i + 1])
                      for i in range(0, len(attrs), 2) if attrs[i] in names).items())


def _function_name(value: Any) -> str:
    """The name in a function-valued attribute of an eager op (a name, bytes or a NameAttrList)."""
    name = getattr(value, "name", value)
    return name.decode() if isinstance(name, bytes) else str(name)


def _host_of(full: str) -> str:
    return full.rpartition("/device:")[0] + "/device:CPU:0" if "/device:" in full else _HOST


def _copies(op: str, inputs: Sequence[Any], full: str, device: str) -> list[CopyRecord]:
    """Inputs whose memory is elsewhere than where the op needs them."""
    found: list[CopyRecord] = []
    device_type = parse_device(device).device_type
    host_inputs = _kernels.host_memory_inputs(op, device_type, len(inputs))
    host = _host_of(full)
    for index, tensor in enumerate(inputs):
        dtype = dtype_enum(tensor)
        if dtype == _RESOURCE:
            continue
        on_host = dtype in _ON_HOST or (dtype == _INT32 and device_type != "CPU") or index in host_inputs
        where = tensor.backing_device
        if on_host and "/device:CPU:" in where:
            continue  # host memory is any CPU's memory: TensorFlow reads it where it is
        if where and where != (host if on_host else full):
            dtype = _kernels.dtype_name(dtype)
            size = _tensorflow.dtype_size(dtype)
            found.append(CopyRecord(op, index, canonical_name(where), canonical_name(host if on_host else full),
                                    dtype=dtype, bytes=None if size is None else size * tensor.shape.num_elements()))
    return found


# What an eager op is, for the op callback: an op whose inputs may be copied, a function call,
# an op making an iterator (it instantiates tf.data functions), or an op that copies explicitly.
_OP, _FUNCTION, _ITERATOR, _EXPLICIT = range(4)
_DATASET_OPS = _datasets.READS | {"DatasetCardinality"}


def _describe(op_type: Any, full: str, requested: Optional[str], types: tuple) -> tuple[str, int, PlacementRecord]:
    """(op type, what it is, its record without source) of an eager op."""
    op = op_type.decode() if isinstance(op_type, bytes) else op_type
    if is_function_call(op) and _tensorflow.op_def(op) is None:
        kind = _FUNCTION
    else:
        op = _kernels.op_type(op)
        kind = _ITERATOR if op in _pipelines.ITERATOR_OPS else _EXPLICIT if op in EXPLICIT_COPIES else _OP
    record = PlacementRecord(op, "", canonical_name(full), Kind.EXECUTE, requested=requested_name(requested),
                             dtypes=_dtypes(types), origin=_origins.of_op(op, ""))
    return op, kind, record


class _Hook:
    """The op callback of one thread (and of the threads that inherit it)."""

    def __init__(self, session: _session.Session) -> None:
        self.session = session  # the capture session it belongs to: its caches, its threads' device scopes
        self.listeners: list[Listener] = []
        self.calls: tuple[tuple[Callable, bool], ...] = ()  # each listener's on_op, and whether it keeps sources
        self.outputs: tuple[tuple[Callable, bool], ...] = ()  # the listeners that count the tensors ops return
        self.sources = False
        self.thread_data = _tensorflow.thread_data()  # per thread inside
        self.lists: list[list[Callable]] = []  # the callback lists holding this hook: its thread's, inheriting threads'

    def update(self) -> None:
        self.calls = tuple((listener.on_op, listener.sources) for listener in self.listeners)
        self.outputs = tuple((listener.on_outputs, listener.sources) for listener in self.listeners
                             if getattr(listener, "memory", False))
        self.sources = any(listener.sources for listener in self.listeners)

    def records(self, key: EventKey, records: Sequence[PlacementRecord]) -> None:
        for listener in tuple(self.listeners):
            listener.on_records(key, records)

    def __call__(self, op_type: Any, inputs: Sequence[Any], attrs: Any, outputs: Any,
                 op_name: Optional[str] = None, graph: Any = None) -> None:
        session = self.session
        if session.waiting:  # a function's tracing (graph) may come before the first eager op
            _graphs.start()
        if graph is not None or not self.calls:
            return None
        full = outputs[0].device if outputs else _device_of(inputs)
        asked = session.asked
        try:
            requested = asked.name
        except AttributeError:  # this thread's first op since the patches went in
            requested = asked.name = self.thread_data.device_name
        described = session.described
        try:
            known = described[(op_type, full, requested, attrs)]
        except KeyError:
            known = _describe(op_type, full, requested, _type_values(op_type, attrs))
            if len(described) > 100_000:  # caches, bounded: records are made again when needed
                described.clear()
                session.noted.clear()
                session.sourced.clear()
            described[(op_type, full, requested, attrs)] = known
        except TypeError:  # a list-valued attribute (strides): key on the type attributes alone
            types = _type_values(op_type, attrs)
            known = described.get((op_type, full, requested, types)) or described.setdefault(
                (op_type, full, requested, types), _describe(op_type, full, requested, types))
        op, kind, record = known
        origin = Origin.INPUT if record.origin == Origin.INPUT else _origins.live(1) or Origin.USER
        by = getattr(asked, "by", "") if record.requested else ""
        if by or origin != record.origin:
            noted = (record, origin, by)
            record = session.noted.get(noted) or session.noted.setdefault(
                noted, record._replace(origin=origin, requested_by=by))
        placed = False
        ran = found = _graphs.Placed()
        copies: Sequence[CopyRecord] = ()
        later: Optional[tuple[EventKey, Sequence[PlacementRecord]]] = None
        unseen = ""
        if kind == _OP:
            for tensor in inputs:
                if tensor.backing_device != full:
                    copies = _copies(op, inputs, full, record.device)
                    break
            if op in _DATASET_OPS:  # what fills a cache() (tfplace.placement._datasets)
                if op == "DatasetCardinality":
                    _datasets.cardinality(inputs[0], outputs[0])
                elif _datasets.reading():
                    _datasets.read(inputs[:1], 1)
        elif kind == _FUNCTION:
            if _placed.is_xla(op):
                later = EventKey(Event.COMPILED, op, record.device), _placed.compiled_records(op, full)
                placed = True
                ran = _graphs.Placed(1, later[1])
            else:
                me = threading.get_ident()
                found = _graphs.collect(op, frozenset(name for thread, name in tuple(session.in_flight.items())
                                                      if thread != me))
                placed = found.functions > 0 or bool(found.unseen)
                unseen = found.unseen
                ran = _calls.after(op, full, inputs, found)
                copies = ran.transfers
                if _datasets.reading():
                    _datasets.read_in_call(inputs, ran.records)
                for tensor in inputs if placed else ():
                    if dtype_enum(tensor) == _VARIANT:  # pylint: disable=protected-access
                        pipeline = _datasets.pipeline_of(tensor)
                        if pipeline is not None:
                            later = EventKey(Event.DATASET, op), _pipelines.iterator_records(pipeline, full)
                            unseen = unseen or pipeline.unseen
        elif kind == _ITERATOR and inputs:
            own = tuple(_function_name(attrs[i + 1]) for i in range(0, len(attrs), 2) if attrs[i] == "f")
            pipeline = _datasets.pipeline_of(inputs[0], own, iterator=inputs[1] if len(inputs) > 1 else None)
            if pipeline is not None:
                later = EventKey(Event.DATASET, op), _pipelines.iterator_records(pipeline, full)
                unseen = pipeline.unseen
        plain = record
        if self.sources or copies:
            source = user_line()
            if kind == _FUNCTION:
                copies = [copy._replace(function=op, call=source) for copy in copies]
            elif copies:
                copies = [copy._replace(source=source) for copy in copies]
            if self.sources:
                sourced = (record, source)
                record = session.sourced.get(sourced) or session.sourced.setdefault(sourced, record._replace(source=source))
        for call, sources in self.calls:  # a listener that did not ask for sources gets none
            call(record if sources else plain, copies)
        for call, sources in self.outputs:
            call(record if sources else plain, outputs)
        if kind == _FUNCTION:
            if found.instantiated:
                self.records(EventKey(Event.PLACED, op), found.instantiated)
            for listener in tuple(self.listeners):
                listener.on_function(record, placed, ran)
        if later is not None:
            self.records(*later)
        if unseen:
            self.records(EventKey(Event.UNSEEN, unseen), ())
        return None


def _device_of(inputs: Sequence[Any]) -> str:
    """Where an op without outputs ran: with its resource, else where it was asked to run."""
    for tensor in inputs:
        if dtype_enum(tensor) == _RESOURCE:  # pylint: disable=protected-access
            return tensor.device
    return _tensorflow.device_name() or _HOST


def _thread_hooks() -> list[_Hook]:
    """The hooks this thread runs: its own, or those it inherited (replica threads)."""
    return [c for c in _tensorflow.op_callbacks() if isinstance(c, _Hook)]


# An eager op that raises: TensorFlow's message names the op ("[Op:MatMul]") and, when a
# kernel ran, its device ("{{function_node __wrapped__MatMul_device_/job:.../device:CPU:0}}").
_FAILED_OP = re.compile(r"\[Op:([^\]\s]+)\]")
_FAILED_DEVICE = re.compile(r"__wrapped__\w*?_device_(/job:[^/}]+/replica:\d+/task:\d+/device:[A-Za-z_]+:\d+)")


def _record_failure(error: BaseException, dtypes: Optional[tuple[tuple[str, str], ...]] = None) -> None:
    """Gives the listening hooks a "failed" record for an eager op's error (once per error);
    `dtypes` when the caller knows them, else read from the frames that called the op."""
    hooks = _thread_hooks()
    if not hooks or _tensorflow.recorded(error):
        return
    message = str(getattr(error, "message", ""))
    op = _FAILED_OP.search(message)
    if op is None:
        return
    _tensorflow.mark_recorded(error)
    device = _FAILED_DEVICE.search(message)
    requested = _tensorflow.device_name()
    where = device[1] if device else requested or _HOST
    name = op[1] if is_function_call(op[1]) else _kernels.op_type(op[1])
    if dtypes is None:
        dtypes = _tensorflow.failed_op_dtypes(name, 2)
    if name == "IteratorGetNext" and isinstance(error, tf.errors.OutOfRangeError):
        _datasets.exhausted(_tensorflow.failed_op_argument("iterator", 2))
    requested = requested_name(requested)
    record = PlacementRecord(name, "", canonical_name(where), Kind.FAILED,
                             source=user_line() if any(h.sources for h in hooks) else "",
                             requested=requested, dtypes=dtypes,
                             requested_by=getattr(hooks[0].session.asked, "by", "") if requested else "",
                             origin=_origins.of_op(name, _origins.live(2)))
    for hook in hooks:
        hook.records(EventKey(Event.FAILED, id(error)), [record])


def _status_to_exception(status: Any) -> Any:
    """Where the fast path's errors become exceptions (`ops.raise_from_not_ok_status`)."""
    error = _tensorflow.STATUS_TO_EXCEPTION.original(status)
    _record_failure(error)
    return error


def _execute(op_name: Any, num_outputs: int, inputs: Any, attrs: Any, ctx: Any, name: Any = None) -> Any:
    """`execute.execute` while hooks listen: the slow path, whose errors TensorFlow's C++ code raises,
    and every function call, in flight (the session's `in_flight`) until its callback has collected its graphs."""
    function = op_name.decode() if isinstance(op_name, bytes) else op_name
    thread = threading.get_ident()
    session = _session.current()
    in_flight = session.in_flight if session is not None else {}
    calling = is_function_call(function) and thread not in in_flight
    if calling:
        in_flight[thread] = function
    try:
        return _tensorflow.execute_with_callbacks(op_name, num_outputs, inputs, attrs, ctx, name)
    except tf.errors.OpError as error:
        _record_failure(error, _dtypes(_type_values(op_name, attrs)))
        raise
    finally:
        if calling:
            del in_flight[thread]


def _set_device(ctx: Any, device_name: Any, device_spec: Any) -> None:
    """`Context._set_device` while hooks listen: every `tf.device` scope passes here, entering and
    leaving; mirrored in Python, the scope costs the op callback a thread-local read, not a call into
    TensorFlow. Who entered each scope (`tfplace.placement._origins.entering`) is kept beside it."""
    _tensorflow.SET_DEVICE.original(ctx, device_name, device_spec)
    session = _session.current()
    if session is None:  # the last capture closed while this thread was entering a scope
        return
    asked = session.asked
    asked.name = device_name
    scopes = getattr(asked, "scopes", None)
    if scopes is None:
        scopes = asked.scopes = []
    step, outside = _tensorflow.scope_step(1)
    if step == "exit":  # leaving a scope: the enclosing one asks again
        if scopes:
            scopes.pop()
        asked.by = scopes[-1] if scopes else ""
        return
    by = ""
    if device_name:
        entered = _origins.entering(outside)
        if entered is not None:
            by = _origins.requester(*entered)
            if not tf.executing_eagerly():
                _tensorflow.locate_device_scope(*entered)
    if step == "enter":
        scopes.append(by)
    asked.by = by


def _start(thread: threading.Thread) -> None:
    """`threading.Thread.start` while hooks listen: a thread TensorFlow starts for the block (or any
    thread, for a listener with `all_threads`) runs with this thread's hooks."""
    hooks = _thread_hooks()
    inherits = hooks and (started_by_framework(2) or any(l.all_threads for h in hooks for l in h.listeners))
    _tensorflow.start_thread(thread, functools.partial(_inheriting, hooks=hooks) if inherits else None)


@contextlib.contextmanager
def _hooks_in_this_thread(hooks: Sequence[_Hook]) -> Iterator[None]:
    """Runs the block with `hooks` added to this thread's op callbacks, then takes them out again.

    A `MirroredStrategy` replica thread replaces its callback list with its
    parent's (which holds the parent's hooks): only the list they were added
    to loses them.
    """
    session = hooks[0].session if hooks else None
    lock = session.lock if session is not None else contextlib.nullcontext()
    with lock:
        added = [h for h in hooks if h not in _tensorflow.op_callbacks() and h in h.session.hooks]
        for hook in added:
            _add_callback(hook)
        callbacks = _tensorflow.op_callbacks()
        for hook in added:
            hook.lists.append(callbacks)
    try:
        yield
    finally:
        with lock:
            for hook in added:
                if hook in callbacks:
                    callbacks.remove(hook)
                if any(held is callbacks for held in hook.lists):
                    hook.lists.remove(callbacks)


def _inheriting(run: Callable[[], None], hooks: list[_Hook]) -> Callable[[], None]:
    def run_with_hooks() -> None:
        with _hooks_in_this_thread(hooks):
            run()

    return run_with_hooks


def _py_function_call(registry: Any, token: Any, device: Any, args: Any) -> Any:
    """Runs a `tf.py_function` (on a TensorFlow thread) with the listening threads' hooks."""
    session = _session.current()
    with _hooks_in_this_thread(list(session.hooks) if session is not None else []):
        return _tensorflow.PY_FUNCTION_CALL.original(registry, token, device, args)


_PATCHES = ((_tensorflow.STATUS_TO_EXCEPTION, _status_to_exception),
            (_tensorflow.SET_DEVICE, _set_device),
            (_tensorflow.THREAD_START, _start),
            (_tensorflow.PY_FUNCTION_CALL, _py_function_call))


def _add_callback(hook: _Hook) -> None:
    _tensorflow.add_op_callback(hook)
    _tensorflow.use_execute(_execute)  # add_op_callback installs execute_with_callbacks; _execute wraps it


def _register(hook: _Hook) -> None:
    session = hook.session
    with session.lock:
        _add_callback(hook)
        hook.lists.append(_tensorflow.op_callbacks())
        session.hooks.append(hook)
        if len(session.hooks) == 1:
            session.asked = threading.local()  # scopes set while nothing listened were not mirrored
            for patch, replacement in _PATCHES:
                patch.install(replacement)


def _unregister(hook: _Hook) -> None:
    """Removes the hook from its thread and from the threads that inherited it (whichever thread
    closes the block: a generator holding a capture may be finished elsewhere); the patches and the
    callback path go with the last hook."""
    session = hook.session
    with session.lock:
        session.hooks.remove(hook)
        for callbacks in hook.lists:
            if hook not in callbacks:
                continue
            if callbacks is _tensorflow.op_callbacks():
                _tensorflow.remove_op_callback(hook)
            else:
                callbacks.remove(hook)
        hook.lists.clear()
        if not session.hooks:
            for patch, _ in _PATCHES:
                patch.remove()
            _tensorflow.use_execute(None)  # TensorFlow's own path, keeping other tools' callbacks working


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Calls `listener` for every eager op of this thread (and the threads it starts, see above) in the block."""
    with _session.hold() as session:
        hook: Optional[_Hook] = getattr(session.thread, "hook", None)
        if hook is None or hook not in session.hooks:  # none yet, or one a block closed in another thread removed
            hook = session.thread.hook = _Hook(session)
            _register(hook)
        hook.listeners.append(listener)
        hook.update()
        try:
            yield
        except KeyboardInterrupt as error:  # it may have landed in the op callback: its traceback ends at the user's line
            end_at_user(error)
            raise
        finally:
            hook.listeners.remove(listener)
            hook.update()
            if not hook.listeners:
                _unregister(hook)
                if getattr(session.thread, "hook", None) is hook:
                    session.thread.hook = None
