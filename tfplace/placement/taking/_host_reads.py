"""Reads of a tensor's value in the user's Python, marked in the running profile: while a timed capture
listens, each `.numpy()`, `float`, `int`, `bool`, `if` or `print` on an eager tensor that the user's own
line makes is an event `tfplace_host_read` with stat `source` (that line) on the host plane, so that a
step's time waiting for a device's result is `sync` and a read in every step is named
(`tfplace.placement.steps`). Reads TensorFlow, Keras and other libraries make are left unmarked.

Example:
    >>> import tensorflow as tf
    >>> with marking():
    ...     float(tf.ones(()))
    1.0
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator

from tfplace import _tensorflow
from tfplace.placement.session._sources import reader_line

__all__ = ["marking", "EVENT"]

EVENT = "tfplace_host_read"  # the event's name in the profile; its stat `source` is the user's line


def _numpy(tensor: Any) -> Any:
    line = reader_line(sys._getframe(1))  # pylint: disable=protected-access
    if line is None:
        return _tensorflow.HOST_READ.original(tensor)
    with _tensorflow.trace_me(EVENT, source=line):
        return _tensorflow.HOST_READ.original(tensor)


@contextlib.contextmanager
def marking() -> Iterator[None]:
    """Inside the block, the user's reads of tensor values are marked in the profile (one block at a time:
    TensorFlow runs one profiler session per process, and only a timed capture that holds it marks)."""
    _tensorflow.HOST_READ.install(_numpy)
    try:
        yield
    finally:
        _tensorflow.HOST_READ.remove()
