"""Everything tfplace reads from and writes to TensorFlow's runtime, public or internal, in one place.

Every other module goes through this one for `tf.config`, the eager context, op
callbacks, graph collection, the kernel registry, op definitions and the
`tf.data` internals; BUILD.md ("TensorFlow internals") lists each internal with
what it is for, and `tests/test_internals.py` checks that TensorFlow still has
every one (and that no other module reaches for them). Everything that decides
*what* to apply lives in pure modules (`tfplace.config._settings`,
`tfplace.config._gpu_plan`). Nothing here starts the runtime: before it starts,
the logical devices are predicted from the pending configuration.

Example:
    >>> from tfplace import _tensorflow
    >>> _tensorflow.logical_device_names()[0]
    '/device:CPU:0'
    >>> [a.name for a in _tensorflow.op_def("MatMul").input_arg]
    ['a', 'b']
"""

from __future__ import annotations

import functools
import gc
import sys
import threading
from typing import Any, Callable, Iterable, Mapping, Optional, Protocol

import tensorflow as tf
from tensorflow.python.eager import context as _context
from tensorflow.python.eager import core as _core
from tensorflow.python.eager import execute as _execute
from tensorflow.python.eager.polymorphic_function import atomic_function as _atomic_function
from tensorflow.python.framework import kernels as _kernels
from tensorflow.python.framework import op_callbacks as _op_callbacks
from tensorflow.python.framework import op_def_registry as _op_def_registry
from tensorflow.python.framework import ops as _ops
from tensorflow.python.ops import script_ops as _script_ops
from tensorflow.python.ops import summary_ops_v2 as _summary_ops_v2
from tensorflow.python.util import _pywrap_util_port
from tensorflow.python.util import tf_stack as _tf_stack

__all__ = [
    # runtime state and configuration (tf.config)
    "runtime_started", "gpu_count", "physical_device_names", "physical_devices", "logical_device_names",
    "fixed_state", "settings_in_force", "GpuSettings", "apply_fixed", "apply_runtime", "build",
    # the eager context and op callbacks
    "device_name", "thread_data", "op_callbacks", "add_op_callback", "remove_op_callback", "execute_with_callbacks",
    "use_execute", "Patch", "STATUS_TO_EXCEPTION", "SET_DEVICE", "PY_FUNCTION_CALL", "FROM_FUNC_GRAPH",
    "dtype_enum", "device_scopes", "traced_stack", "locate_device_scope", "strategy_name",
    # graph collection
    "enable_graph_collection", "disable_graph_collection", "export_run_metadata", "function_def",
    "tensorboard_tracing", "static_sizes", "dtype_size", "shape_tuple",
    # op definitions and the kernel registry
    "op_def", "registered_kernels",
    # memory
    "reset_allocator_peak", "allocator_figures", "live_tensor_objects", "variable_creator_scope", "OutOfMemory",
    # the profiler
    "ProfilerBusy", "ProfilerError", "profiler_start", "profiler_stop", "read_xspaces",
    # tf.data
    "variant_tensor_of", "dataset_functions", "dataset_inputs", "is_map_dataset", "is_generator_dataset",
    "is_cache_dataset", "reads_inputs_to_end", "rewrites_input_graph", "is_parallel_interleave",
    # Python's own machinery, where tfplace reaches into TensorFlow's frames, threads and objects
    "THREAD_START", "start_thread", "scope_step", "recorded", "mark_recorded", "failed_op_dtypes", "failed_op_argument", "dataset_of_variant",
]


# Runtime state and configuration ----------------------------------------------------------------


def runtime_started() -> bool:
    """True once TensorFlow's eager context is initialized (devices are then fixed)."""
    return _context.context()._context_handle is not None  # pylint: disable=protected-access


def gpu_count() -> int:
    """How many physical GPUs TensorFlow sees (starts nothing)."""
    return len(tf.config.list_physical_devices("GPU"))


def physical_device_names() -> tuple[str, ...]:
    """Names of every physical device, e.g. `/physical_device:CPU:0` (starts nothing)."""
    return tuple(d.name for d in tf.config.list_physical_devices())


def physical_devices() -> list[dict[str, Any]]:
    """Each physical device: `name`, `type`, `visible`, and for a GPU TensorFlow's `details`
    (`device_name`, `compute_capability`). Starts nothing and allocates no GPU memory."""
    visible = {d.name for d in tf.config.get_visible_devices()}
    return [{"name": d.name, "type": d.device_type, "visible": d.name in visible,
             **({"details": tf.config.experimental.get_device_details(d)} if d.device_type == "GPU" else {})}
            for d in tf.config.list_physical_devices()]


