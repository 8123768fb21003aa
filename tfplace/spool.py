"""Spool files: where fds 1 and 2 point while tfplace reads what TensorFlow prints.

A `Spool` is an unlinked temporary file. Writers never block on it, whatever
the volume (a pipe would block its writer once full), and it is read with
`pread`, which leaves the writers' file offset alone, in pieces of whole lines.
Both `capture_placement()` and the quiet-logging filter (`tfplace.tap`) use it.

Example:
    >>> import os
    >>> from tfplace.spool import Spool
    >>> spool = Spool()
    >>> _ = os.write(spool.fd, b"one\\ntw")
    >>> list(spool.new_lines()), spool.carry
    ([b'one\\n'], b'tw')
    >>> spool.close()
"""

from __future__ import annotations

import os
import tempfile
from typing import Iterator

__all__ = ["Spool", "write_all"]

_CHUNK = 1 << 22


class Spool:
    """An unlinked temporary file read incrementally, line by line."""

    def __init__(self) -> None:
        handle, path = tempfile.mkstemp(prefix="tfplace-")
        os.unlink(path)
        self.fd = handle
        self.read_at = 0
        self.carry = b""  # the start of a line whose end has not been written yet

    def new_lines(self, final: bool = False) -> Iterator[bytes]:
        """What was written since the last call, in pieces (of at most a few MiB) ending at line breaks.

        A partial last line is kept in `carry` for the next call, unless `final`.
        """
        while True:
            block = os.pread(self.fd, _CHUNK, self.read_at)
            self.read_at += len(block)
            data = self.carry + block
            cut = len(data) if final and len(block) < _CHUNK else data.rfind(b"\n") + 1
            self.carry = data[cut:]
            if cut:
                yield data[:cut]
            if len(block) < _CHUNK:
                return

    def take_partial(self) -> bytes:
        """The partial line held in `carry`, which is then empty."""
        partial, self.carry = self.carry, b""
        return partial

    def close(self) -> None:
        os.close(self.fd)


def write_all(fd: int, data: bytes) -> None:
    """Writes all of `data` to `fd`; if the reader has gone (a closed pipe), drops it as a closed terminal would."""
    while data:
        try:
            data = data[os.write(fd, data):]
        except OSError:
            return
