"""Running a script as `python script.py` runs it, for `tfplace trace`, and writing what follows it.

* `run_main(path, args)` runs the script as `__main__` with its own `sys.argv`, prints an uncaught
  exception's traceback as Python does (from the script's frames on) and, like Python before it
  exits, waits for the script's non-daemon threads; it returns the exit status Python would give.
* `stopping_signals()`: inside it, SIGTERM and SIGHUP raise `Interrupted` (a `KeyboardInterrupt`)
  in the main thread, as SIGINT raises `KeyboardInterrupt`: the script's `finally` blocks and
  `except KeyboardInterrupt` clean-ups run, and what ran can still be reported. A signal whose
  handler is not the default one (the script's own, `nohup`'s ignored SIGHUP) is left alone.
  `interrupt_status(error)` is the exit status of an interrupt: 128 + the signal's number.
* `Output`: the process's standard output as it was when tfplace started (a duplicate of its file
  descriptor; fd 1 itself is never closed, redirected or replaced), so that the report reaches the
  terminal or pipe whatever the script did to `sys.stdout`. A closed pipe (`| head -1`) loses the
  report, never the exit status.
* `after_import(name, then)`: inside it, `then()` runs once module `name` has been imported (at once
  if it already is): `tfplace trace` starts its capture when the script imports TensorFlow, so that
  what the script sets before (`TF_USE_LEGACY_KERAS=1`: `tf.keras` is `tf_keras`) works as under
  `python script.py`.

Example:
    >>> import signal
    >>> from tfplace.cli import _script
    >>> stopped = _script.Interrupted(signal.SIGTERM)
    >>> isinstance(stopped, KeyboardInterrupt), str(stopped), _script.interrupt_status(stopped)
    (True, 'SIGTERM', 143)
    >>> _script.interrupt_status(KeyboardInterrupt())
    130
    >>> _script.exit_status(None), _script.exit_status(3)
    (0, 3)
"""

from __future__ import annotations

import contextlib
import importlib.abc
import os
import runpy
import signal
import sys
import threading
import traceback
from typing import Any, Callable, Iterator, Optional, Sequence, cast

from tfplace import _contained
from tfplace.placement.session._sources import end_at_user

__all__ = ["Interrupted", "stopping_signals", "interrupt_status", "exit_status", "run_main", "Output",
           "flush_script_output", "after_import"]

STOPPING = (signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread as SIGINT raises `KeyboardInterrupt`."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:
        return signal.Signals(self.signum).name


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def stopping_signals() -> Iterator[None]:
    """In the block, SIGTERM and SIGHUP raise `Interrupted` in the main thread (where their handler is
    the default one); the previous handlers come back after it."""
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in STOPPING:
            if signal.getsignal(signum) == signal.SIG_DFL:
                previous[signum] = signal.signal(signum, _raise_interrupted)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def interrupt_status(error: KeyboardInterrupt) -> int:
    """128 + the number of the signal that raised `error` (SIGINT for a plain `KeyboardInterrupt`)."""
    return 128 + (error.signum if isinstance(error, Interrupted) else signal.SIGINT)


def exit_status(code: Any) -> int:
    """The exit status Python gives `sys.exit(code)` (a message is printed to stderr, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _print_traceback(error: BaseException, script: str) -> None:
    """The traceback from the script's own frames on, as `python script.py` prints it."""
    if isinstance(error, KeyboardInterrupt):
        end_at_user(error)  # it may have landed in tfplace's op hook or signal handler
    tb = error.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != script:
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb or error.__traceback__)


def _wait_for_threads() -> None:
    """What Python does before it exits: `threading`'s exit calls (which shut idle
    `concurrent.futures` workers down), then it joins every non-daemon thread, those they start
    included. Python's own routine, run now; it runs once per process, so the interpreter's exit
    does not wait again. A signal interrupts the wait."""
    threading._shutdown()  # type: ignore[attr-defined]


def run_main(path: str, args: Sequence[str]) -> int:
    """Runs `path` as `__main__` with `sys.argv = [path, *args]` and its folder first on `sys.path`.

    Returns:
      The exit status Python would give: the script's `sys.exit()` code, 1 after an uncaught
      exception (its traceback printed), 128 + the signal's number after an interrupt (SIGINT's
      `KeyboardInterrupt`, or SIGTERM's and SIGHUP's under `stopping_signals()`). After anything
      but an interrupt, it first waits for the script's non-daemon threads, as Python does.
    """
    script = os.path.abspath(path)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    mp_main = sys.modules.get("__mp_main__")  # multiprocessing's alias of __main__, set when the script imports it
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(script))
    try:
        try:
            runpy.run_path(path, run_name="__main__")
            status = 0
        except SystemExit as done:
            status = exit_status(done.code)
        except KeyboardInterrupt as error:
            _print_traceback(error, script)
            return interrupt_status(error)
        except BaseException as error:  # the script's own failure: report it as Python would
            _print_traceback(error, script)
            status = 1
        try:
            _wait_for_threads()
        except KeyboardInterrupt as error:
            return interrupt_status(error)
        return status
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        _forget_script_module()
        if sys.modules.get("__mp_main__") is not mp_main:  # the script's module, as runpy leaves __main__
            if mp_main is None:
                sys.modules.pop("__mp_main__", None)
            else:
                sys.modules["__mp_main__"] = mp_main
        flush_script_output()