@functools.lru_cache(maxsize=1)
def _started_logical_names() -> tuple[str, ...]:
    return tuple(d.name for d in tf.config.list_logical_devices())


def logical_device_names() -> tuple[str, ...]:
    """Names of the logical devices, e.g. `/device:CPU:1`.

    Read from the runtime once it has started (and cached: it cannot change);
    before that, predicted from the visible physical devices and their pending
    logical configurations, without starting the runtime.
    """
    if runtime_started():
        return _started_logical_names()
    names: list[str] = []
    counters: dict[str, int] = {}
    for device in tf.config.get_visible_devices():
        for _ in tf.config.get_logical_device_configuration(device) or [None]:
            index = counters.get(device.device_type, 0)
            counters[device.device_type] = index + 1
            names.append(f"/device:{device.device_type}:{index}")
    return tuple(names)


def fixed_state() -> dict[str, Any]:
    """The state fixed at runtime start, as it stands now.

    Returns:
      A dict with `visible_gpus` (indices of the visible physical GPUs),
      `memory_growth` (None without a visible GPU, else the value shared by the
      visible GPUs), `memory_limits` (per visible GPU, the MiB limit of each
      logical device), `logical_cpus` and `log_placement`.
    """
    gpus = tf.config.list_physical_devices("GPU")
    shown = {d.name for d in tf.config.get_visible_devices("GPU")}
    visible = tuple(i for i, d in enumerate(gpus) if d.name in shown)
    growth = {bool(tf.config.experimental.get_memory_growth(gpus[i])) for i in visible}
    limits = tuple(
        tuple(int(c.memory_limit or 0) for c in tf.config.get_logical_device_configuration(gpus[i]) or ())
        for i in visible
    )
    cpu = tf.config.list_physical_devices("CPU")[0]
    return {
        "visible_gpus": visible,
        "memory_growth": growth.pop() if len(growth) == 1 else None,
        "memory_limits": limits,
        "logical_cpus": len(tf.config.get_logical_device_configuration(cpu) or [None]),
        "log_placement": bool(_context.context().log_device_placement),
    }


def settings_in_force() -> dict[str, Any]:
    """The `configure()` settings TensorFlow can report, by setting name (memory caps it cannot)."""
    state = fixed_state()
    gpu_counts = {len(limits) for limits in state["memory_limits"] if limits}
    return {
        "soft_placement": bool(tf.config.get_soft_device_placement()),
        "device_policy": tf.config.experimental.get_device_policy(),
        **{name: state[name] for name in ("log_placement", "memory_growth", "visible_gpus", "logical_cpus")},
        **({"logical_gpus": gpu_counts.pop()} if len(gpu_counts) == 1 else {}),
    }


class GpuSettings(Protocol):
    """What `apply_fixed` reads of a GPU plan (`tfplace.config._gpu_plan.GpuPlan`)."""

    @property
    def visible(self) -> tuple[int, ...]: ...

    @property
    def memory_growth(self) -> Optional[bool]: ...

    @property
    def memory_limits(self) -> tuple[tuple[int, ...], ...]: ...


def apply_fixed(plan: Optional[GpuSettings], value: Mapping[str, Any], config: Any = tf.config) -> None:
    """Applies the settings fixed at runtime start; call only before it.

    Args:
      plan: the GPU plan, or None to leave the GPUs alone.
      value: the chosen settings by name; `logical_cpus` and `log_placement` are read
        (the GPU settings arrive through `plan`), an absent one is left as is.
      config: the `tf.config` module (replaceable to record the calls in tests).
    """
    if value.get("log_placement") is not None:
        tf.debugging.set_log_device_placement(value["log_placement"])
    if plan is not None:
        gpus = config.list_physical_devices("GPU")
        if gpus:
            config.set_visible_devices([gpus[i] for i in plan.visible], "GPU")
        for index, limits in zip(plan.visible, plan.memory_limits):
            if plan.memory_growth is not None:
                config.experimental.set_memory_growth(gpus[index], plan.memory_growth)
            if limits:
                config.set_logical_device_configuration(
                    gpus[index], [config.LogicalDeviceConfiguration(memory_limit=m) for m in limits])
    if value.get("logical_cpus") is not None:
        cpu = config.list_physical_devices("CPU")[0]
        config.set_logical_device_configuration(
            cpu, [config.LogicalDeviceConfiguration() for _ in range(value["logical_cpus"])])


