"""tfplace's own failures inside a program it watches: reported, never raised into the program.

tfplace runs code of its own inside the program's calls: op callbacks, TensorFlow functions it patches
(`tfplace._tensorflow.Patch`), the trace's import hook. A failure there is tfplace's, not the program's:
`failed(where, error)` makes the log of every open capture incomplete with the reason (with none open, it
warns once), and the program's call goes on as it would without tfplace. `patched(replacement, original,
where)` makes a patch's replacement that way: an exception the replacement raises that is not the original's
own is reported, and the call returns what the original returned (running it, if it had not run yet).

Example:
    >>> import warnings
    >>> from tfplace import _contained
    >>> reasons = []
    >>> with _contained.reporting(reasons.append):
    ...     _contained.failed("op callback", ValueError("no device"))
    >>> print(reasons[0].partition(")")[0] + ")")
    tfplace's op callback failed (ValueError: no device)
    >>> def original(x):
    ...     return x + 1
    >>> def replacement(x):
    ...     through(x)
    ...     raise KeyError("tfplace's own bug")
    >>> run, through = _contained.patched(replacement, original, "example patch")
    >>> with warnings.catch_warnings(record=True):
    ...     run(1)
    2
"""

from __future__ import annotations

import contextlib
import os
import threading
import traceback
import warnings
from typing import Any, Callable, Iterator

from tfplace._errors import ImplicitCopyError, PlacementError

__all__ = ["ON_PURPOSE", "failed", "reporting", "patched"]

ON_PURPOSE = (ImplicitCopyError, PlacementError)  # a guard's verdict on the program's op: raised into it

_reporters: list[Callable[[str], None]] = []  # the open captures' `mark_incomplete`
_warned: set[str] = set()
_lock = threading.Lock()
_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def _where_in_tfplace(error: BaseException) -> str:
    """`file.py:LINE` of the innermost tfplace frame of `error`'s traceback ("" without one)."""
    found = ""
    for frame in traceback.extract_tb(error.__traceback__):
        if os.path.abspath(frame.filename).startswith(_PACKAGE):
            found = f"{os.path.relpath(frame.filename, os.path.dirname(_PACKAGE))}:{frame.lineno}"
    return found


def failed(where: str, error: BaseException) -> None:
    """Reports that tfplace's own `where` raised `error` inside the program: every open capture's log is
    incomplete with the reason; with no capture open, a warning (once per reason)."""
    at = _where_in_tfplace(error)
    reason = (f"tfplace's {where} failed ({type(error).__name__}: {error}{', at ' + at if at else ''}); the program "
              "went on as without tfplace, and what tfplace would have recorded there is missing (a defect of "
              "tfplace: please report it with this line)")
    with _lock:
        reporters = list(_reporters)
        if not reporters:
            if reason in _warned:
                return
            _warned.add(reason)
    try:  # (under `python -W error` a warning raises: it must not reach the program either)
        for report in reporters:
            report(reason)
        if not reporters:
            warnings.warn(reason, RuntimeWarning, stacklevel=2)
    except Exception:  # pylint: disable=broad-except
        pass


@contextlib.contextmanager
def reporting(report: Callable[[str], None]) -> Iterator[None]:
    """Inside the block, `failed()` hands its reason to `report` (a capture's `log.mark_incomplete`)."""
    with _lock:
        _reporters.append(report)
    try:
        yield
    finally:
        with _lock:
            _reporters.remove(report)


_NOT_RUN = object()


def patched(replacement: Callable[..., Any], original: Callable[..., Any],
            where: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """`(run, through)`: `run` calls `replacement`, which calls the original through `through`. When the
    replacement raises what the original did not (tfplace's own failure), `failed(where, ...)` reports it
    and `run` returns what the original returned, running it if it had not run; the original's own
    exceptions (the program's) pass unchanged."""
    state = threading.local()

    def run(*args: Any, **kwargs: Any) -> Any:
        calls = getattr(state, "calls", None)
        if calls is None:
            calls = state.calls = []
        call: list[Any] = [_NOT_RUN, None]  # the original's result, its exception
        calls.append(call)
        try:
            return replacement(*args, **kwargs)
        except ON_PURPOSE:
            raise
        except Exception as error:  # pylint: disable=broad-except
            if call[1] is error:
                raise
            failed(where, error)
            if call[1] is not None:
                raise call[1] from None
            return original(*args, **kwargs) if call[0] is _NOT_RUN else call[0]
        finally:
            calls.pop()

    def through(*args: Any, **kwargs: Any) -> Any:
        calls = getattr(state, "calls", None)
        call = calls[-1] if calls else None
        try:
            result = original(*args, **kwargs)
        except BaseException as error:
            if call is not None:
                call[1] = error
            raise
        if call is not None:
            call[0] = result
        return result

    return run, through


RUN_CODE = patched(len, len, "")[0].__code__  # the frame every patched call adds (what frame readers pass over)
