"""Guards that stop a program where placement goes wrong, naming the line of user code.

* `transfer_guard(level)`: at an implicit cross-device copy in the block,
  "disallow" raises `ImplicitCopyError`, "log" logs it (absl) and goes on,
  "allow" does nothing; the innermost guard decides, so a nested block can
  allow what its surroundings forbid.
* `device_guard(device, allow_ops=(), origins=("user",))`: an eager op, function call or
  node of a function the block runs, of those origins (the user's compute by default;
  plumbing never) that runs anywhere but `device` raises `PlacementError` (a silent fallback
  to the CPU, for instance).

Both watch the eager ops of the block's thread and of the threads TensorFlow
starts for it, through the same op callback as `capture_placement()`
(`tfplace.placement.taking._hooks`), and every function those ops call: its nodes and
its transfers as TensorFlow placed them (`tfplace.placement.functions._calls`), with the
lines of the nodes traced while a guard is open.

Example:
    >>> import tensorflow as tf, tfplace
    >>> with tfplace.transfer_guard("disallow"), tfplace.device_guard("CPU:0"):
    ...     y = tf.ones(2) * 3.0
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, NoReturn, Optional, Sequence, Union

from absl import logging

from tfplace import _tensorflow
from tfplace._devices import Device, canonical_name, resolve
from tfplace._errors import ConfigurationError, ImplicitCopyError, PlacementError
from tfplace.placement.functions import _collected, _function_sources, _graphs
from tfplace.placement.ops import _kernel_table
from tfplace.placement.records._origins import ORIGINS, is_plumbing
from tfplace.placement.records._records import CONTROL, CopyRecord, Kind, PlacementRecord, input_label
from tfplace.placement.session import _session
from tfplace.placement.session._sources import user_line
from tfplace.placement.shown import _explain
from tfplace.placement.taking import _events, _hooks, _sessions

__all__ = ["transfer_guard", "device_guard", "LEVELS"]

LEVELS = ("disallow", "log", "allow")


def _describe_copy(copy: CopyRecord) -> str:
    where = copy.source or "an unknown line"
    if copy.kind == "function":
        where = copy.source or "a line unknown (traced before any capture or guard opened)"
        if copy.input_index == CONTROL:
            return (f"cross-device control edge inside function {copy.function} (called at "
                    f"{copy.call or 'an unknown line'}): node {copy.node} ({copy.op}, made at {where}) waits for "
                    f"{copy.tensor[1:]} on {copy.from_device}, but runs on {copy.to_device}, so TensorFlow sends a "
                    "signal across on every call")
        return (f"implicit transfer inside function {copy.function} (called at {copy.call or 'an unknown line'}): "
                f"node {copy.node} ({copy.op}, made at {where}) input #{copy.input_index} ({copy.tensor}) is produced "
                f"on {copy.from_device}, but {copy.node} runs on {copy.to_device}, so TensorFlow sends it across on "
                "every call")
    return (f"implicit copy at {where}: {input_label(copy.op, copy.input_index)} lives on {copy.from_device}, "
            f"but {copy.op} runs on {copy.to_device}, so TensorFlow copies it on every call")


def _unguarded(guard: str, level: str, reason: str) -> str:
    """Why a guard cannot watch a `tf.compat.v1.Session`'s graph (`reason`: the capture's words for it)."""
    asked = f"{guard}('{level}')" if level else guard
    return (f"tfplace.{asked} cannot watch what it was given: {reason}. A guard watches eager ops and "
            "tf.function calls: run the graph outside the guard, or write the step as a tf.function")


class _TransferGuard:
    """One thread's transfer guard: the levels of its nested blocks, innermost last."""

    sources = all_threads = False
    copies_only = True  # an eager op that copies nothing is not its business (the op callback skips it)

    def __init__(self) -> None:
        self.levels: list[str] = []

    def on_records(self, key: _events.EventKey, records: Sequence[PlacementRecord]) -> None:
        """Function nodes are placed by TensorFlow's placer, not guarded here; a Session's run is: its transfers,
        or, where it could not be asked (a callable), an error that says so."""
        if key.event != _events.Event.SESSION or self.levels[-1] == "allow":
            return
        ran = key.about
        if ran.transfers:
            self.on_copies(ran.transfers)
            return
        if ran.unseen and not ran.runs:  # nothing of the run is known
            message = _unguarded("transfer_guard", self.levels[-1], ran.unseen)
            if self.levels[-1] == "log":
                logging.warning("tfplace.transfer_guard: %s", message)
                return
            raise ImplicitCopyError(message)

    def on_function(self, record: PlacementRecord, placed: bool, call: _collected.Placed) -> None:
        """A function call's transfers come with its `on_op`."""

    def on_op(self, record: PlacementRecord, copies: Sequence[CopyRecord]) -> None:
        self.on_copies(copies)

    def on_copies(self, copies: Sequence[CopyRecord]) -> None:
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
    with _session.hold() as session, contextlib.ExitStack() as stack:
        guard: Optional[_TransferGuard] = getattr(session.thread, "transfer", None)  # this thread's, nested
        if guard is None:
            guard = session.thread.transfer = _TransferGuard()
            stack.callback(setattr, session.thread, "transfer", None)
            stack.enter_context(_hooks.listening(guard))
        guard.levels.append(level)
        stack.callback(guard.levels.pop)
        stack.enter_context(_collecting(guard))
        yield


