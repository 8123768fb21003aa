"""`capture_placement()`: where each op of a block ran, recorded from TensorFlow's own Python hooks.

Eager ops come from an op callback (`tfplace.hooks`), function nodes from
TensorFlow's graph collection (`tfplace.graphs`). Nothing reads TensorFlow's
log text: a capture works at any point of a program, before or after the
runtime starts, with or without `configure()`, whatever
`TF_CPP_MIN_LOG_LEVEL` says, and never touches the process's output.

Captures nest (both logs see the inner block). Ops of the block's thread and
of the threads TensorFlow starts for it (`MirroredStrategy`'s replicas) are
recorded; ops of other threads are not, but every function placed while the
block is open is.

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
from typing import Iterator, Optional, Sequence

from tfplace import graphs, hooks
from tfplace.placement_log import PlacementLog
from tfplace.records import CopyRecord, PlacementRecord
from tfplace.sources import user_stacklevel

__all__ = ["capture_placement", "capture_into"]


class _Recorder:
    """The hook listener of one capture: appends records and copies, notes functions placed earlier."""

    def __init__(self, log: PlacementLog, sources: bool) -> None:
        self.sources = sources
        self.append = log._records.append
        self.copies = log._copies
        self.placed_here: set[str] = set()
        self.placed_before: dict[str, None] = {}

    def on_op(self, record: PlacementRecord, copies: Sequence[CopyRecord], placed: Optional[bool]) -> None:
        self.append(record)
        if copies:
            self.copies.extend(copies)
        if placed is not None:
            if placed:
                self.placed_here.add(record.op)
            elif record.op not in self.placed_here:
                self.placed_before[record.op] = None


@contextlib.contextmanager
def capture_placement(*, sources: bool = False) -> Iterator[PlacementLog]:
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

    Yields:
      The `PlacementLog`, growing while the block runs. If the block ran a
      function that TensorFlow placed before the block opened, the log's
      `complete` is False, with `incomplete_reason` and a warning.
    """
    with capture_into(PlacementLog(), sources=sources) as log:
        yield log


@contextlib.contextmanager
def capture_into(log: PlacementLog, *, sources: bool = False) -> Iterator[PlacementLog]:
    """`capture_placement()` filling a given log (the pytest fixture's, made earlier)."""
    recorder = _Recorder(log, sources)
    graphs.attach(log)
    log._refresh = graphs.collect
    try:
        with hooks.listening(recorder):
            yield log
    finally:
        log._refresh = None
        graphs.detach(log)
        if recorder.placed_before:
            _mark_incomplete(log, list(recorder.placed_before))


def _mark_incomplete(log: PlacementLog, functions: list[str]) -> None:
    names = ", ".join(functions[:5]) + (f" and {len(functions) - 5} more" if len(functions) > 5 else "")
    log.complete = False
    log.incomplete_reason = (
        f"the block ran {len(functions)} function(s) that TensorFlow placed before the block opened ({names}); "
        "TensorFlow places a function once, at its first call, so their inner nodes are not in this log. "
        "Open the capture before the function's first call to record them.")
    warnings.warn(f"tfplace: incomplete placement log: {log.incomplete_reason}", RuntimeWarning,
                  stacklevel=user_stacklevel())
