"""Graph collection, function definitions, static shapes, op definitions and the kernel registry. Part of
`tfplace._tensorflow` (see its docstring)."""

from __future__ import annotations

import functools
import gc
import sys
import threading
from typing import Any, Callable, Iterable, Optional

import tensorflow as tf
from tensorflow.python.autograph.pyct import transpiler as _transpiler
from tensorflow.python.client import pywrap_tf_session as _c_api
from tensorflow.python.eager import context as _context
from tensorflow.python.framework import c_api_util as _c_api_util
from tensorflow.python.framework import kernels as _kernels
from tensorflow.python.framework import op_def_registry as _op_def_registry
from tensorflow.python.framework import ops as _ops
from tensorflow.python.ops import summary_ops_v2 as _summary_ops_v2


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


def function_names() -> list[str]:
    """The names of every function registered in the eager context (DTensor registers its per-device ones there)."""
    return _context.context().list_function_names()


def traced_parameters(args: tuple, kwargs: dict) -> tuple[tuple[str, str], ...]:
    """(name, what the trace holds it to) of each parameter of the function `from_func_graph(name, graph,
    attrs, function_type)` makes, from its `FunctionType` (`tf.types.experimental.FunctionType`): a tensor
    argument's `TensorSpec`, a Python value's `Literal[...]`; empty where the call passes none."""
    function_type = kwargs.get("function_type", args[1] if len(args) > 1 else None)
    parameters = getattr(function_type, "parameters", None) or {}
    return tuple((name, str(parameter.annotation)) for name, parameter in parameters.items())


_AUTOGRAPH_LOCK = threading.Lock()
_AUTOGRAPH_MAPS: dict[str, dict[int, tuple[str, int]]] = {}  # generated file -> its line -> the source's line
_AUTOGRAPH_LOOKED: set[str] = set()  # generated files looked for (once each)


def autograph_origin(filename: str, lineno: int) -> Optional[tuple[str, int]]:
    """The (file, line) of the user's source that line `lineno` of autograph's generated file `filename` was
    made from, None where unknown. TensorFlow maps a traced op's stack back itself, except where the code ran
    in a thread its conversion did not (a `MirroredStrategy` replica's function): then the converted
    functions' source maps (on the factories autograph's cache keeps) say it; they are gathered once per
    file not yet known, from the garbage collector's objects."""
    with _AUTOGRAPH_LOCK:
        if filename not in _AUTOGRAPH_MAPS and filename not in _AUTOGRAPH_LOOKED:
            _AUTOGRAPH_LOOKED.add(filename)
            for found in gc.get_objects():  # autograph's cache keeps a factory per converted function
                source_map = found.source_map if isinstance(found, _transpiler._PythonFnFactory) else None
                for location, origin in (source_map or {}).items():
                    _AUTOGRAPH_MAPS.setdefault(location.filename, {})[location.lineno] = (origin.loc.filename,
                                                                                        origin.loc.lineno)
        return _AUTOGRAPH_MAPS.get(filename, {}).get(lineno)


def dtensor_layout(tensor: Any) -> str:
    """The DTensor layout of a tensor on DTensor's device, as a string ("" for any other tensor)."""
    from tensorflow.dtensor.python import api as _dtensor_api  # loaded only for DTensor's ops

    try:
        layout = _dtensor_api.fetch_layout(tensor)
    except (ValueError, TypeError, RuntimeError, tf.errors.OpError):  # not a DTensor after all
        return ""
    return layout.to_string() if layout is not None else ""


def dtensor_stats() -> dict[str, int]:
    """DTensor's device's counters (`DTensorDevice._get_stats`: its function cache, the ops it ran
    eagerly on the host, `eager_pure_optimization.hit`, and its kernel cache per function and device);
    empty while the program has no DTensor device (none is made here)."""
    api = sys.modules.get("tensorflow.dtensor.python.api")
    device = getattr(api, "_dtensor_singleton", None)
    return device._get_stats() if device is not None else {}  # pylint: disable=protected-access


