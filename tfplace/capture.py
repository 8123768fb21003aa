"""`capture_placement()`: what TensorFlow prints about placement, captured as data.

TensorFlow prints placement from C++ straight to file descriptors 1 and 2, past
Python's `sys.stdout`. For the block, both descriptors are pointed at unlinked
spool files (a writer can never block on them, whatever the volume); when the
block ends the previous descriptors come back, the spool is parsed in chunks,
and every byte that is not a placement line is written back to the stream it
came from, in order. The log can also be read inside the block. Where `sys.stdout`/`sys.stderr` are not the descriptors themselves
(Jupyter, pytest's `--capture=sys`), they are captured at the Python level too.

Output of other threads during the block is captured with it and written back
at its end (delayed, never lost); their placement lines, indistinguishable at
the descriptor level, are attributed to the block. Captures nest (the outer log
also sees the inner block's records); captures in different threads take turns.

Example:
    >>> import tensorflow as tf, tfplace
    >>> with tfplace.capture_placement() as log:
    ...     c = tf.matmul(tf.ones((2, 3)), tf.ones((3, 2)))
    >>> log.devices_for("MatMul")
    ('/device:CPU:0',)
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
import threading
import warnings
from typing import Iterator, Optional

import tensorflow as tf

from tfplace import tap, tfstate
from tfplace.placement_log import PlacementLog
from tfplace.spool import Spool, write_all

__all__ = ["capture_placement", "capture_into", "logging_state"]

_lock = threading.RLock()
_open: list["_Capture"] = []  # the captures open now, innermost last


def _is_fd(stream: object, fd: int) -> bool:
    try:
        return stream.fileno() == fd  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False


class _Redirect:
    """Points one file descriptor at a spool file until `restore()`."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.spool = Spool()
        with tap.fd_lock:
            self.saved = os.dup(fd)
            os.dup2(self.spool.fd, fd)

    def restore(self) -> None:
        with tap.fd_lock:
            os.dup2(self.saved, self.fd)
            os.close(self.saved)

    def new_text(self, final: bool) -> Iterator[str]:
        """Text spooled since the last call, in whole lines (all of it, when `final`)."""
        for piece in self.spool.new_lines(final):
            yield piece.decode("utf-8", "surrogateescape")
        if final:
            self.spool.close()


def _write_text(fd: int, text: str) -> None:
    write_all(fd, text.encode("utf-8", "surrogateescape"))


@functools.lru_cache(maxsize=1)
def logging_state() -> str:
    """How TensorFlow logs placement in this started runtime, probed once.

    TensorFlow 2.21 fixes placement logging when its runtime starts: turning
    it on later has no effect. Runs one small function with logging asked
    for, captures fds 1 and 2, and returns

    * "complete": eager "Executing op" lines and placer lines both appear;
    * "placer-only": only placer lines (fd 1) appear, because
      `TF_CPP_MIN_LOG_LEVEL` >= 1 was set when TensorFlow was imported;
    * "off": nothing appears, because placement logging was off when the
      runtime started.

    Call only after the runtime has started (see `tfstate.runtime_started`).
    """
    with _lock:
        tap.flush_buffers()
        redirects = [_Redirect(1), _Redirect(2)]
        try:
            tf.function(lambda: tf.identity(tf.zeros(())) + 1.0)()
        finally:
            tap.flush_buffers()
            for redirect in reversed(redirects):
                redirect.restore()
        out, err = ("".join(r.new_text(final=True)) for r in redirects)
    if "Executing op" in err:
        return "complete"
    return "placer-only" if "(Identity)" in out else "off"


