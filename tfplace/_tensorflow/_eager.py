"""The eager context, op callbacks and the patches tfplace installs while a capture listens; failed eager
ops; who asked for a traced op's device. Part of `tfplace._tensorflow` (see its docstring)."""

from __future__ import annotations

import os
import sys
import threading
from types import FrameType
from typing import Any, Callable, Iterable, Optional

import tensorflow as tf
from tensorflow.python.client import session as _session_lib
from tensorflow.python.eager import context as _context
from tensorflow.python.eager import core as _core
from tensorflow.python.eager import execute as _execute
from tensorflow.python.eager.polymorphic_function import atomic_function as _atomic_function
from tensorflow.python.framework import constant_op as _constant_op
from tensorflow.python.framework import op_callbacks as _op_callbacks
from tensorflow.python.framework import op_def_registry as _op_def_registry
from tensorflow.python.framework import ops as _ops
from tensorflow.python.ops import resource_variable_ops as _resource_variable_ops
from tensorflow.python.ops import script_ops as _script_ops
from tensorflow.python.util import tf_stack as _tf_stack

from tfplace import _contained


# The eager context and op callbacks ------------------------------------------------------------


def device_name() -> Optional[str]:
    """The device the calling thread's `tf.device` scope asks for, None outside any."""
    return _context.context().device_name


def thread_data() -> Any:
    """The calling thread's eager state; its `device_name` is the thread's `tf.device` scope."""
    return _context.context()._thread_local_data  # pylint: disable=protected-access


def op_callbacks() -> list[Callable]:
    """The calling thread's op callbacks (the list itself: replica threads share their parent's)."""
    return _context.context().op_callbacks


def add_op_callback(callback: Callable) -> None:
    """Adds an op callback for the calling thread (TensorFlow then runs eager ops on its callback path)."""
    _op_callbacks.add_op_callback(callback)


def remove_op_callback(callback: Callable) -> None:
    """Removes the calling thread's op callback, leaving the eager execute path as it is."""
    _context.context().remove_op_callback(callback)


execute_with_callbacks = _execute.execute_with_callbacks
dtype_enum: Callable[[Any], int] = _ops.EagerTensor._datatype_enum  # pylint: disable=protected-access


def use_execute(replacement: Optional[Callable]) -> None:
    """Makes `replacement` the eager execute path of every thread; None restores TensorFlow's own:
    the callback path while any thread has op callbacks, else the fast path."""
    if replacement is None:
        replacement = execute_with_callbacks if op_callbacks() else _execute.quick_execute
    _execute.execute = replacement


class Patch:
    """An attribute that tfplace replaces while it listens, then puts back: `replaced` is TensorFlow's own,
    `original` calls it as the replacement calls through to it. The program never sees the replacement fail
    (`tfplace._contained.patched`): what it raises that TensorFlow's own did not is reported as tfplace's."""

    def __init__(self, owner: Any, name: str) -> None:
        self.owner, self.name = owner, name
        self.original: Any = None
        self.replaced: Any = None

    def install(self, replacement: Any) -> None:
        self.replaced = getattr(self.owner, self.name)
        where = f"patch of TensorFlow's {getattr(self.owner, '__name__', self.owner)}.{self.name}"
        run, self.original = _contained.patched(replacement, self.replaced, where)
        setattr(self.owner, self.name, run)

    def remove(self) -> None:
        setattr(self.owner, self.name, self.replaced)