def tensorboard_tracing() -> bool:
    """True while `tf.summary.trace_on(graph=True)` collects function graphs for TensorBoard."""
    trace = getattr(_summary_ops_v2, "_current_trace_context", None)
    return bool(trace and trace.graph and not trace.profiler)


def static_sizes(graph: Any, tensors: Iterable[str]) -> dict[str, Optional[int]]:
    """Elements of each tensor (e.g. "MatMul:0") of a placed `GraphDef`, from TensorFlow's shape
    inference (importing the graph runs it); None where the shape is not fully known or the graph
    cannot be imported (a node whose op this process lacks)."""
    return {tensor: elements for tensor, (_, elements) in static_tensors(graph, tensors).items()}


def static_tensors(graph: Any, tensors: Iterable[str]) -> dict[str, tuple[str, Optional[int]]]:
    """(dtype name, elements) of each tensor of a `GraphDef`, as `static_sizes()` reads them; ("", None)
    where the graph cannot be imported or has no such tensor.

    The graph is imported by TensorFlow's C importer, which runs shape inference, and only the ops of the
    wanted tensors get Python objects (making one for every node, as `import_graph_def` does, takes several
    times longer); where that import refuses a tensor, `import_graph_def` reads them one by one."""
    wanted = list(tensors)
    found: dict[str, tuple[str, Optional[int]]] = dict.fromkeys(wanted, ("", None))
    nodes = {node.name for node in graph.node}
    references = []
    for tensor in wanted:
        name, colon, suffix = tensor.rpartition(":")
        if colon and suffix.isdigit() and name in nodes:
            references.append((tensor, name, int(suffix)))
    if not references:
        return found
    imported = tf.Graph()
    options = _c_api.TF_NewImportGraphDefOptions()
    try:
        for _, name, index in references:
            _c_api.TF_ImportGraphDefOptionsAddReturnOutput(options, name, index)
        with _c_api_util.tf_buffer(graph.SerializeToString()) as buffer, imported._c_graph.get() as c_graph:
            results = _c_api.TF_GraphImportGraphDefWithResults(c_graph, buffer, options)
            outputs = _c_api.TF_ImportGraphDefResultsReturnOutputs(results)
            _c_api.TF_DeleteImportGraphDefResults(results)
    except Exception:  # pylint: disable=broad-except  # an op unknown here, an output the node lacks
        return _imported_one_by_one(graph, wanted)
    finally:
        _c_api.TF_DeleteImportGraphDefOptions(options)
    operations: dict[str, Any] = {}
    for (tensor, name, _), output in zip(references, outputs):
        operation = operations.get(name)
        if operation is None:
            operation = operations[name] = imported._create_op_from_tf_operation(output.oper)
        value = operation.outputs[output.index]
        found[tensor] = (value.dtype.name, value.shape.num_elements())
    return found


def _imported_one_by_one(graph: Any, wanted: list[str]) -> dict[str, tuple[str, Optional[int]]]:
    found: dict[str, tuple[str, Optional[int]]] = dict.fromkeys(wanted, ("", None))
    imported = tf.Graph()
    try:
        with imported.as_default():
            tf.graph_util.import_graph_def(graph, name="")
    except Exception:  # pylint: disable=broad-except  # an op unknown here, a name the importer refuses
        return found
    for tensor in wanted:
        try:
            value = imported.get_tensor_by_name(tensor)
        except (KeyError, ValueError):
            continue
        found[tensor] = (value.dtype.name, value.shape.num_elements())
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


# The number of elements of a value known to be an eager tensor, called directly (a memory capture counts every
# output): a third of the cost of its dimensions.
eager_elements: Callable[[Any], int] = _ops.EagerTensor._num_elements  # pylint: disable=protected-access


# Op definitions and the kernel registry --------------------------------------------------------


def op_def(op: str) -> Any:
    """The `OpDef` of op type `op`, None for anything else (a kernel variant, a function name)."""
    return _op_def_registry.get(op)


def registered_kernels(op: str) -> Iterable[Any]:
    """The `KernelDef`s registered for `op` in this build: device type, dtype constraints, host-memory args."""
    return _kernels.get_registered_kernels_for_op(op).kernel
