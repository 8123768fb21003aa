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
  what that call ran (`_collected.Placed`: its nodes' records and transfers, as
  collected when TensorFlow placed it, in this capture or an earlier one; a
  function call's `copies` in `on_op` are its transfers, `kind="function"`);
* `listener.on_records(key, records)` for the functions an op runs, `key` an `EventKey` naming
  the event (so that a listener can keep it once): `Event.PLACED` (`about` the function) with the
  nodes TensorFlow placed for this thread's call of it (and the `tf.data` functions they
  instantiate), as graph collection reports them (a graph another thread's call placed goes to
  that thread's listeners); for what graph collection does not report: `Event.COMPILED` with an
  XLA function's "compiled" nodes (`device` where it ran), `Event.DATASET` with the `tf.data`
  functions an iterator instantiates, `Event.FAILED` (`about` the error's id) with a "failed"
  record when an eager op raises; `Event.UNSEEN` (`about` the reason) when a function call's graph
  cannot be told apart (TensorFlow's collection merged it with another thread's: no records), or
  when an iterator runs functions that no hook can count (the records of those functions, as the
  `DATASET` event holds them); `Event.SESSION` (`about` a `_sessions.Ran`, with its records) when a
  `tf.compat.v1.Session` runs its graph: what the run placed, executed and moved, and what is not seen.

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
    >>> from tfplace.placement.taking import _hooks
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
import functools
import threading
import weakref
from typing import Any, Callable, Iterator, Optional, Sequence

import tensorflow as tf

from tfplace import _tensorflow
from tfplace.placement.functions import _dtensor
from tfplace.placement.records import _origins
from tfplace.placement.session import _session
from tfplace.placement.session._sources import end_at_user, on_behalf_of, started_by_framework, user_line
from tfplace.placement.taking import _events, _failures, _sessions
from tfplace.placement.taking._callback import Hook, thread_hooks

__all__ = ["listening"]
def _set_device(ctx: Any, device_name: Any, device_spec: Any) -> None:
    """`Context._set_device` while hooks listen: every `tf.device` scope passes here, entering and
    leaving; mirrored in Python, the scope costs the op callback a thread-local read, not a call into
    TensorFlow. Who entered each scope (`tfplace.placement.records._origins.entering`) is kept beside it."""
    _tensorflow.SET_DEVICE.original(ctx, device_name, device_spec)
    session = _session.current()
    if session is None:  # the last capture closed while this thread was entering a scope
        return
    asked = session.asked
    scopes = getattr(asked, "scopes", None)
    if scopes is None:
        scopes = asked.scopes = []
    step, outside = _tensorflow.scope_step(1)
    if step == "exit":  # leaving a scope: the enclosing one asks again
        if scopes:
            scopes.pop()
        asked.scope = (device_name, scopes[-1] if scopes else "")
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
    asked.scope = (device_name, by)


def _start(thread: threading.Thread) -> None:
    """`threading.Thread.start` while hooks listen: a thread TensorFlow starts for the block (or any
    thread, for a listener with `all_threads`) runs with this thread's hooks."""
    hooks = thread_hooks()
    inherits = hooks and (started_by_framework(2)
                          or any(listener.all_threads for h in hooks for listener in h.listeners))
    _tensorflow.start_thread(thread, functools.partial(_inheriting, hooks=hooks) if inherits else None)


@contextlib.contextmanager
def _hooks_in_this_thread(hooks: Sequence[Hook]) -> Iterator[None]:
    """Runs the block with `hooks` added to this thread's op callbacks, then takes them out again.

    A `MirroredStrategy` replica thread replaces its callback list with its
    parent's (which holds the parent's hooks): only the list they were added
    to loses them.
    """
    session = hooks[0].session if hooks else None
    lock = session.lock if session is not None else contextlib.nullcontext()
    with lock:
        added = [h for h in hooks if h.callback not in _tensorflow.op_callbacks() and h in h.session.hooks]
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
                if hook.callback in callbacks:
                    callbacks.remove(hook.callback)
                if any(held is callbacks for held in hook.lists):
                    hook.lists.remove(callbacks)


def _inheriting(run: Callable[[], None], hooks: list[Hook]) -> Callable[[], None]:
    def run_with_hooks() -> None:
        with _hooks_in_this_thread(hooks):
            run()

    return run_with_hooks


def _py_function_call(registry: Any, token: Any, device: Any, args: Any) -> Any:
    """Runs a `tf.py_function` (on a TensorFlow thread) with the listening threads' hooks."""
    session = _session.current()
    with _hooks_in_this_thread(list(session.hooks) if session is not None else []):
        return _tensorflow.PY_FUNCTION_CALL.original(registry, token, device, args)


def _execute_cancellable(op_name: str, num_outputs: int, inputs: Any, attrs: Any, ctx: Any,
                         cancellation_manager: Any, name: Optional[str] = None) -> Any:
    """`execute.execute_with_cancellation` while hooks listen: a function call made under a cancellation
    manager (the closures a `ClusterCoordinator` runs on its threads) reaches no op callback in
    TensorFlow; this thread's hooks hear of it as of any call."""
    tensors = _tensorflow.EXECUTE_CANCELLABLE.original(op_name, num_outputs, inputs, attrs, ctx, cancellation_manager,
                                                       name)
    callbacks = thread_hooks()
    if callbacks:
        with on_behalf_of(_scheduled_line()):
            for callback in callbacks:
                callback(op_name, tuple(inputs), attrs, tensors, name)
    return tensors


def _converted(value: Any, ctx: Any, dtype: Any = None) -> Any:
    """`constant_op.convert_to_eager_tensor` while hooks listen: the `Cast` TensorFlow's C++ runs on the host for
    a Python value of a dtype it is not made in directly (`tf.constant([1, 2], dtype=tf.uint8)`), which no
    op callback hears, told to this thread's hooks as an op on the host."""
    tensor = _tensorflow.CONVERT_TO_EAGER.original(value, ctx, dtype)
    attrs = _tensorflow.conversion_cast(value, dtype) if dtype is not None else None  # most conversions: None
    if attrs is not None:
        for hook in thread_hooks():
            hook.on_host(b"Cast", attrs)
    return tensor


_SCHEDULED: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()  # a scheduled closure -> its line


def _closure_init(closure: Any, *args: Any, **kwargs: Any) -> None:
    """A `ClusterCoordinator`'s closure, made by `schedule` on the user's thread: its line remembered."""
    _tensorflow.CLOSURE_INIT.original(closure, *args, **kwargs)
    line = user_line()
    if line:
        _SCHEDULED[closure] = line


def _scheduled_line() -> str:
    """The `schedule` line of the closure this thread runs ("" outside one)."""
    closure = _tensorflow.running_closure(3)
    return _SCHEDULED.get(closure, "") if closure is not None else ""


def _variable_read(variable: Any, handle: Any) -> None:
    """A `ReadVariableOp` TensorFlow's eager fast path runs in C++ (`v * v`): this thread's hooks hear of it
    as of an op without outputs, on the variable's device (where TensorFlow runs it, with its resource)."""
    for hook in thread_hooks():
        hook(b"ReadVariableOp", (handle,), ("dtype", variable.dtype.as_datatype_enum), ())


_PATCHES = ((_tensorflow.STATUS_TO_EXCEPTION, _failures.status_to_exception),
            (_tensorflow.EXECUTE_CANCELLABLE, _execute_cancellable),
            (_tensorflow.CLOSURE_INIT, _closure_init),
            (_tensorflow.CONVERT_TO_EAGER, _converted),
            (_tensorflow.SET_DEVICE, _set_device),
            (_tensorflow.THREAD_START, _start),
            (_tensorflow.PY_FUNCTION_CALL, _py_function_call),
            (_tensorflow.SESSION_RUN, _sessions.unasked_run),
            (_tensorflow.SESSION_PARTIAL_RUN, _sessions.unasked_partial_run),
            (_tensorflow.SESSION_CALLABLE, _sessions.unasked_callable),
            (_tensorflow.SESSION_PUBLIC_RUN, _sessions.run),
            (_tensorflow.SESSION_INIT, _sessions.init))


def _add_callback(hook: Hook) -> None:
    _tensorflow.add_op_callback(hook.callback)
    _tensorflow.use_execute(_failures.execute)  # add_op_callback installs execute_with_callbacks; _execute wraps it


def _register(hook: Hook) -> None:
    session = hook.session
    with session.lock:
        _add_callback(hook)
        hook.lists.append(_tensorflow.op_callbacks())
        session.hooks.append(hook)
        if len(session.hooks) == 1:
            session.asked = threading.local()  # scopes set while nothing listened were not mirrored
            _dtensor.count_host_runs(session)
            for patch, replacement in _PATCHES:
                patch.install(replacement)
            _session.runtime().listening += 1
            _tensorflow.watch_variable_reads(_variable_read)


def _unregister(hook: Hook) -> None:
    """Removes the hook from its thread and from the threads that inherited it (whichever thread
    closes the block: a generator holding a capture may be finished elsewhere); the patches and the
    callback path go with the last hook."""
    session = hook.session
    with session.lock:
        session.hooks.remove(hook)
        for callbacks in hook.lists:
            if hook.callback not in callbacks:
                continue
            if callbacks is _tensorflow.op_callbacks():
                _tensorflow.remove_op_callback(hook.callback)
            else:
                callbacks.remove(hook.callback)
        hook.lists.clear()
        if not session.hooks:
            for patch, _ in _PATCHES:
                patch.remove()
            _tensorflow.watch_variable_reads(None)
            _tensorflow.use_execute(None)  # TensorFlow's own path, keeping other tools' callbacks working


@contextlib.contextmanager
def listening(listener: _events.Listener) -> Iterator[None]:
    """Calls `listener` for every eager op of this thread (and the threads it starts, see above) in the block."""
    with _session.hold() as session:
        hook: Optional[Hook] = getattr(session.thread, "hook", None)
        if hook is None or hook not in session.hooks:  # none yet, or one a block closed in another thread removed
            hook = session.thread.hook = Hook(session)
            _register(hook)
        hook.listeners.append(listener)
        hook.update()
        try:
            yield
        except KeyboardInterrupt as error:
            # it may have landed in the op callback: its traceback ends at the user's line
            end_at_user(error)
            raise
        finally:
            hook.listeners.remove(listener)
            hook.update()
            if not hook.listeners:
                _unregister(hook)
                if getattr(session.thread, "hook", None) is hook:
                    session.thread.hook = None
