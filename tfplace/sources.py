"""Where in the user's code an op came from: the first frame outside TensorFlow, Keras and tfplace.

Example:
    >>> from tfplace.sources import user_line
    >>> user_line().startswith("<doctest")
    True
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import CodeType

__all__ = ["user_line", "user_stacklevel", "shown_path", "started_by_framework"]


def _package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return ""
    return os.path.join(list(spec.submodule_search_locations)[0], "")


_INTERNAL = tuple(d for d in map(_package_dir, ("tensorflow", "keras", "tf_keras", "tfplace")) if d) + tuple(
    os.path.join(os.path.dirname(os.__file__), name) for name in ("threading.py", "contextlib.py"))
_FRAMEWORKS = tuple(d for d in map(_package_dir, ("tensorflow", "keras", "tf_keras")) if d)
_STDLIB = os.path.join(os.path.dirname(os.__file__), "")
_where: dict[CodeType, str] = {}  # code object -> shown path, "" for internal code


def shown_path(filename: str) -> str:
    """`filename` relative to the working directory when it lies below it, else as given."""
    if os.path.isabs(filename):
        relative = os.path.relpath(filename)
        if not relative.startswith(".."):
            return relative
    return filename


def _classify(code: CodeType) -> str:
    filename = code.co_filename
    shown = "" if filename.startswith(_INTERNAL) else shown_path(filename)
    _where[code] = shown
    return shown


_depths: dict[CodeType, int] = {}  # code of the innermost frame -> frames from it to the user's


def _shown(code: CodeType) -> str:
    shown = _where.get(code)
    return _classify(code) if shown is None else shown


def user_line() -> str:
    """`"file.py:LINE"` of the innermost caller outside TensorFlow, Keras and tfplace ("" if none).

    The number of internal frames between a given innermost frame and the user's is remembered,
    so that a repeated call jumps there (checking it) instead of walking every frame.
    """
    innermost = sys._getframe(1).f_code
    depth = _depths.get(innermost)
    if depth is not None:
        try:
            frame = sys._getframe(1 + depth)
        except ValueError:
            frame = None
        if frame is not None:
            shown = _shown(frame.f_code)
            if shown and (depth == 0 or not _shown(sys._getframe(depth).f_code)):
                return f"{shown}:{frame.f_lineno}"
    frame, depth = sys._getframe(1), 0
    while frame is not None:
        shown = _shown(frame.f_code)
        if shown:
            _depths[innermost] = depth
            return f"{shown}:{frame.f_lineno}"
        frame, depth = frame.f_back, depth + 1  # type: ignore[assignment]
    return ""


def user_stacklevel() -> int:
    """The `stacklevel` for `warnings.warn`, called here, that points at the user's code."""
    frame, level = sys._getframe(1), 1
    while frame is not None:
        code = frame.f_code
        shown = _where.get(code)
        if (shown if shown is not None else _classify(code)):
            return level
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return 1


def started_by_framework(depth: int = 2) -> bool:
    """True if the first frame, from `depth` frames up (2: the caller's caller), outside
    Python's standard library is TensorFlow or Keras code: a thread TensorFlow starts, say."""
    frame = sys._getframe(depth)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_STDLIB) or "site-packages" in filename:
            return filename.startswith(_FRAMEWORKS)
        frame = frame.f_back  # type: ignore[assignment]
    return False
