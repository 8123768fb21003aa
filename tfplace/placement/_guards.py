"""Guards that stop a program where placement goes wrong, naming the line of user code.

* `transfer_guard(level)`: at an implicit cross-device copy in the block,
  "disallow" raises `ImplicitCopyError`, "log" logs it (absl) and goes on,
  "allow" does nothing; the innermost guard decides, so a nested block can
  allow what its surroundings forbid.
* `device_guard(device, allow_ops=())`: an eager op, function call or node of
  a function the block runs (its plumbing and input pipeline left out) that
  runs anywhere but `device` raises `PlacementError` (a silent fallback to the
  CPU, for instance).

Both watch the eager ops of the block's thread and of the threads TensorFlow
starts for it, through the same op callback as `capture_placement()`
(`tfplace.placement._hooks`), and every function those ops call: its nodes and
its transfers as TensorFlow placed them (`tfplace.placement._calls`), with the
lines of the nodes traced while a guard is open.

Example:
    >>> import tensorflow as tf, tfplace
    >>> with tfplace.transfer_guard("disallow"), tfplace.device_guard("CPU:0"):
    ...     y = tf.ones(2) * 3.0
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, NoReturn, Optional, Sequence, Union

from absl import logging

from tfplace import _tensorflow
from tfplace._devices import Device, resolve
from tfplace._errors import ConfigurationError, ImplicitCopyError, PlacementError
from tfplace.placement import _explain, _function_sources, _graphs, _hooks, _kernel_table
from tfplace.placement._records import PLUMBING, CopyRecord, PlacementRecord
from tfplace.placement._sources import user_line

__all__ = ["transfer_guard", "device_guard", "LEVELS"]

LEVELS = ("disallow", "log", "allow")
_local = threading.local()


def _describe_copy(copy: CopyRecord) -> str:
    where = copy.source or "an unknown line"
    if copy.kind == "function":
        where = copy.source or "a line unknown (traced before any capture or guard opened)"
        return (f"implicit transfer inside function {copy.function} (called at {copy.call or 'an unknown line'}): "
                f"node {copy.node} ({copy.op}, made at {where}) input #{copy.input_index} ({copy.tensor}) is produced "
                f"on {copy.from_device}, but {copy.node} runs on {copy.to_device}, so TensorFlow sends it across on "
                "every call")
    return (f"implicit copy at {where}: {copy.op} input #{copy.input_index} lives on {copy.from_device}, "
            f"but {copy.op} runs on {copy.to_device}, so TensorFlow copies it on every call")


class _TransferGuard:
    """One thread's transfer guard: the levels of its nested blocks, innermost last."""

    sources = all_threads = False

    def __init__(self) -> None:
        self.levels: list[str] = []

    def on_records(self, key: tuple, records: Sequence[PlacementRecord]) -> None:
        """Function nodes are placed by TensorFlow's placer, not guarded here."""

    def on_function(self, record: PlacementRecord, placed: bool, call: _graphs.Placed) -> None:
        """A function call's transfers come with its `on_op`."""

    def on_op(self, record: PlacementRecord, copies: Sequence[CopyRecord]) -> None:
        if not copies or self.levels[-1] == "allow":
            return
        if self.levels[-1] == "log":
            for copy in copies:
                logging.warning("tfplace.transfer_guard: %s", _describe_copy(copy))
            return
        copy = copies[0]
        more = f" ({len(copies) - 1} more transfer(s) in the same call)" if len(copies) > 1 else ""
        raise ImplicitCopyError(
            f"{_describe_copy(copy)}{more}. Allowed in transfer_guard('disallow'): explicit copies, "
            f"tfplace.to_device(x, '{copy.to_device}') or tf.identity(x) under tf.device('{copy.to_device}'), "
            f"before the {'node' if copy.kind == 'function' else 'op'}; or a nested transfer_guard('allow') around "
            "it.")


@contextlib.contextmanager
def transfer_guard(level: str = "disallow") -> Iterator[None]:
    """Stops (or logs) the block at its first implicit cross-device copy.

    >>> import tensorflow as tf, tfplace
    >>> with tfplace.transfer_guard("log"):
    ...     z = tf.ones(2) + 1.0        # same device: nothing to say

    Args:
      level: "disallow" (raise `ImplicitCopyError`), "log" (an absl warning
        per copy) or "allow" (nothing; lets a nested block copy).

    Raises:
      ConfigurationError: `level` is not one of those.
      ImplicitCopyError: in the block, at an implicit copy under "disallow",
        naming the op, the input, both devices and the user's line.
    """
    if level not in LEVELS:
        raise ConfigurationError(
            f"transfer_guard received level={level!r} (from argument level): allowed are "
            + ", ".join(repr(level) for level in LEVELS))
    guard: Optional[_TransferGuard] = getattr(_local, "transfer", None)
    with contextlib.ExitStack() as stack:
        if guard is None:
            guard = _local.transfer = _TransferGuard()
            stack.callback(setattr, _local, "transfer", None)
            stack.enter_context(_hooks.listening(guard))
        guard.levels.append(level)
        stack.callback(guard.levels.pop)
        stack.enter_context(_collecting(guard))
        yield