def apply_runtime(value: Mapping[str, Any]) -> None:
    """Applies the settings TensorFlow lets change at any time (`soft_placement`, `device_policy`);
    an absent one is left as is."""
    if value.get("soft_placement") is not None:
        tf.config.set_soft_device_placement(value["soft_placement"])
    if value.get("device_policy") is not None:
        tf.config.experimental.set_device_policy(value["device_policy"])


def build() -> dict[str, Any]:
    """TensorFlow's version and build: `tensorflow`, `is_cuda_build`, `cuda_version`, `cudnn_version`,
    and `onednn` (whether oneDNN is on, renaming kernels such as `_MklMatMul`)."""
    info = tf.sysconfig.get_build_info()
    return {"tensorflow": tf.__version__, "is_cuda_build": bool(info.get("is_cuda_build")),
            "cuda_version": info.get("cuda_version"), "cudnn_version": info.get("cudnn_version"),
            "onednn": bool(_pywrap_util_port.IsMklEnabled())}


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
    """An attribute that tfplace replaces while it listens, then puts back; `original` is what it
    replaced (what the replacement calls through to)."""

    def __init__(self, owner: Any, name: str) -> None:
        self.owner, self.name = owner, name
        self.original: Any = None

    def install(self, replacement: Any) -> None:
        self.original = getattr(self.owner, self.name)
        setattr(self.owner, self.name, replacement)

    def remove(self) -> None:
        setattr(self.owner, self.name, self.original)


# Where every eager op error becomes an exception (`ops.raise_from_not_ok_status`): failed records.
STATUS_TO_EXCEPTION = Patch(_core, "_status_to_exception")
# Every `tf.device` scope of a thread: the requested device of an eager op.
SET_DEVICE = Patch(_context.Context, "_set_device")
# A `tf.py_function` run on one of TensorFlow's threads.
PY_FUNCTION_CALL = Patch(_script_ops.FuncRegistry, "__call__")
# Every traced graph that becomes a function (tf.function, gradients, control flow bodies, tf.data).
FROM_FUNC_GRAPH = Patch(_atomic_function, "from_func_graph")
# Every Python thread started while a capture listens (a process-wide patch): TensorFlow's own
# threads inherit the capture's callback, and with `all_threads` every thread does.
THREAD_START = Patch(threading.Thread, "start")


def start_thread(thread: threading.Thread, around: Optional[Callable[[Callable[[], None]], Callable[[], None]]]) -> None:
    """Starts `thread` (through the original `Thread.start`), its `run` wrapped by `around` when given."""
    if around is not None:
        thread.run = around(thread.run)  # type: ignore[method-assign]
    THREAD_START.original(thread)


def scope_step(depth: int) -> tuple[str, Any]:
    """What the `Context._set_device` call `depth` frames out (0: the caller's) does: "enter" from a
    device scope's `__enter__`, "exit" from its `__exit__`, else ""; and the frame outside that call."""
    frame = sys._getframe(depth + 1)  # pylint: disable=protected-access
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
    frame = sys._getframe(depth + 1)  # pylint: disable=protected-access
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


# Graph collection ------------------------------------------------------------------------------


def enable_graph_collection() -> None:
    """Starts keeping each function TensorFlow places: its graph as written, after placement and Grappler."""
    _context.context().enable_graph_collection()


def disable_graph_collection() -> None:
    _context.context().disable_graph_collection()


def export_run_metadata() -> Any:
    """The functions collected since the last call (`RunMetadata.function_graphs`); empties the collection."""
    return _context.context().export_run_metadata()


def function_def(name: str) -> Any:
    """The `FunctionDef` registered in the eager context under `name`; raises when there is none."""
    return _context.context().get_function_def(name)


def tensorboard_tracing() -> bool:
    """True while `tf.summary.trace_on(graph=True)` collects function graphs for TensorBoard."""
    trace = getattr(_summary_ops_v2, "_current_trace_context", None)
    return bool(trace and trace.graph and not trace.profiler)


def static_sizes(graph: Any, tensors: Iterable[str]) -> dict[str, Optional[int]]:
    """Elements of each tensor (e.g. "MatMul:0") of a placed `GraphDef`, from TensorFlow's shape
    inference (importing the graph runs it); None where the shape is not fully known or the graph
    cannot be imported (a node whose op this process lacks)."""
    wanted = list(tensors)
    found: dict[str, Optional[int]] = dict.fromkeys(wanted)
    imported = tf.Graph()
    try:
        with imported.as_default():
            tf.graph_util.import_graph_def(graph, name="")
    except Exception:  # pylint: disable=broad-except  # an op unknown here, a name the importer refuses
        return found
    for tensor in wanted:
        try:
            found[tensor] = imported.get_tensor_by_name(tensor).shape.num_elements()
        except (KeyError, ValueError):
            pass
    return found