def _forget_script_module() -> None:
    """A module that did `import __main__` while the script ran (Python 3.13's `rlcompleter`, which absl's
    `pdb` imports) holds the script's module, which `runpy` made for the run, and with it every global of
    the script: it gets the `__main__` it would have got outside the run, so that the script's globals end
    with the script."""
    main = sys.modules.get("__main__")
    for module in list(sys.modules.values()):
        held = getattr(module, "__dict__", {}).get("__main__")
        if held is not main and getattr(held, "__name__", None) == "__main__" and type(held) is type(sys):
            setattr(module, "__main__", main)


def flush_script_output() -> None:
    """Flushes what the script wrote to `sys.stdout` and `sys.stderr` (and to the originals, if it
    replaced them). A stream the script closed is left alone; when standard output is a closed
    pipe, `sys.stdout` becomes `os.devnull` (what it held is lost) so that Python's own flush at
    exit does not fail, as Python's documentation on SIGPIPE recommends, without touching fd 1."""
    for stream in dict.fromkeys((sys.stdout, sys.__stdout__, sys.stderr, sys.__stderr__)):
        try:
            if stream is not None:
                stream.flush()
        except BrokenPipeError:
            if stream in (sys.stdout, sys.__stdout__):
                sys.stdout = open(os.devnull, "w", encoding="utf-8")
        except (OSError, ValueError):  # closed by the script, or failing: nothing to add to it
            pass


class Output:
    """The process's standard output as it was when this was made (a duplicate of fd 1), written
    whole and unbuffered; `broken` once a write failed (a closed pipe)."""

    def __init__(self) -> None:
        try:
            self._fd: Optional[int] = os.dup(sys.__stdout__.fileno() if sys.__stdout__ is not None else 1)
        except (OSError, ValueError):  # no standard output at all
            self._fd = None
        self.broken = self._fd is None

    def write(self, text: str) -> bool:
        """Writes `text`; False (and nothing more written later) when standard output is closed."""
        if self.broken or self._fd is None:
            return False
        data = text.encode(sys.__stdout__.encoding if sys.__stdout__ is not None else "utf-8", "backslashreplace")
        try:
            while data:
                data = data[os.write(self._fd, data):]
        except OSError:  # BrokenPipeError, or a terminal gone away
            self.broken = True
            if sys.stdout is sys.__stdout__:  # it shares the pipe: keep Python's flush at exit from failing on it
                sys.stdout = open(os.devnull, "w", encoding="utf-8")
            return False
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class _Then:
    """A module's loader that tells `_AfterImport` when the module starts and ends running."""

    def __init__(self, loader: Any, finder: "_AfterImport") -> None:
        self._loader, self._finder = loader, finder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._finder.running += 1
        try:
            self._loader.exec_module(module)
        finally:
            module.__loader__ = module.__spec__.loader = self._loader  # as if this wrapper had never been
            self._finder.ran()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds module `name`, and tfplace's own modules, as the other finders do, with loaders that call
    `then()` once `name` is imported and no tfplace module is half-run: a script's `tfplace.configure()`
    imports TensorFlow from inside `tfplace._tensorflow`, which `then()` may need whole."""

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self.name, self.then, self.running = name, then, 0

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name and not fullname.startswith("tfplace."):
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = cast(importlib.abc.Loader, _Then(spec.loader, self))  # a Loader by duck typing
                return spec
        return None

    def ran(self) -> None:
        """A module this finder found ended running (whole, or raising)."""
        self.running -= 1
        if self.running == 0 and self.name in sys.modules and self in sys.meta_path:
            sys.meta_path.remove(self)  # once
            try:
                self.then()
            except Exception as error:  # pylint: disable=broad-except
                _contained.failed(f"start after the program imported {self.name}", error)


@contextlib.contextmanager
def after_import(name: str, then: Callable[[], None]) -> Iterator[None]:
    """Inside the block, `then()` runs right after module `name` is first imported (at once if it already is),
    or, when a tfplace module imported it, right after that module ran.

    >>> ran = []
    >>> with after_import("json", lambda: ran.append("json")):
    ...     pass
    >>> ran
    ['json']
    """
    if name in sys.modules:
        then()
        yield
        return
    finder = _AfterImport(name, then)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