class _Capture:
    """One open capture: its redirects, its Python-level buffers and its log."""

    def __init__(self, log: PlacementLog, passthrough: bool, parent: Optional["_Capture"]) -> None:
        self.passthrough = passthrough
        self.parent = parent
        if parent is not None:
            parent.pull()  # the parent's earlier events come before this block's
        tap.flush_buffers()
        self.redirects = [_Redirect(1), _Redirect(2)]
        self.python_streams = {
            name: getattr(sys, name) for name, fd in (("stdout", 1), ("stderr", 2))
            if not _is_fd(getattr(sys, name), fd)
        }
        self.buffers = {name: io.StringIO() for name in self.python_streams}
        self.buffer_read = dict.fromkeys(self.buffers, 0)
        for name, buffer in self.buffers.items():
            setattr(sys, name, buffer)
        self.log = log
        log.start_pulling(self.pull)

    def _route(self, text: str) -> str:
        """Adds the placement events of `text` to this log and the enclosing ones;
        returns what to write back."""
        parsed = self.log.extend(text)
        parent = self.parent
        while parent is not None:
            parent.log.adopt(parsed.records, parsed.copies)
            parent = parent.parent
        return parsed.other if self.passthrough else ""

    def pull(self, final: bool = False) -> None:
        """Parses what was written since the last pull and writes back the rest."""
        tap.flush_buffers()
        for redirect in reversed(self.redirects):  # fd 2 first: see PlacementLog.extend
            for text in redirect.new_text(final):
                out = self._route(text)
                if out:
                    _write_text(redirect.saved if not final else redirect.fd, out)
        for name, buffer in self.buffers.items():
            text = buffer.getvalue()[self.buffer_read[name]:]
            self.buffer_read[name] += len(text)
            out = self._route(text)
            if out:
                self.python_streams[name].write(out)
                self.python_streams[name].flush()

    def close(self) -> None:
        """Restores the streams, then parses and writes back everything left."""
        tap.flush_buffers()
        for name, stream in self.python_streams.items():
            setattr(sys, name, stream)
        for redirect in reversed(self.redirects):
            redirect.restore()
        self.pull(final=True)
        self.log.stop_pulling()


@contextlib.contextmanager
def capture_placement(*, passthrough: bool = True) -> Iterator[PlacementLog]:
    """Captures the placement events of the block as a `PlacementLog`.

    TensorFlow 2.21 fixes placement logging when its runtime starts, so
    `configure()` turns it on quietly (see `tfplace.tap`) unless told
    `log_placement=False`; a capture opened before the runtime starts does the
    same. A capture opened after a start without logging sees nothing: its
    log is marked incomplete, with a warning. Outside captures the terminal
    shows what it showed before. The log can be queried inside the block
    (it reads what was printed so far) and is final when the block ends.

    >>> import tensorflow as tf, tfplace
    >>> with tfplace.capture_placement() as log:
    ...     x = tf.ones(3) + 1
    >>> log.assert_placed("AddV2", "CPU:0")

    Args:
      passthrough: write every captured byte that is not a placement line back
        to the stream it came from (False drops it).

    Yields:
      The `PlacementLog`.
    """
    with capture_into(PlacementLog(), passthrough=passthrough) as log:
        yield log


@contextlib.contextmanager
def capture_into(log: PlacementLog, *, passthrough: bool = True) -> Iterator[PlacementLog]:
    """`capture_placement()` filling a given log (the pytest fixture's, made earlier)."""
    with _lock:
        if not tfstate.runtime_started():
            tap.quiet()  # logging must be on when the runtime starts; off the terminal outside captures
        capture = _Capture(log, passthrough, _open[-1] if _open else None)
        _open.append(capture)
        try:
            yield log
        finally:
            _open.pop()
            capture.close()
    _check_complete(log)


def _check_complete(log: PlacementLog) -> None:
    if any(r.kind == "execute" for r in log.records) or not tfstate.runtime_started():
        return
    state = logging_state()
    if state == "complete":
        return
    if state == "placer-only":
        why = (f"TF_CPP_MIN_LOG_LEVEL={os.environ.get('TF_CPP_MIN_LOG_LEVEL', '?')} was set when TensorFlow "
               "was imported, so its eager 'Executing op' lines are hidden; the log holds only graph placer "
               "lines. Unset it (or set 0) before importing TensorFlow for a complete log.")
    else:
        why = ("placement logging was off when TensorFlow's runtime started, and TensorFlow fixes it then: "
               "nothing could be captured. Call tfplace.configure() (without log_placement=False) or open "
               "a capture before the first TensorFlow op.")
    log.complete = False
    log.incomplete_reason = why
    warnings.warn(f"tfplace: incomplete placement log: {why}", RuntimeWarning, stacklevel=5)