@contextlib.contextmanager
def _collecting(guard: object) -> Iterator[None]:
    """Keeps graph collection on (a function's nodes and transfers are known from its placement)
    and the lines of the functions traced in the block remembered, while a guard is open."""
    _graphs.attach(guard)
    try:
        with _function_sources.watching():
            yield
    finally:
        _graphs.detach(guard)


class _DeviceGuard:
    sources = all_threads = False

    def __init__(self, wanted: Device, allow_ops: frozenset[str]) -> None:
        self.wanted = wanted.name
        self.allow_ops = allow_ops

    def on_records(self, key: tuple, records: Sequence[PlacementRecord]) -> None:
        """Function nodes are placed by TensorFlow's placer, not guarded here."""

    def on_function(self, record: PlacementRecord, placed: bool, call: _graphs.Placed) -> None:
        """The nodes the call ran: each one the program computes (not a function's plumbing, not its
        input pipeline) must run on the guarded device."""
        for node in call.records:
            if node.device in ("", self.wanted) or node.kind not in _RAN or not _computes(node.op) \
                    or node.op in self.allow_ops:
                continue
            self.fail(node, f"node {node.name} of function {record.op} (called at {user_line() or 'an unknown line'})",
                      node.source)

    def on_op(self, record: PlacementRecord, copies: Sequence[CopyRecord]) -> None:
        if record.device == self.wanted or record.op in self.allow_ops:
            return
        self.fail(record, "", user_line())

    def fail(self, record: PlacementRecord, node: str, line: str) -> NoReturn:
        asked = record.requested or "no device (TensorFlow chose)"
        allowed = ", ".join(sorted(self.allow_ops)) or "none"
        what = f"{record.op} ({node})" if node else record.op
        raise PlacementError(
            f"{what} ran on {record.device} at {line or 'an unknown line'} (asked for: {asked}), but "
            f"device_guard('{self.wanted}') allows only ops on {self.wanted} and the op types in allow_ops "
            f"({allowed}). Why it ran there: {self.why(record)} Place it with tf.device('{self.wanted}'), or "
            f"pass allow_ops=('{record.op}',).")

    def why(self, record: PlacementRecord) -> str:
        """The reason `record` ran where it did (`tfplace.placement._explain`), as "reason: message"."""
        if record.requested and record.requested == record.device:
            return f"the program asked for {record.device} with tf.device."
        found = _explain.explain_record(record, devices=_tensorflow.logical_device_names(), table=_kernel_table.live(),
                                       wanted=None if record.requested else self.wanted)
        if found.reason == "unknown" and not record.requested:
            return f"no device was asked for, so TensorFlow chose {record.device}, its default for {record.op}."
        return f"{found.reason}: {found.message}"


@contextlib.contextmanager
def device_guard(device: Union[str, Device, Any], *, allow_ops: Sequence[str] = ()) -> Iterator[None]:
    """Raises at the first op of the block that runs anywhere but `device`.

    >>> import tensorflow as tf, tfplace
    >>> with tfplace.device_guard("CPU:0"):
    ...     y = tf.ones(2) * 2.0

    Args:
      device: the device every op of the block must run on, written any
        accepted way; it must exist.
      allow_ops: op types (e.g. "Shape") that may run elsewhere.

    Raises:
      DeviceSpecError: `device` is malformed (before the block runs).
      DeviceNotFoundError: `device` does not exist (before the block runs).
      ConfigurationError: `allow_ops` is a string rather than a sequence of op types.
      PlacementError: in the block, naming the op, where it ran, where it was
        asked to run, the user's line and why it ran there (the reasons of
        `PlacementLog.explain()`).
    """
    if isinstance(allow_ops, str):
        raise ConfigurationError(
            f"device_guard received allow_ops={allow_ops!r} (from argument allow_ops): allowed is a sequence "
            f"of op types, e.g. allow_ops=({allow_ops!r},)")
    wanted = resolve(device, fallback=False, origin="tfplace.device_guard's argument device")
    guard = _DeviceGuard(wanted, frozenset(allow_ops))
    with _hooks.listening(guard), _collecting(guard):
        yield


# Function nodes that ran (a "removed" node never did), and what a device guard leaves out: a
# function's plumbing and its input pipeline, which TensorFlow keeps on the host by design.
_RAN = frozenset({"place", "compiled"})
_PLUMBING = PLUMBING | {"Identity", "IdentityN", "NoOp", "Const"}
_INPUT_PIPELINE = ("Dataset", "Iterator", "Optional")


def _computes(op: str) -> bool:
    return op not in _PLUMBING and not any(word in op for word in _INPUT_PIPELINE)