@contextlib.contextmanager
def _collecting(guard: object) -> Iterator[None]:
    """Keeps graph collection on (a function's nodes and transfers are known from its placement)
    and the lines of the functions traced in the block remembered, while a guard is open."""
    with _session.hold():
        _graphs.attach(guard)
        try:
            with _function_sources.watching():
                yield
        finally:
            _graphs.detach(guard)


class _DeviceGuard:
    sources = all_threads = False

    def __init__(self, wanted: Device, allow_ops: frozenset[str], origins: frozenset[str]) -> None:
        self.wanted = canonical_name(wanted.name)
        self.allow_ops = allow_ops
        self.origins = origins

    def on_records(self, key: _events.EventKey, records: Sequence[PlacementRecord]) -> None:
        """Function nodes are placed by TensorFlow's placer, not guarded here; a Session's run is: the nodes it
        executed, or, where it could not be asked (a callable), an error that says so."""
        if key.event != _events.Event.SESSION:
            return
        ran = key.about
        if ran.unseen and not ran.runs:
            raise PlacementError(_unguarded(f"device_guard({self.wanted!r})", "", ran.unseen))
        for node in records:  # the nodes placed at this run (the first run of a graph)
            if node.kind in _RAN and node.device not in ("", self.wanted) and self.watches(node):
                self.fail(node, f"node {node.name} of {_sessions.SESSION_GRAPH} "
                                f"(run at {user_line() or 'an unknown line'})", node.source)
        wrong = sorted(f"{op} on {device}" for (device, op, category), _ in ran.runs
                       if device != self.wanted and category == "compute" and op not in self.allow_ops)
        if wrong and not records:
            raise PlacementError(f"tfplace.device_guard({self.wanted!r}): {_sessions.SESSION_GRAPH} run at "
                                 f"{user_line() or 'an unknown line'} ran {', '.join(wrong)}; allowed: "
                                 f"{self.wanted}, or ops in allow_ops={sorted(self.allow_ops)}")

    def on_function(self, record: PlacementRecord, placed: bool, call: _collected.Placed) -> None:
        """The nodes the call ran: each one of the guarded origins that computes (not plumbing) must
        run on the guarded device."""
        for node in call.records:
            if node.kind in _RAN and node.device not in ("", self.wanted) and self.watches(node):
                self.fail(node, f"node {node.name} of function {record.op} (called at "
                                f"{user_line() or 'an unknown line'})", node.source)

    def on_op(self, record: PlacementRecord, copies: Sequence[CopyRecord]) -> None:
        if record.device != self.wanted and self.watches(record):
            self.fail(record, "", user_line())

    def watches(self, record: PlacementRecord) -> bool:
        return (record.origin in self.origins and record.op not in self.allow_ops and not is_plumbing(record)
                and record.op not in _METADATA)

    def fail(self, record: PlacementRecord, node: str, line: str) -> NoReturn:
        asked = record.requested or "no device (TensorFlow chose)"
        if record.requested_by:
            asked += f", asked by {record.requested_by}"
        allowed = ", ".join(sorted(self.allow_ops)) or "none"
        what = f"{record.op} ({node})" if node else record.op
        if not record.origin.users:
            what += f" (origin {record.origin!r})"
        watched = ", ".join(repr(origin) for origin in ORIGINS if origin in self.origins)
        plural = "s" if len(self.origins) > 1 else ""
        if _explain.user_can_act(record):
            advice = f"Place it with tf.device('{self.wanted}'), or pass allow_ops=('{record.op}',)."
        else:
            advice = (f"{_explain.who(record)[0].upper() + _explain.who(record)[1:]} placed it, not a line of yours: "
                      f"pass allow_ops=('{record.op}',), or leave {record.origin!r} out of origins.")
        raise PlacementError(
            f"{what} ran on {record.device} at {line or 'an unknown line'} (asked for: {asked}), but "
            f"device_guard('{self.wanted}') allows only ops on {self.wanted} among the compute ops of origin{plural} "
            f"{watched} it watches, and the op types in allow_ops ({allowed}). Why it ran there: {self.why(record)} "
            f"{advice}")

    def why(self, record: PlacementRecord) -> str:
        """The reason `record` ran where it did (`tfplace.placement.shown._explain`), as "reason: message"."""
        if record.requested and record.requested == record.device:
            by = f" ({record.requested_by})" if record.requested_by else ""
            return f"the program asked for {record.device} with tf.device{by}."
        found = _explain.explain_record(record, devices=_tensorflow.logical_device_names(), table=_kernel_table.live(),
                                       wanted=None if record.requested else self.wanted)
        if found.reason == "unknown" and not record.requested:
            return f"no device was asked for, so TensorFlow chose {record.device}, its default for {record.op}."
        return f"{found.reason}: {found.message}"