# Where every eager op error becomes an exception (`ops.raise_from_not_ok_status`): failed records.
STATUS_TO_EXCEPTION = Patch(_core, "_status_to_exception")
# Every `tf.device` scope of a thread: the requested device of an eager op.
SET_DEVICE = Patch(_context.Context, "_set_device")
# A `tf.py_function` run on one of TensorFlow's threads.
PY_FUNCTION_CALL = Patch(_script_ops.FuncRegistry, "__call__")
# Every traced graph that becomes a function (tf.function, gradients, control flow bodies, tf.data).
FROM_FUNC_GRAPH = Patch(_atomic_function, "from_func_graph")
# The eager path of a function call made under a cancellation manager (a `ClusterCoordinator`'s closures):
# TensorFlow runs no op callback there.
EXECUTE_CANCELLABLE = Patch(_execute, "execute_with_cancellation")
# Every run of a `tf.compat.v1.Session` graph (`run`, `make_callable`) and every call of a callable made from
# options: a Session places its graph itself, where no op callback or graph collection reaches.
SESSION_RUN = Patch(_session_lib.BaseSession, "_call_tf_sessionrun")
SESSION_PARTIAL_RUN = Patch(_session_lib.BaseSession, "_call_tf_sessionprun")
# `Session.run` itself (its options and run metadata as protos) and every Session made: what a run placed.
SESSION_PUBLIC_RUN = Patch(_session_lib.BaseSession, "run")
SESSION_INIT = Patch(_session_lib.BaseSession, "__init__")
SESSION_CALLABLE = Patch(_session_lib.BaseSession._Callable, "__call__")  # pylint: disable=protected-access
# Every Python value made a tensor in Python (`tf.constant`, `tf.convert_to_tensor`, a variable's initial value):
# where its dtype is not one a Python number is made in directly, TensorFlow's C++ runs a `Cast` on the host that
# no op callback hears (`CAST_ON_CONVERSION`).
CONVERT_TO_EAGER = Patch(_constant_op, "convert_to_eager_tensor")
CAST_ON_CONVERSION = frozenset(tf.as_dtype(name).as_datatype_enum
                               for name in ("int8", "int16", "uint8", "uint16", "uint32", "bfloat16", "complex64"))
_INT32 = (-(2 ** 31), 2 ** 31 - 1)


def conversion_cast(value: Any, dtype: Any) -> Optional[tuple]:
    """The attributes (`SrcT`, `DstT`, `Truncate`) of the `Cast` TensorFlow 2.21 runs on the host when it makes
    `value`, a Python number or (nested) list of them, a tensor of `dtype`; None where it runs none (a NumPy
    array, a tensor, a dtype Python numbers are made in directly)."""
    try:
        target = tf.as_dtype(dtype).as_datatype_enum
    except TypeError:
        return None
    if target not in CAST_ON_CONVERSION:
        return None
    leaf = value
    while isinstance(leaf, (list, tuple)) and leaf:
        leaf = leaf[0]
    if isinstance(leaf, (list, tuple)):
        source = tf.float32  # an empty list
    elif isinstance(leaf, bool) or not isinstance(leaf, (int, float, complex)):
        return None
    elif isinstance(leaf, int):
        source = tf.int32 if _INT32[0] <= leaf <= _INT32[1] else tf.int64
    else:
        source = tf.float32 if isinstance(leaf, float) else tf.complex128
    return ("SrcT", source.as_datatype_enum, "DstT", target, "Truncate", False)


def host_cpu() -> str:
    """The full name of this task's host CPU, where conversions run."""
    return _context.context().host_address_space() + "/device:CPU:0"


# Every read of an eager tensor's value in Python (`.numpy()`, `float`, `int`, `bool`, `print`, `np.asarray`
# all go through it): a step that waits for a device's result.
HOST_READ = Patch(_ops._EagerTensorBase, "_numpy")  # pylint: disable=protected-access


def callable_session(runner: Any) -> Any:
    """The `tf.compat.v1.Session` a callable made from options (`SESSION_CALLABLE`'s `self`) runs in."""
    return runner._session  # pylint: disable=protected-access

# The eager context's start (the runtime's): graph collection, which needs it, starts right after it.
ENSURE_INITIALIZED = Patch(_context.Context, "ensure_initialized")
# Every Python thread started while a capture listens (a process-wide patch): TensorFlow's own
# threads inherit the capture's callback, and with `all_threads` every thread does.
THREAD_START = Patch(threading.Thread, "start")


