"""TensorFlow's op callbacks, turned into placement events for captures and guards.

`listening(listener)` registers one op callback for the calling thread (the
threads TensorFlow starts for it, such as `MirroredStrategy`'s replica
threads, inherit it) and calls `listener.on_op(record, copies, placed)` after
every eager op:

* `record`: the op's `PlacementRecord` (kind "execute"), with its source line
  when a listener asked for `sources`;
* `copies`: the op's implicit copies (`CopyRecord`s): inputs on another device
  than the op, except host-memory arguments of its kernel, resource handles,
  and explicit copies (`tf.identity` under a device, `tfplace.to_device`);
* `placed`: for a function call, whether TensorFlow placed the function just
  now (True) or earlier (False); None for other ops.

Graph construction also calls the callback; it returns at once. When the last
listener of a thread leaves, the callback is removed: nothing stays behind.
TensorFlow's `remove_op_callback` switches every thread back to its fast path
when one thread's last callback goes; `listening` removes its callback itself
and keeps the callback path while another thread still listens, so captures
in concurrent threads keep seeing their function calls.

Example:
    >>> import tensorflow as tf
    >>> from tfplace import hooks
    >>> class Printer:
    ...     sources = False
    ...     def on_op(self, record, copies, placed):
    ...         print(record.op, record.device)
    >>> x = tf.ones(2)
    >>> with hooks.listening(Printer()):
    ...     _ = x * 3.0
    Mul /device:CPU:0
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Optional, Protocol, Sequence

import tensorflow as tf
from tensorflow.python.eager import context, execute
from tensorflow.python.framework import op_callbacks, op_def_registry

from tfplace import graphs, kernels
from tfplace.devices import canonical_name
from tfplace.records import CopyRecord, PlacementRecord
from tfplace.sources import user_line

__all__ = ["Listener", "listening", "EXPLICIT_COPIES"]

EXPLICIT_COPIES = frozenset({"Identity", "IdentityN"})
_HOST = "/job:localhost/replica:0/task:0/device:CPU:0"
_local = threading.local()
_lock = threading.Lock()
_listening_threads = 0  # threads (not counting inheriting replica threads) with a hook registered


class Listener(Protocol):
    """What `listening()` calls after each eager op."""

    sources: bool

    def on_op(self, record: PlacementRecord, copies: Sequence[CopyRecord], placed: Optional[bool]) -> None:
        ...


def _device_of(inputs: Sequence[Any]) -> str:
    """Where an op without outputs ran: with its resource, else where it was asked to run."""
    for tensor in inputs:
        if tensor.dtype == tf.resource:
            return tensor.device
    return context.context().device_name or _HOST


def _copies(op: str, inputs: Sequence[Any], full: str, device: str) -> list[CopyRecord]:
    found: list[CopyRecord] = []
    for index, tensor in enumerate(inputs):
        where = tensor.device
        if where == full or not where:
            continue
        dtype = tensor.dtype
        if dtype == tf.resource:
            continue
        device_type = device.rsplit(":", 2)[-2]
        if device_type != "CPU" and dtype == tf.int32:  # int32 lives in host memory on accelerators
            continue
        if index in kernels.host_memory_inputs(op, device_type, len(inputs)):
            continue
        found.append(CopyRecord(op, index, canonical_name(where), device))
    return found


def _describe(op_type: Any, full: str) -> tuple[str, str, bool, PlacementRecord]:
    """(op type, canonical device, whether it is a function call, its record without source) of an op."""
    op = op_type.decode() if isinstance(op_type, bytes) else op_type
    function = op.startswith("__") and op_def_registry.get(op) is None
    if not function:
        op = kernels.op_type(op)
    device = canonical_name(full)
    return op, device, function, PlacementRecord(op, "", device, "execute")


_known: dict[tuple[Any, str], tuple[str, str, bool, PlacementRecord]] = {}
_sourced: dict[tuple[PlacementRecord, str], PlacementRecord] = {}  # one record per op, device and line


class _Hook:
    """The op callback of one thread (and of the threads that inherit it)."""

    def __init__(self) -> None:
        self.listeners: list[Listener] = []
        self.calls: tuple[Any, ...] = ()
        self.sources = False

    def update(self) -> None:
        self.calls = tuple(listener.on_op for listener in self.listeners)
        self.sources = any(listener.sources for listener in self.listeners)

    def __call__(self, op_type: Any, inputs: Sequence[Any], attrs: Any, outputs: Any,
                 op_name: Optional[str] = None, graph: Any = None) -> None:
        graphs.start()
        if graph is not None:
            return None
        full = outputs[0].device if outputs else _device_of(inputs)
        known = _known.get((op_type, full))
        if known is None:
            known = _known[(op_type, full)] = _describe(op_type, full)
        op, device, function, record = known
        placed: Optional[bool] = None
        copies: Sequence[CopyRecord] = ()
        if function:
            placed = graphs.collect() > 0
        elif inputs and op not in EXPLICIT_COPIES:
            for tensor in inputs:
                if tensor.device != full:
                    copies = _copies(op, inputs, full, device)
                    break
        if self.sources or copies:
            source = user_line()
            if copies:
                copies = [copy._replace(source=source) for copy in copies]
            if self.sources:
                key = (record, source)
                record = _sourced.get(key) or _sourced.setdefault(key, record._replace(source=source))
        for call in self.calls:
            call(record, copies, placed)
        return None


def _register(hook: _Hook) -> None:
    global _listening_threads
    with _lock:
        op_callbacks.add_op_callback(hook)
        _listening_threads += 1


def _unregister(hook: _Hook) -> None:
    """Removes this thread's callback; leaves the callback path on while another thread listens."""
    global _listening_threads
    with _lock:
        _listening_threads -= 1
        ctx = context.context()
        ctx.remove_op_callback(hook)
        if not ctx.op_callbacks and not _listening_threads:
            execute.execute = execute.quick_execute  # what op_callbacks.remove_op_callback does


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Calls `listener.on_op` after every eager op of this thread (and its replica threads) in the block."""
    hook: Optional[_Hook] = getattr(_local, "hook", None)
    if hook is None:
        hook = _local.hook = _Hook()
        _register(hook)
    hook.listeners.append(listener)
    hook.update()
    try:
        yield
    finally:
        hook.listeners.remove(listener)
        hook.update()
        if not hook.listeners:
            _unregister(hook)
            _local.hook = None
