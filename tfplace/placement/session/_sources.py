"""Where in the user's code an op came from: the first frame outside TensorFlow, Keras, tfplace and every other
installed library (a frame in site-packages is climbed past to the line that called the library).

Example:
    >>> from tfplace.placement.session._sources import user_line
    >>> user_line().startswith("<doctest")
    True
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import site
import sys
import sysconfig
import threading
from types import CodeType, FrameType, TracebackType
from typing import Any, Iterator, Optional, Sequence

from tfplace.placement.session import _session

__all__ = ["user_line", "on_behalf_of", "user_frame", "live_line", "user_stacklevel", "reader_line", "stack_user_line",
           "shown_path", "started_by_framework", "end_at_user", "AUTOGRAPH"]


def _package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return ""
    return os.path.join(list(spec.submodule_search_locations)[0], "")


# The standard library's context managers, threads and pools (TensorFlow runs some of its own work on them).
_PLUMBING = tuple(os.path.join(os.path.dirname(os.__file__), name) for name in (
    "threading.py", "contextlib.py", os.path.join("multiprocessing", ""), os.path.join("concurrent", "")))
def _library_dirs() -> tuple[str, ...]:
    """The folders installed distributions live in (site-packages, dist-packages, the user's site): code there
    is a library's (tensorflow_text, keras_hub, tensorflow_probability, ...), never the user's own line."""
    found = {sysconfig.get_paths().get(key, "") for key in ("purelib", "platlib")}
    found.update(getattr(site, "getsitepackages", lambda: [])())
    found.add(getattr(site, "getusersitepackages", lambda: "")() or "")
    found.update(entry for entry in sys.path
                 if os.path.basename(entry.rstrip(os.sep)) in ("site-packages", "dist-packages"))
    found = {d for d in found if d and os.path.isdir(d)}
    return tuple(sorted({os.path.join(path, "") for d in found for path in (d, os.path.realpath(d))}))


_LIBRARIES = _library_dirs()
_INTERNAL = tuple(d for d in map(_package_dir, ("tensorflow", "keras", "tf_keras", "tfplace", "optree")) if d) + \
    _PLUMBING + _LIBRARIES
_TFPLACE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "")
_FRAMEWORKS = tuple(d for d in map(_package_dir, ("tensorflow", "keras", "tf_keras")) if d)
_STDLIB = os.path.join(os.path.dirname(os.__file__), "")
AUTOGRAPH = "__autograph_generated_file"  # the files autograph writes a converted function's code to
# The capture session keeps what it learned of code objects and files (`_session.current()`):
# `shown_files`, file name -> how a line of it is shown ("" for internal code: a code object's file name is
# one string per module, whose hash is kept); `user_depths`, id of the code of an innermost frame -> (frames
# from it to the user's, code of the internal frame just inside the user's). Outside a session nothing is kept.


def _caches() -> tuple[dict, dict]:
    session = _session.current()
    return (session.shown_files, session.user_depths) if session is not None else ({}, {})


def shown_path(filename: str) -> str:
    """`filename` relative to the working directory when it lies below it, else as given."""
    if os.path.isabs(filename):
        relative = os.path.relpath(filename)
        if not relative.startswith(".."):
            return relative
    return filename


def _shown_file(filename: str) -> str:
    """How `filename` is shown in a source line, "" for TensorFlow's, Keras's and tfplace's code (cached)."""
    files = _caches()[0]
    shown = files.get(filename)
    if shown is None:
        shown = files[filename] = "" if filename.startswith(_INTERNAL) else shown_path(filename)
    return shown


def _shown(code: CodeType, files: dict) -> str:
    """`_shown_file` of the file of `code`, read in `files` (the session's `shown_files`)."""
    shown = files.get(code.co_filename)
    if shown is None:
        shown = _shown_file(code.co_filename)
    return shown


_ON_BEHALF = threading.local()  # per thread: the user's line whose work the thread runs (a scheduled closure's)


@contextlib.contextmanager
def on_behalf_of(line: str) -> Iterator[None]:
    """Inside the block, `user_line()` on this thread gives `line` where no frame is the user's: a thread of
    TensorFlow's running work the user's line asked for (a `ClusterCoordinator` running what `schedule` got)."""
    before = getattr(_ON_BEHALF, "line", "")
    _ON_BEHALF.line = line
    try:
        yield
    finally:
        _ON_BEHALF.line = before


def _frame_shown(frame: FrameType, files: dict) -> str:
    """`_shown` of a frame's code; "" also for the op wrappers TensorFlow generates when a library loads its
    ops (`tf.load_op_library` runs them from a string in a module marked `_IS_TENSORFLOW_PLUGIN`), which are
    no more the user's line than `gen_*_ops.py` is."""
    shown = _shown(frame.f_code, files)
    if shown == "<string>" and frame.f_globals.get("_IS_TENSORFLOW_PLUGIN"):
        return ""
    return shown


def user_line() -> str:
    """`"file.py:LINE"` of the innermost caller outside TensorFlow, Keras and tfplace (where there is none, the
    line `on_behalf_of` gives this thread, else "").

    How many internal frames lie between a given innermost frame and the user's, and which
    internal code calls the user's frame, are remembered: a repeated call jumps there and
    takes it when the same internal code calls a user frame there, else walks every frame
    (a program run by `runpy` from tfplace's own code has user-looking frames further out).
    """
    innermost = sys._getframe(1).f_code
    files, depths = _caches()
    known = depths.get(id(innermost))
    if known is not None:
        depth, boundary = known
        try:
            frame = sys._getframe(1 + depth)
        except ValueError:
            frame = None
        if frame is not None:
            shown = _frame_shown(frame, files)
            if shown and (depth == 0 or sys._getframe(depth).f_code is boundary):
                return f"{shown}:{frame.f_lineno}"
    frame, depth, inner = sys._getframe(1), 0, None
    while frame is not None:
        shown = _frame_shown(frame, files)
        if shown:
            depths[_session.pin(innermost)] = (depth, inner)
            return f"{shown}:{frame.f_lineno}"
        inner = frame.f_code
        frame, depth = frame.f_back, depth + 1
    return getattr(_ON_BEHALF, "line", "")


def user_frame(frame: Optional[FrameType]) -> tuple[int, Optional[FrameType], str]:
    """The innermost frame from `frame` out outside TensorFlow, Keras and tfplace: (how many frames out of
    `frame` it is, the frame, its `"file.py:LINE"`); `(-1, None, "")` when there is none."""
    files = _caches()[0]
    depth = 0
    while frame is not None:
        shown = _frame_shown(frame, files)
        if shown:
            return depth, frame, f"{shown}:{frame.f_lineno}"
        frame, depth = frame.f_back, depth + 1
    return -1, None, ""


def live_line(frame: Optional[FrameType]) -> Optional[str]:
    """`user_frame(frame)`'s line, as a traced op's saved stack would give it; None where only that stack can
    tell: a frame of autograph's generated code, which TensorFlow's stack maps back to the user's source."""
    _, found, line = user_frame(frame)
    return None if found is not None and AUTOGRAPH in found.f_code.co_filename else line


def stack_user_line(frames: Sequence[Any]) -> str:
    """`"file.py:LINE"` of the innermost frame outside TensorFlow, Keras and tfplace in a
    stack saved earlier (outermost first; frames with `filename` and `lineno`, such as a
    graph op's `traceback`), "" if none."""
    for index in range(len(frames) - 1, -1, -1):
        frame = frames[index]
        shown = _shown_file(frame.filename)
        if shown:
            return f"{shown}:{frame.lineno}"
    return ""


# TensorFlow's methods through which Python reads a tensor's value (`EagerTensor`'s and variables').
_READS = frozenset({"numpy", "_numpy", "numpy_text", "value_text", "__int__", "__float__", "__index__", "__bool__",
                    "__complex__", "__format__", "__repr__", "__str__", "__array__", "__len__", "__iter__",
                    "__nonzero__"})


def reader_line(frame: Optional[FrameType]) -> Optional[str]:
    """`"file.py:LINE"` of the code that read a tensor's value (`.numpy()`, `float`, `int`, `bool`, `if`,
    `print`, `np.asarray`) from `frame` out, TensorFlow's reading methods and tfplace passed over, when the
    user wrote it; None where TensorFlow, Keras or another library read it (a read Keras makes inside
    `fit` is not the user's to change)."""
    outermost = ""  # the outermost frame of TensorFlow's, Keras' or another library's below the user's
    while frame is not None and not _is_users(frame.f_code.co_filename):
        if not frame.f_code.co_filename.startswith(_TFPLACE):
            outermost = frame.f_code.co_name
        frame = frame.f_back
    # the user's read: the library code below it is a reading method (`numpy`, `__float__`, `__repr__`: a
    # `print` of a strategy's `PerReplica` reads each replica's tensor through the distribute package's
    # helpers, inside its `__repr__`); where it is anything else (Keras' `fit`), the library read
    if frame is None or outermost and outermost not in _READS:
        return None
    return f"{_shown(frame.f_code, _caches()[0])}:{frame.f_lineno}"


def user_stacklevel() -> int:
    """The `stacklevel` for `warnings.warn`, called here, that points at the user's code."""
    frame, level = sys._getframe(1), 1
    files = _caches()[0]
    while frame is not None:
        if _frame_shown(frame, files):
            return level
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return 1


def started_by_framework(depth: int = 2) -> bool:
    """True if the first frame, from `depth` frames up (2: the caller's caller), outside
    Python's standard library and tfplace is TensorFlow or Keras code: a thread TensorFlow starts, say."""
    frame = sys._getframe(depth)
    while frame is not None:
        filename = frame.f_code.co_filename
        if (not filename.startswith(_STDLIB) or "site-packages" in filename) and not filename.startswith(_TFPLACE):
            return filename.startswith(_FRAMEWORKS)
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _is_users(filename: str) -> bool:
    """Whether a frame of `filename` is the user's own code: not TensorFlow's, Keras', tfplace's nor
    Python's standard library (frozen modules included)."""
    return bool(_shown_file(filename)) and not filename.startswith("<frozen ") and not (
        filename.startswith(_STDLIB) and "site-packages" not in filename)


def end_at_user(error: BaseException) -> None:
    """Ends `error`'s traceback at the user's line when the frames after the user's last one (those of
    TensorFlow, Keras, Python's library and tfplace) hold one of tfplace's: an interrupt (SIGINT,
    SIGTERM) that landed in tfplace's op hook or signal handler reads as one that stopped the user's
    line. A traceback without a user frame, or whose end holds no tfplace frame, is left as it is."""
    last_user: Optional[TracebackType] = None
    tfplace_after = False
    tb = error.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if _is_users(filename):
            last_user, tfplace_after = tb, False
        elif filename.startswith(_TFPLACE):
            tfplace_after = True
        tb = tb.tb_next
    if last_user is not None and tfplace_after:
        last_user.tb_next = None
