"""Files tfplace writes (traces, timelines, plots, merged clusters) are whole or absent: written under a
temporary name in their folder and renamed, never truncated, even when a signal stops the writing.

Example:
    >>> import json, os, tempfile
    >>> from tfplace import _files
    >>> path = os.path.join(tempfile.mkdtemp(), "trace.json")
    >>> _files.write_json(path, {"records": []})
    >>> json.load(open(path))
    {'records': []}
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Callable

__all__ = ["write_whole", "write_json"]


def write_whole(path: str, write: Callable[[str], None]) -> None:
    """Calls `write(temporary)` for a temporary file beside `path` (same extension), then renames it to
    `path`: `path` is left whole, or as it was when anything (an exception, an interrupt) stops the
    writing. The file gets the permissions a new file gets."""
    folder, name = os.path.split(os.path.abspath(path))
    stem, extension = os.path.splitext(name)
    temporary = os.path.join(folder, f".{stem}.tfplace-{os.getpid()}{extension}")
    try:
        os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666))  # the umask applies
        write(temporary)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise



def write_json(path: str, data: Any) -> None:
    """Writes JSON data (a trace, a merged cluster) to `path`, whole or not at all (`write_whole`)."""
    def write(temporary: str) -> None:
        with open(temporary, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=1)

    write_whole(path, write)