@functools.lru_cache(maxsize=64)
def dtype_size(name: str) -> Optional[int]:
    """Bytes per element of dtype `name` (e.g. "float32" -> 4), None for strings, variants, resources."""
    try:
        dtype = tf.dtypes.as_dtype(name)
    except TypeError:
        return None
    if dtype in (tf.string, tf.variant, tf.resource):
        return None
    return dtype.size


def shape_tuple(tensor: Any) -> Optional[tuple]:
    """An eager tensor's dimensions without building a `TensorShape` (a fifth of the cost), None for
    an unknown rank; any other value's from its `shape`."""
    if isinstance(tensor, _ops.EagerTensor):
        return tensor._shape_tuple()  # pylint: disable=protected-access
    shape = tensor.shape
    return tuple(shape.as_list()) if shape.rank is not None else None


# Op definitions and the kernel registry --------------------------------------------------------


def op_def(op: str) -> Any:
    """The `OpDef` of op type `op`, None for anything else (a kernel variant, a function name)."""
    return _op_def_registry.get(op)


def registered_kernels(op: str) -> Iterable[Any]:
    """The `KernelDef`s registered for `op` in this build: device type, dtype constraints, host-memory args."""
    return _kernels.get_registered_kernels_for_op(op).kernel


# tf.data ---------------------------------------------------------------------------------------

_MAP_DATASETS = frozenset({"_MapDataset", "_ParallelMapDataset"})  # the Python classes of map()


def variant_tensor_of(dataset_dict: Mapping[str, Any]) -> Any:
    """The variant tensor a dataset's attribute dictionary holds (None when it has none yet)."""
    return dataset_dict.get("_variant_tensor_attr")


_STACK_DEPTH = 12


def dataset_of_variant(variant: Any, depth: int) -> Optional[tf.data.Dataset]:
    """The Python dataset whose variant tensor is `variant`: one in the locals of the frames from
    `depth` out (0: the caller's; where `iter(dataset)` keeps it), else one of the objects referring
    to the tensor (Python's garbage collector); None when none holds it."""
    frame = sys._getframe(depth + 1)  # pylint: disable=protected-access
    for _ in range(_STACK_DEPTH):
        if frame is None:
            break
        for value in frame.f_locals.values():
            if isinstance(value, tf.data.Dataset) and variant_tensor_of(value.__dict__) is variant:
                return value
        frame = frame.f_back
    for referrer in gc.get_referrers(variant):
        if isinstance(referrer, tf.data.Dataset):
            return referrer
        if isinstance(referrer, dict) and variant_tensor_of(referrer) is variant:
            for owner in gc.get_referrers(referrer):
                if isinstance(owner, tf.data.Dataset) and owner.__dict__ is referrer:
                    return owner
    return None


def dataset_functions(dataset: tf.data.Dataset) -> list[Any]:
    """The functions of a dataset itself: its `map`/`filter`/... functions, and those it keeps as
    attributes (a `MultiDeviceIterator`'s per-device generators, whose init and finalize functions
    an iterator instantiates when it is made; their next function runs through the source device's
    iterator and is never placed with them)."""
    functions = [wrapper.function for wrapper in dataset._functions()]  # pylint: disable=protected-access
    return functions + [value for key, value in vars(dataset).items()
                        if isinstance(value, tf.types.experimental.ConcreteFunction) and key != "_next_func"]


def dataset_inputs(dataset: tf.data.Dataset) -> list[tf.data.Dataset]:
    """The datasets a dataset is made of: those it reads from, and those it keeps as attributes
    (`ragged_batch` keeps the `map` that encodes its elements, whose variant tensor is its own)."""
    found = {id(d): d for d in dataset._inputs()}  # pylint: disable=protected-access
    found.update((id(value), value) for value in vars(dataset).values() if isinstance(value, tf.data.Dataset))
    return list(found.values())


def is_map_dataset(dataset: tf.data.Dataset) -> bool:
    """True for the dataset `map()` makes."""
    return type(dataset).__name__ in _MAP_DATASETS


def is_cache_dataset(dataset: tf.data.Dataset) -> bool:
    """True for the dataset `cache()` makes (in memory or in a file)."""
    return type(dataset).__name__ == "CacheDataset"