class _VariableAttribute:
    """An attribute of TensorFlow's resource variables (`_dtype`, `_handle`) while tfplace listens: a data
    descriptor over the instance's own value that sees who reads it.

    TensorFlow's eager fast path (`TFE_Py_FastPathExecute`, a variable handed to an op as an argument:
    `v * v`) runs a `ReadVariableOp` in C++, which no op callback sees. Its `ReadVariableOp` reads the
    variable's `_dtype`, then its `_handle`, right under the generated op wrapper that called it (the
    checks before it read `_handle` alone), where no Python code of TensorFlow reads either: that pair,
    seen from a `gen_*_ops.py` frame, is one read, told to `on_read(variable, handle)`."""

    def __init__(self, name: str, on_read: Callable[[Any, Any], None], state: threading.local) -> None:
        self.name, self.on_read, self.state = name, on_read, state
        self.wrappers: dict[int, bool] = {}  # id of a code object -> it is a generated op wrapper (gen_*_ops.py)
        self.pinned: list[Any] = []  # those code objects, kept alive: no id is reused (hashing a code is slow)

    def __get__(self, variable: Any, owner: Any = None) -> Any:
        if variable is None:
            return self
        try:
            value = variable.__dict__[self.name]
        except KeyError:
            raise AttributeError(f"{type(variable).__name__!r} object has no attribute {self.name!r}") from None
        code = sys._getframe(1).f_code  # pylint: disable=protected-access
        wrapper = self.wrappers.get(id(code))
        if wrapper is None:
            self.pinned.append(code)
            wrapper = self.wrappers[id(code)] = _GENERATED in code.co_filename
        if wrapper:
            if self.name == "_dtype":
                self.state.reading = variable
            elif getattr(self.state, "reading", None) is variable:
                self.state.reading = None
                try:
                    self.on_read(variable, value)
                except _contained.ON_PURPOSE:  # a guard's verdict on the program's read
                    raise
                except Exception as error:  # pylint: disable=broad-except
                    _contained.failed("watch of variable reads", error)
        return value

    def __set__(self, variable: Any, value: Any) -> None:
        variable.__dict__[self.name] = value

    def __delete__(self, variable: Any) -> None:
        del variable.__dict__[self.name]


_GENERATED = f"{os.sep}ops{os.sep}gen_"


def watch_variable_reads(on_read: Optional[Callable[[Any, Any], None]]) -> None:
    """Calls `on_read(variable, handle)` whenever TensorFlow's eager fast path reads a resource variable
    in C++ (see `_VariableAttribute`); None stops it."""
    owner = _resource_variable_ops.BaseResourceVariable
    state = threading.local()
    for name in ("_dtype", "_handle"):
        if on_read is None:
            if isinstance(owner.__dict__.get(name), _VariableAttribute):
                delattr(owner, name)
        else:
            setattr(owner, name, _VariableAttribute(name, on_read, state))


def start_thread(thread: threading.Thread,
                 around: Optional[Callable[[Callable[[], None]], Callable[[], None]]]) -> None:
    """Starts `thread` (through the original `Thread.start`), its `run` wrapped by `around` when given."""
    if around is not None:
        thread.run = around(thread.run)  # type: ignore[method-assign]
    THREAD_START.original(thread)


def scope_step(depth: int) -> tuple[str, Any]:
    """What the `Context._set_device` call `depth` frames out (0: the caller's) does: "enter" from a
    device scope's `__enter__`, "exit" from its `__exit__`, else ""; and the frame outside that call
    (the patch's own frame, `tfplace._contained`, passed over)."""
    frame = sys._getframe(depth + 1)  # pylint: disable=protected-access
    if frame.f_code is _contained.RUN_CODE and frame.f_back is not None:
        frame = frame.f_back
    return {"__enter__": "enter", "__exit__": "exit"}.get(frame.f_code.co_name, ""), frame.f_back


# Failed eager ops ------------------------------------------------------------------------------
# An eager op that raises passes through several of TensorFlow's frames; what it was called with is
# read from the arguments of its generated Python function (`gen_math_ops.mat_mul(a, b, ...)`).