@contextlib.contextmanager
def device_guard(device: Union[str, Device, Any], *, allow_ops: Sequence[str] = (),
                 origins: Sequence[str] = ("user",)) -> Iterator[None]:
    """Raises at the first compute op of the block, of the given origins, that runs anywhere but `device`.

    By default it checks the user's compute ops (origin "user": eager ops and function nodes the
    user's code made, Keras layers called through `fit` included); plumbing (`Identity`, `Const`,
    `NoOp`, arguments and results, removed nodes) and the ops that read only a shape (`Shape`, `Size`,
    `Rank`, which TensorFlow places beside their input) are never checked, and neither, unless asked for,
    the input pipeline (origin "input") nor TensorFlow's and Keras' own machinery (origin
    "framework": a strategy's variable initialisation and all-reduce, optimizer slots, metrics).

    >>> import tensorflow as tf, tfplace
    >>> with tfplace.device_guard("CPU:0"):
    ...     y = tf.ones(2) * 2.0
    >>> with tfplace.device_guard("CPU:0", origins=("user", "input", "framework")):
    ...     n = tf.data.Dataset.range(3).reduce(tf.constant(0, tf.int64), lambda a, b: a + b)

    Args:
      device: the device every guarded op of the block must run on, written any
        accepted way; it must exist.
      allow_ops: op types (e.g. "Shape") that may run elsewhere.
      origins: the origins of the ops it checks, among "user", "input" and "framework".

    Raises:
      DeviceSpecError: `device` is malformed (before the block runs).
      DeviceNotFoundError: `device` does not exist (before the block runs).
      ConfigurationError: `allow_ops` or `origins` is a string rather than a sequence, or `origins`
        names something else than those origins, or none.
      PlacementError: in the block, naming the op, where it ran, where it was asked to run and who
        asked, the user's line and why it ran there (the reasons of `PlacementLog.explain()`);
        advice only where the user's code made the op and asked for its device.
    """
    if isinstance(allow_ops, str):
        raise ConfigurationError(
            f"device_guard received allow_ops={allow_ops!r} (from argument allow_ops): allowed is a sequence "
            f"of op types, e.g. allow_ops=({allow_ops!r},)")
    if isinstance(origins, str) or not origins or not set(origins) <= set(ORIGINS):
        raise ConfigurationError(
            f"device_guard received origins={origins!r} (from argument origins): allowed is a non-empty sequence "
            f"of {', '.join(repr(origin) for origin in ORIGINS)}, e.g. origins=('user', 'input')")
    wanted = resolve(device, fallback=False, origin="tfplace.device_guard's argument device")
    guard = _DeviceGuard(wanted, frozenset(allow_ops), frozenset(origins))
    with _hooks.listening(guard), _collecting(guard):
        yield


# Function nodes that ran (a "removed" node never did).
_RAN = frozenset({Kind.PLACE, Kind.COMPILED})
# Ops that read only their input's shape: TensorFlow's placer puts them beside their input (its
# "metadata" ops), wherever the computation runs; they move no data.
_METADATA = frozenset({"Shape", "ShapeN", "Size", "Rank"})