# Datasets that read their input(s) to the end when they are read to the end (what a `cache()`
# below them needs to fill); `take`, `take_while`, `zip` and `sample_from_datasets` may stop early.
_READ_WHOLE = frozenset({
    "_MapDataset", "_ParallelMapDataset", "_BatchDataset", "_ParallelBatchDataset", "_PaddedBatchDataset",
    "_PrefetchDataset", "_ShuffleDataset", "CacheDataset", "_OptionsDataset", "_FilterDataset", "_UnbatchDataset",
    "_RepeatDataset", "_ShardDataset", "_SkipDataset", "_ConcatenateDataset", "_FlatMapDataset",
    "_InterleaveDataset", "_ParallelInterleaveDataset", "_ScanDataset", "_WindowDataset", "_RebatchDataset",
    "_AutoShardDataset", "_IgnoreErrorsDataset", "_UniqueDataset", "_AssertCardinalityDataset",
    "_GroupByWindowDataset"})


def reads_inputs_to_end(dataset: tf.data.Dataset) -> bool:
    """True for a dataset that, read to its end, has read its inputs to theirs (`map`, `batch`,
    `prefetch`, ...); False for `take`, `zip` and any dataset not known to."""
    return type(dataset).__name__ in _READ_WHOLE


def is_parallel_interleave(dataset: tf.data.Dataset) -> bool:
    """True for the dataset `interleave(..., num_parallel_calls=...)` makes."""
    return type(dataset).__name__ == "_ParallelInterleaveDataset"


def rewrites_input_graph(dataset: tf.data.Dataset) -> bool:
    """True for a dataset whose op rewrites its input's graph when it is made (`AutoShardDataset`,
    which `experimental_distribute_dataset` adds), leaving its own `FakeSink`s in every function."""
    return type(dataset).__name__ == "_AutoShardDataset"


def is_generator_dataset(dataset: tf.data.Dataset) -> bool:
    """True for a dataset made by a GeneratorDataset op (`from_generator`'s, a MultiDeviceIterator's
    per-device ones), which TensorFlow cannot serialize."""
    return all(hasattr(dataset, name) for name in ("_init_func", "_next_func", "_finalize_func"))


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


# Memory ----------------------------------------------------------------------------------------


# What TensorFlow raises when a device's allocator cannot satisfy an allocation.
OutOfMemory = tf.errors.ResourceExhaustedError
# Runs a function around every variable created in the block (public API).
variable_creator_scope = tf.variable_creator_scope


def reset_allocator_peak(device: str) -> None:
    """Resets the peak of `device`'s allocator (GPUs; devices whose allocator keeps no statistics are left alone)."""
    try:
        tf.config.experimental.reset_memory_stats(device)
    except (ValueError, tf.errors.OpError):
        pass


def allocator_figures(device: str) -> Optional[tuple[int, int]]:
    """(current, peak) bytes of `device`'s allocator (`tf.config.experimental.get_memory_info`), None where it keeps none."""
    try:
        info = tf.config.experimental.get_memory_info(device)
    except (ValueError, tf.errors.OpError):
        return None
    return int(info["current"]), int(info["peak"])


def live_tensor_objects() -> list[tuple[str, Any]]:
    """("tensor", eager tensor) and ("variable", variable) pairs for every one Python's garbage collector
    tracks now; a distributed variable is left out (its components are listed)."""
    found = []
    for obj in gc.get_objects():
        if isinstance(obj, _ops.EagerTensor):
            found.append(("tensor", obj))
        elif isinstance(obj, tf.Variable) and getattr(obj, "values", None) is None:
            found.append(("variable", obj))
    return found


# The profiler ----------------------------------------------------------------------------------

# What `start` raises while another session runs ("Another profiler is running") and `stop` without one.
ProfilerBusy = (tf.errors.AlreadyExistsError, tf.errors.UnavailableError)
# What `start` and `stop` raise at all: those, and errors creating or writing the profile's folder.
ProfilerError = tf.errors.OpError


def profiler_start(logdir: str) -> None:
    """Starts TensorFlow's profiler (one session per process), writing into `logdir` at stop."""
    tf.profiler.experimental.start(logdir)


def profiler_stop() -> None:
    """Stops TensorFlow's profiler and writes its profile."""
    tf.profiler.experimental.stop()


def read_xspaces(paths: Iterable[str]) -> Optional[Any]:
    """The profile in the `*.xplane.pb` files `paths` as one `XSpace` (their planes together), None
    when there is none."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = None
    for path in sorted(paths):
        with open(path, "rb") as stream:
            read = xplane_pb2.XSpace.FromString(stream.read())
        if space is None:
            space = read
        else:
            space.planes.extend(read.planes)
    return space