_RECORDED = "_tfplace_recorded"  # set on an error once a failed record was made for it


def recorded(error: BaseException) -> bool:
    """True when a failed record was already made for `error` (`mark_recorded`)."""
    return getattr(error, _RECORDED, False)


def mark_recorded(error: BaseException) -> None:
    """Notes on `error` that its failed record is made (errors without attributes are left alone)."""
    try:
        setattr(error, _RECORDED, True)
    except AttributeError:
        pass


def _frames_above(depth: int, count: int = 6) -> Iterable[Any]:
    """`count` frames from `depth` out (0: the caller's)."""
    frame: Optional[FrameType] = sys._getframe(depth + 1)  # pylint: disable=protected-access
    for _ in range(count):
        if frame is None:
            return
        yield frame
        frame = frame.f_back


def failed_op_dtypes(op: str, depth: int) -> tuple[tuple[str, str], ...]:
    """The type attributes of a failed eager op `op`, from the first of a few frames from `depth` out
    (0: the caller's) that holds all its inputs (its generated Python function)."""
    op_definition = _op_def_registry.get(op)
    names = [a.name for a in op_definition.input_arg] if op_definition is not None else []
    for frame in _frames_above(depth + 1) if names else ():
        values = frame.f_locals
        if all(name in values for name in names):
            found: dict[str, str] = {}
            for arg in op_definition.input_arg:
                value = values[arg.name]
                items = value if isinstance(value, (list, tuple)) else [value]
                kinds = [item.dtype.name for item in items if hasattr(getattr(item, "dtype", None), "name")]
                if arg.type_attr and kinds:
                    found.setdefault(arg.type_attr, kinds[0])
                elif arg.type_list_attr and len(kinds) == len(items):
                    found.setdefault(arg.type_list_attr, ",".join(kinds))
            for attr in op_definition.attr:  # type attributes given as arguments (Cast's DstT, Shape's out_type)
                value = values.get(attr.name)
                if attr.type == "type" and attr.name not in found and hasattr(value, "name"):
                    found[attr.name] = value.name
            return tuple(sorted(found.items()))
    return ()


def failed_op_argument(name: str, depth: int) -> Any:
    """The argument `name` of a failed eager op, from its generated Python function's frame (one of
    a few from `depth` out, 0: the caller's), None when not found."""
    for frame in _frames_above(depth + 1):
        if name in frame.f_locals:
            return frame.f_locals[name]
    return None


def device_scopes(op: Any) -> list[tuple[str, int]]:
    """Where the `tf.device` scopes in force when graph op `op` was made were entered, as
    (filename, lineno), innermost last (`Operation._device_assignments`)."""
    return [(scope.filename, scope.lineno) for scope in op._device_assignments]  # pylint: disable=protected-access


def traced_stack() -> list[tuple[str, int]]:
    """While a function is traced, the Python stack as (filename, lineno), innermost first, with
    autograph's generated code mapped back to the user's source (as `Operation.traceback` does);
    empty when executing eagerly."""
    if tf.executing_eagerly():
        return []
    return [(frame.filename, frame.lineno) for frame in reversed(list(_tf_stack.extract_stack()))]


def locate_device_scope(filename: str, lineno: int) -> None:
    """While a function is traced, says that the innermost `tf.device` scope of its graph was entered
    at `filename:lineno` (TensorFlow notes its own `tf.device` wrapper there): what the graph's ops
    keep in `_device_assignments`, and TensorFlow's own device error messages show."""
    scopes = _ops.get_default_graph()._device_function_stack.peek_traceable_objs()  # pylint: disable=protected-access
    innermost = next(iter(scopes), None)
    if innermost is not None:
        innermost.filename, innermost.lineno = filename, lineno


def strategy_name() -> str:
    """The class name of the `tf.distribute` strategy in scope ("" for the default strategy)."""
    return type(tf.distribute.get_strategy()).__name__ if tf.distribute.has_strategy() else ""
