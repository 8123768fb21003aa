"""The capture session: the state that open captures and guards share, owned by one object.

The first holder (`hold()`: a capture, a guard, a listening op callback) makes the `Session`; the
last one out drops it, and every piece of state goes with it: the op callbacks and patches
(`tfplace.placement.taking._hooks`), graph collection (`_graphs`), the function-tracing watchers
(`_function_sources`), the caches of op descriptions and of code objects' verdicts (`_origins`,
`_sources`). Nothing of a capture stays behind in a module. Its thread-local part is explicit:
`session.thread` holds, per thread, the hook it listens with, the `tf.device` scope it is in and who
entered it, and the transfer guards it is inside.

What TensorFlow itself did in this process outlives the sessions, as TensorFlow's runtime does: the
functions it placed and what each call runs (`_calls`), the caches its datasets filled and the
iterators filling them (`_datasets`), the lines of the functions it traced (`_function_sources`),
the lines of tensors still alive (`_memory`), the warnings already given (`_kernel_table`). That is
the `Runtime` (`runtime()`), bounded where it could grow: a later capture or guard reads it.

Example:
    >>> from tfplace.placement.session import _session
    >>> with _session.hold() as session:
    ...     session is _session.current()
    True
    >>> _session.current() is None
    True
"""

from __future__ import annotations

import collections
import contextlib
import threading
import weakref
from typing import Any, Iterator, Optional

__all__ = ["Session", "Runtime", "hold", "current", "runtime", "Parameters"]

Parameters = tuple[tuple[str, str], ...]  # (name, what a trace held it to: a TensorSpec, a `Literal[...]`)


class Session:
    """What the open captures and guards share while any is open (see the module's docstring)."""

    def __init__(self) -> None:
        self.thread = threading.local()  # per thread: `hook` (its op callback), `transfer` (its transfer guard),
        # `session_run` (a tf.compat.v1 Session.run records itself)
        # Per thread, its `tf.device` scope mirrored while the patches are in: `scope`, the pair (its name, who
        # entered it), and the requesters of the scopes it is inside (`scopes`); new when the patches go in.
        self.asked = threading.local()
        # The op callbacks (`_hooks`): the hooks of every thread, guarded by `lock`, and each thread's
        # outermost function call in flight (the graphs TensorFlow places for it wait for that thread).
        self.lock = threading.Lock()
        self.hooks: list[Any] = []
        self.in_flight: dict[int, str] = {}
        self.dtensor_host_runs = 0  # ops DTensor's device ran eagerly on the host, as last counted (`_dtensor`)
        # One description per (op, device, asked for, attributes), per record and line, per record,
        # origin and requester (bounded: made again when needed).
        self.described: dict[tuple, Any] = {}
        self.sourced: dict[tuple, Any] = {}
        self.noted: dict[tuple, Any] = {}
        # Graph collection (`_graphs`): the logs and guards collecting, with their sources and thread,
        # graphs another thread's call placed, graphs as written whose placed graph another thread's
        # collection holds (TensorFlow merged them), functions whose transfers are lost that way, and per
        # log (by id), the functions whose first call in its thread found no graph while other threads were
        # calling (another thread's collection may hold it, or a later one of this thread's).
        self.graph_lock = threading.RLock()
        self.logs: list[tuple[Any, bool, int]] = []
        self.pending: list[Any] = []
        self.unplaced: list[Any] = []
        self.unplaced_for = 0  # collections read since
        self.merged: set[str] = set()
        self.awaited: dict[int, set[str]] = {}
        self.collected: set[tuple] = set()  # the function kernels collected: their calls place nothing more
        self.collecting = False
        self.waiting = False
        self.awaiting_runtime = False  # `Context.ensure_initialized` patched to start collection (`_graphs`)
        # Function tracing (`_function_sources`): how many watch it, and how many want every line.
        self.watchers = 0
        self.line_watchers = 0
        # Graphs being traced -> op name -> what the code that made it says ("" for nothing), read from the
        # live stack by the op callback as each op is made (`_callback`, `_function_sources`).
        self.made_by: "weakref.WeakKeyDictionary[Any, dict[str, str]]" = weakref.WeakKeyDictionary()
        # ... and, while a capture wants every line, the user's line (None: read from the op's saved stack).
        self.lines_made: "weakref.WeakKeyDictionary[Any, dict[str, Optional[str]]]" = weakref.WeakKeyDictionary()
        # Verdicts of files and code objects (`_origins`, `_sources`). Code objects are keyed by their `id`
        # (hashing one hashes its bytecode and constants), each kept alive in `pinned` (`pin()`) while the
        # session lives, so that no id is reused.
        self.origin_of_file: dict[str, Any] = {}
        self.origin_shortcuts: dict[int, tuple] = {}
        self.shown_files: dict[str, str] = {}
        self.user_depths: dict[int, Any] = {}
        self.pinned: dict[int, Any] = {}


class Runtime:
    """What TensorFlow did in this process, which later captures and guards read (see the module's docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: dict[tuple[str, str], dict[tuple[str, ...], Any]] = {}  # (function, device) -> what a call runs
        self.dtensor: dict[tuple, Any] = {}  # a call on DTensor's device (op, attributes, layouts) -> what it runs
        self.filled: "weakref.WeakSet[Any]" = weakref.WeakSet()  # caches a dataset filled
        self.iterators: dict[int, Any] = {}  # iterators that may fill caches
        self.cardinalities: dict[int, tuple[Any, int]] = {}  # dataset variants whose size an op said
        self.lines: dict[str, Any] = {}  # function -> its nodes' notes (lines, origins, requesters)
        self.by_nodes: dict[tuple[str, ...], list[str]] = {}  # node names -> functions with them
        self.parameters: dict[str, Parameters] = {}  # function -> what its trace held each parameter to
        self.made: dict[int, str] = {}  # id of a tensor alive -> the line that made it
        self.warned: set[str] = set()  # warnings given once per process
        # `_collected.Later`s waiting (weak references), oldest first
        self.unmade: collections.deque = collections.deque()
        # a tf.compat.v1 Session -> what it placed and ran
        self.sessions: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
        self.listening = 0  # how many times the hooks' patches went in: a Session may run unseen between two
        self.iterating: set[str] = set()  # functions whose calls iterate a dataset they are given


_lock = threading.Lock()
_holders = 0
_current: Optional[Session] = None
_RUNTIME = Runtime()


def current() -> Optional[Session]:
    """The session, while a capture or guard holds it; else None."""
    return _current


def pin(code: Any) -> int:
    """The id of a code object the session's caches key on, the object kept alive while the session is."""
    session = _current
    key = id(code)
    if session is not None:
        session.pinned[key] = code  # (the same code pinned again takes no more room)
    return key


def runtime() -> Runtime:
    """What TensorFlow did in this process (it outlives sessions)."""
    return _RUNTIME


@contextlib.contextmanager
def hold() -> Iterator[Session]:
    """The session while the block runs: the first holder makes it, the last one drops it."""
    global _current, _holders
    with _lock:
        if _current is None:
            _current = Session()
        _holders += 1
        session = _current
    try:
        yield session
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                _current = None
