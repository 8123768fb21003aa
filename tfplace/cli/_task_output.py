"""What `tfplace launch` prints of its tasks: each line a task prints, whole, after the task's name
(`[worker 1] `), from any thread; TensorFlow's placement lines hidden where the launcher keeps them for the
trace; the launcher's own messages on standard error.

Example:
    >>> import io
    >>> from tfplace.cli._task_output import forward
    >>> out = io.StringIO()
    >>> forward(io.BytesIO(b"step 1\\n"), b"[chief] ", out, None, hide=True)
    >>> out.getvalue()
    '[chief] step 1\\n'
"""

from __future__ import annotations

import re
import sys
import threading
from typing import IO, Optional

from tfplace.cli._server import is_placement_line

__all__ = ["emit", "say", "forward"]

# The first line of the session options a server prints when it logs placement (a multi-line proto follows).
_SESSION_OPTIONS = re.compile(rb"eager_service_impl\.cc:\d+\] SessionOptions:")
_WRITING = threading.Lock()  # whole lines on the launcher's standard output and error, from any thread


def emit(stream: IO[str], data: bytes) -> None:
    """Writes `data` (whole lines) on `stream`, flushed, whole whatever other thread writes at the same time."""
    with _WRITING:
        try:
            stream.flush()
            stream.buffer.write(data) if hasattr(stream, "buffer") else stream.write(data.decode(errors="replace"))
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: the tasks' lines are still read, and dropped
            pass


def say(text: str) -> None:
    """A message of the launcher's own, on standard error."""
    emit(sys.stderr, f"tfplace launch: {text}\n".encode("utf-8", "backslashreplace"))


def forward(pipe: IO[bytes], prefix: bytes, stream: IO[str], keep: Optional[IO[bytes]], hide: bool) -> None:
    """Passes each line of `pipe` on to `stream` after `prefix`; writes it to `keep` too, if given; with
    `hide`, TensorFlow's placement lines are not passed on."""
    options = False  # within the session options a server logs when it logs placement (up to a blank line)
    for line in iter(pipe.readline, b""):
        line = line if line.endswith(b"\n") else line + b"\n"
        if keep is not None:
            keep.write(line)  # unbuffered
        if hide:
            started = _SESSION_OPTIONS.search(line) is not None
            if options or started or is_placement_line(line):
                options = started or (options and line.strip() != b"")
                continue
        emit(stream, prefix + line)
    pipe.close()
    if keep is not None:
        keep.close()
