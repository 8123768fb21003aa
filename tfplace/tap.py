"""Quiet placement logging: on from runtime start, kept off the terminal until asked for.

TensorFlow 2.21 fixes placement logging when its runtime starts, so a capture
opened later sees placement only if logging was on from the start. `quiet()`
turns it on and routes fds 1 and 2 through unlinked spool files that a
background thread drains every few milliseconds: placement lines printed by
TensorFlow (prefixed eager and placer lines on fd 2, bare placer lines on
fd 1) are dropped, every other byte goes on to the original stream in order.
A writer never blocks on a file, so no volume of output can deadlock. `loud()`
removes the filter (the lines reach the terminal again).

Lines the program prints itself, such as `log.guide_lines()`, are not
dropped: they lack TensorFlow's log prefix. Implicit-copy warnings of the
"warn" device policy are kept. Output is delayed by at most a poll interval;
on a hard crash (no `atexit`), that last slice may be lost.

Example:
    >>> from tfplace import tap
    >>> tap.quiet()      # before the first op; configure() does this by default
    >>> tap.is_quiet()
    True
    >>> tap.loud()
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import sys
import threading
from typing import Optional

from tfplace.spool import Spool, write_all

__all__ = ["quiet", "loud", "is_quiet", "keep_descriptors", "flush_buffers", "fd_lock", "POLL_SECONDS"]

POLL_SECONDS = 0.01
_ROTATE_BYTES = 64 << 20
_DROP = {
    2: re.compile(rb"(?m)^[IWEF]\d{4} [\d:.]+ +\d+ (?:execute|placer)\.cc:\d+\] "
                  rb"(?:Executing op \S+ in device \S+|[\w.\-/>]+: \(\w+\): \S+)\n"),
    1: re.compile(rb"(?m)^[\w.\-/>]+: \(\w+\): /job:\w+/replica:\d+/task:\d+/device:[A-Za-z_]+:\d+\n"),
}
_libc = ctypes.CDLL(None)
fd_lock = threading.Lock()  # held while anyone swaps what fds 1 and 2 point at


class _Stream:
    """One descriptor routed through a spool file to its original target."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.target = os.dup(fd)
        self.spool = self._point_at_new_spool()
        self.retired: list[Spool] = []  # replaced spools, drained on the next pump

    def _point_at_new_spool(self) -> Spool:
        spool = Spool()
        os.dup2(spool.fd, self.fd)
        return spool

    def _forward(self, data: bytes) -> None:
        write_all(self.target, _DROP[self.fd].sub(b"", data))

    def pump(self, final: bool = False) -> None:
        """Forwards what was written since the last pump, without TensorFlow's placement lines."""
        for old in self.retired:  # writes begun before a rotation still land in the old spool
            for piece in old.new_lines(final=True):
                self._forward(piece)
            old.close()
        self.retired.clear()
        before = self.spool.read_at
        for piece in self.spool.new_lines(final):
            self._forward(piece)
        if self.spool.carry and self.spool.read_at == before:  # a partial line that stopped growing (a prompt)
            self._forward(self.spool.take_partial())

    def rotate_if_large(self) -> None:
        """Starts a new spool once this one is large, so a long run does not fill the disk."""
        if self.spool.read_at < _ROTATE_BYTES:
            return
        with fd_lock:
            if os.fstat(self.fd).st_ino != os.fstat(self.spool.fd).st_ino:
                return  # a capture holds the descriptor now
            self.retired.append(self.spool)
            self.spool = self._point_at_new_spool()

    def close(self) -> None:
        self.pump(final=True)
        os.dup2(self.target, self.fd)
        os.close(self.target)
        self.spool.close()


def flush_buffers() -> None:
    """Python's and C's stdio buffers, so what they hold goes through the right descriptor."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    _libc.fflush(None)


class _Tap:
    def __init__(self) -> None:
        flush_buffers()
        with fd_lock:
            self.streams = [_Stream(1), _Stream(2)]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="tfplace-tap", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(POLL_SECONDS):
            self.pump()

    def pump(self) -> None:
        _libc.fflush(None)
        for stream in self.streams:
            stream.pump()
            stream.rotate_if_large()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        flush_buffers()
        with fd_lock:
            for stream in self.streams:
                stream.close()


_tap: Optional[_Tap] = None
_filtering_allowed = True


def quiet() -> None:
    """Turns placement logging on (before runtime start) and keeps TensorFlow's lines off the terminal.

    Where descriptors belong to someone else (pytest's fd capture, see
    `keep_descriptors`), only turns logging on.
    """
    global _tap
    import tensorflow as tf

    from tfplace import tfstate

    if not tfstate.runtime_started():
        tf.debugging.set_log_device_placement(True)
    if _tap is None and _filtering_allowed:
        _tap = _Tap()


def keep_descriptors() -> None:
    """Never route fds 1 and 2 through the filter (pytest swaps them per test phase)."""
    global _filtering_allowed
    _filtering_allowed = False


def loud() -> None:
    """Removes the filter: TensorFlow's placement lines reach the terminal again."""
    global _tap
    if _tap is not None:
        _tap.close()
        _tap = None


def is_quiet() -> bool:
    """True while the filter is in place."""
    return _tap is not None


atexit.register(loud)
