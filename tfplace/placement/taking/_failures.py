"""Eager ops that raise, as "failed" records, and function calls in flight: what tfplace puts on
TensorFlow's paths that raise an op's error (`ops.raise_from_not_ok_status`, `execute.execute`)
while a capture listens.

Example:
    >>> from tfplace.placement.taking import _failures
    >>> _failures.record_failure(ValueError("no op named here"))   # nothing listens: nothing recorded
"""

from __future__ import annotations

import re
import threading
from typing import Any, Optional

import tensorflow as tf

from tfplace import _contained, _tensorflow
from tfplace._devices import canonical_name, requested_name
from tfplace.placement.functions import _datasets
from tfplace.placement.ops import _kernels
from tfplace.placement.records import _origins
from tfplace.placement.records._records import Kind, PlacementRecord
from tfplace._names import is_function_call
from tfplace.placement.session import _session
from tfplace.placement.session._sources import user_line
from tfplace.placement.taking import _eager, _events
from tfplace.placement.taking._callback import thread_hooks

__all__ = ["record_failure", "status_to_exception", "execute"]


# An eager op that raises: TensorFlow's message names the op ("[Op:MatMul]") and, when a
# kernel ran, its device ("{{function_node __wrapped__MatMul_device_/job:.../device:CPU:0}}").
_FAILED_OP = re.compile(r"\[Op:([^\]\s]+)\]")
# A function call TensorFlow rejected before running it (an argument of the wrong dtype): it logs no
# execution of it.
_REJECTED = re.compile(r"cannot compute \S+ as input #\d+\(zero-based\) was expected to be a ")
_FAILED_DEVICE = re.compile(r"__wrapped__\w*?_device_(/job:[^/}]+/replica:\d+/task:\d+/device:[A-Za-z_]+:\d+)")


def record_failure(error: BaseException, dtypes: Optional[tuple[tuple[str, str], ...]] = None) -> None:
    """Gives the listening hooks a "failed" record for an eager op's error (once per error);
    `dtypes` when the caller knows them, else read from the frames that called the op."""
    hooks = thread_hooks()
    if not hooks or _tensorflow.recorded(error):
        return
    message = str(getattr(error, "message", ""))
    op = _FAILED_OP.search(message)
    if op is None:
        return
    _tensorflow.mark_recorded(error)
    if _REJECTED.match(message):  # no execution: no record
        return
    device = _FAILED_DEVICE.search(message)
    requested = _tensorflow.device_name()
    where = device[1] if device else requested or _eager.HOST
    name = op[1] if is_function_call(op[1]) else _kernels.op_type(op[1])
    if dtypes is None:
        dtypes = _tensorflow.failed_op_dtypes(name, 2)
    if name == "IteratorGetNext" and isinstance(error, tf.errors.OutOfRangeError):
        _datasets.exhausted(_tensorflow.failed_op_argument("iterator", 2))
    requested = requested_name(requested)
    record = PlacementRecord(name, "", canonical_name(where), Kind.FAILED,
                             source=user_line() if any(h.sources for h in hooks) else "",
                             requested=requested, dtypes=dtypes,
                             requested_by=getattr(hooks[0].session.asked, "scope", ("", ""))[1] if requested else "",
                             origin=_origins.of_op(name, _origins.live(2)), error=type(error).__name__)
    for hook in hooks:
        hook.records(_events.EventKey(_events.Event.FAILED, id(error)), [record])


def status_to_exception(status: Any) -> Any:
    """Where the fast path's errors become exceptions (`ops.raise_from_not_ok_status`)."""
    error = _tensorflow.STATUS_TO_EXCEPTION.original(status)
    record_failure(error)
    return error


def execute(op_name: Any, num_outputs: int, inputs: Any, attrs: Any, ctx: Any, name: Any = None) -> Any:
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
        try:
            record_failure(error, _eager.dtypes(_eager.type_values(op_name, attrs)))
        except Exception as own:  # pylint: disable=broad-except
            _contained.failed("record of a failed op", own)
        raise
    finally:
        if calling:
            del in_flight[thread]
