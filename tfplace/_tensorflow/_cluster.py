"""A cluster's runtime: the collective ops in a function, each function call as it starts, and the
coordination service's key-value store tasks share. Part of `tfplace._tensorflow` (see its docstring)."""

from __future__ import annotations

import ctypes
import gc
import sys
from types import FrameType
from typing import Any, NamedTuple, Optional

import tensorflow as tf
from tensorflow.python.distribute.coordinator import cluster_coordinator as _cluster_coordinator
from tensorflow.python.eager import context as _context
from tensorflow.python.eager.polymorphic_function import atomic_function as _atomic_function
from tensorflow.python.framework import function_def_to_graph as _function_def_to_graph

from tfplace._tensorflow._eager import Patch

# Every call of a traced function, as it starts (`AtomicFunction.call_flat`): the collectives it will join.
CALL_FLAT = Patch(_atomic_function.AtomicFunction, "call_flat")
# Every closure a `ClusterCoordinator` schedules (`schedule` makes it on the user's thread; `execute_on` runs it
# on a thread of the coordinator's, where no frame is the user's).
CLOSURE_INIT = Patch(_cluster_coordinator.Closure, "__init__")


def running_closure(depth: int = 2) -> Any:
    """The `ClusterCoordinator` closure the calling thread runs (its `execute_on` frame's `self`, from `depth`
    frames up), None outside one."""
    frame: Optional[FrameType] = sys._getframe(depth)  # pylint: disable=protected-access
    for _ in range(64):  # a tf.function's call path is some 20 frames deep
        if frame is None:
            return None
        if frame.f_code.co_name == "execute_on":
            found = frame.f_locals.get("self")
            return found if isinstance(found, _cluster_coordinator.Closure) else None
        frame = frame.f_back
    return None

# Collective ops that join a group of tasks: V1 carry the group in attributes, V2 in input tensors.
COLLECTIVE_OPS = frozenset({
    "CollectiveReduce", "CollectiveGather", "CollectiveBcastSend", "CollectiveBcastRecv",
    "CollectiveReduceV2", "CollectiveGatherV2", "CollectiveBcastSendV2", "CollectiveBcastRecvV2",
    "CollectiveAllToAllV2", "CollectiveReduceScatterV2"})
_LOOPS = frozenset({"While", "StatelessWhile"})


class Collective(NamedTuple):
    """One collective op of a function: its group and what it moves per call.

    `shape` is None where it is not static; `in_loop` when the op runs in a loop body (once per
    iteration: a call's count is a lower bound).
    """

    op: str
    node: str
    group_size: Optional[int]
    group_key: Optional[int]
    instance_key: Optional[int]
    dtype: str
    shape: Optional[tuple]
    hint: str
    device: str
    in_loop: bool = False


def _value(op: Any, name: str) -> Optional[int]:
    """A V1 op's attribute, or a V2 op's input tensor of that name, when it is a constant."""
    try:
        return int(op.get_attr(name))
    except (ValueError, TypeError):
        pass
    names = [arg.name for arg in op.op_def.input_arg]
    if name not in names:
        return None
    value = tf.get_static_value(op.inputs[names.index(name)])
    return None if value is None else int(value)


def _of_op(op: Any, in_loop: bool) -> Collective:
    dtype = tf.as_dtype(op.get_attr("T")).name
    if op.type in ("CollectiveBcastRecv", "CollectiveBcastRecvV2"):
        tensor = op.outputs[0]
    else:
        tensor = op.inputs[0]
    shape = tuple(tensor.shape.as_list()) if tensor.shape.is_fully_defined() else None
    try:
        hint = op.get_attr("communication_hint").decode()
    except ValueError:
        hint = ""
    return Collective(op.type, op.name, _value(op, "group_size"), _value(op, "group_key"),
                      _value(op, "instance_key"), dtype, shape, hint, op.device, in_loop)


def _called(node: Any) -> list[tuple[str, bool]]:
    """The functions a FunctionDef node calls (its function attributes), with whether they loop."""
    found = []
    for value in node.attr.values():
        names = [value.func.name] if value.HasField("func") else [f.name for f in value.list.func]
        found += [(name, node.op in _LOOPS) for name in names if name]
    return found


def collectives_in(name: str, definition: Any = None, graph: Any = None, known: Optional[dict] = None,
                   _seen: Optional[set] = None, _in_loop: bool = False) -> tuple[Collective, ...]:
    """The collective ops a call of function `name` runs, those of the functions it calls included
    (its `FunctionDef`, or the one registered under `name`; the graph it was traced as, when given,
    keeps every static shape). Empty for a function without them, or one this process cannot rebuild.

    `known` (function name -> what its own nodes hold), read and filled, spares rebuilding a function's
    graph from its `FunctionDef` for each caller: a name is one function while the process runs, and what
    its traced graph said (a function is called while its callers are traced) is kept over a rebuild."""
    seen = set() if _seen is None else _seen
    seen.add(name)
    known = {} if known is None else known
    entry = known.get(name)
    if entry is None or (graph is not None and not entry[2]):
        try:
            definition = definition if definition is not None else _context.context().get_function_def(name)
        except Exception:  # pylint: disable=broad-except  # not registered (any more)
            return ()
        entry = known[name] = (_own_collectives(definition, graph),
                               [called for node in definition.node_def for called in _called(node)], graph is not None)
    own, calls, _ = entry
    found = [collective._replace(in_loop=True) for collective in own] if _in_loop else list(own)
    for called, loops in calls:
        if called not in seen:
            found += collectives_in(called, None, None, known, seen, _in_loop or loops)
    return tuple(found)


def _own_collectives(definition: Any, graph: Any) -> tuple[Collective, ...]:
    """The collective ops of a function's own nodes (not of the functions it calls), read from the graph
    it was traced as, else from one rebuilt from its `FunctionDef` where it has any."""
    if not any(node.op in COLLECTIVE_OPS for node in definition.node_def):
        return ()
    try:
        graph = graph if graph is not None else _function_def_to_graph.function_def_to_graph(definition)
    except Exception:  # pylint: disable=broad-except  # an op or function this process lacks
        return ()
    return tuple(_of_op(op, False) for op in graph.get_operations() if op.type in COLLECTIVE_OPS)


def call_name(function: Any) -> str:
    """The registered name of an `AtomicFunction` (`__inference_step_52`)."""
    name = function.name
    return name.decode() if isinstance(name, bytes) else str(name)


def call_definition(function: Any) -> Any:
    """The `FunctionDef` of an `AtomicFunction`."""
    return function.cached_definition


def call_graph(function: Any) -> Any:
    """The graph an `AtomicFunction` was traced as (static shapes kept), None when it was built otherwise."""
    return getattr(function, "_cached_graph", None)  # pylint: disable=protected-access


class VariableAccess(NamedTuple):
    """A read or write of a variable a function takes as its `argument`-th input (a captured handle).

    `dtype` and `shape` are those of what moves per call: the value read, or the value written (an
    assignment's value, an update's gradient); `shape` is None where it is not static.
    """

    op: str
    node: str
    argument: int
    read: bool
    dtype: str
    shape: Optional[tuple]


_READS = frozenset({"ReadVariableOp", "ResourceGather", "ResourceGatherNd"})
_WRITTEN = ("value", "delta", "grad", "updates")  # the input of a write that carries what moves


def _moved(op: Any) -> Optional[Any]:
    """The tensor a variable op moves: a read's output, a write's value (None for other ops)."""
    if op.type in _READS:
        return op.outputs[0]
    if op.type.endswith("VariableOp") and op.type.startswith("Assign") or op.type.startswith(
            ("ResourceApply", "ResourceSparseApply", "ResourceScatter")):
        names = [arg.name for arg in op.op_def.input_arg]
        return next((op.inputs[names.index(n)] for n in _WRITTEN if n in names), None)
    return None


def variable_accesses(function: Any) -> tuple[VariableAccess, ...]:
    """The reads and writes of variables an `AtomicFunction`'s graph makes through its inputs (the handles
    it captured), with what each moves; empty for a function without its traced graph."""
    graph = call_graph(function)
    if graph is None:
        return ()
    positions = {tensor.ref(): i for i, tensor in enumerate(graph.inputs) if tensor.dtype == tf.resource}
    found = []
    for op in graph.get_operations():
        moved = _moved(op) if positions else None
        if moved is None:
            continue
        handle = op.inputs[0]
        while handle.op.type == "Identity" and handle.op.inputs:
            handle = handle.op.inputs[0]
        if handle.ref() in positions:
            shape = tuple(moved.shape.as_list()) if moved.shape.is_fully_defined() else None
            found.append(VariableAccess(op.type, op.name, positions[handle.ref()], op.type in _READS,
                                        moved.dtype.name, shape))
    return tuple(found)


# The coordination service's key-value store (MultiWorkerMirroredStrategy's clusters have one) ------


def store_set(key: str, value: str) -> None:
    """Sets `key` in the cluster's key-value store (replacing what it held)."""
    ctx = _context.context()
    try:
        ctx.delete_config_key_value(key)
    except Exception:  # pylint: disable=broad-except  # not there yet
        pass
    ctx.set_config_key_value(key, value)


def store_get(key: str, timeout_ms: int = 1) -> Optional[str]:
    """`key`'s value in the cluster's key-value store; None when unset within `timeout_ms`, or no store."""
    try:
        return _context.context().get_config_key_value(key, timeout_ms)
    except Exception:  # pylint: disable=broad-except  # unset (deadline), or no coordination service
        return None


def libc() -> Any:
    """The C library (Linux), for `prctl`: a task of `tfplace launch` dies with its launcher."""
    return ctypes.CDLL(None, use_errno=True)


def served_here() -> frozenset[str]:
    """The tasks whose `tf.distribute.Server` runs in this process (an in-process cluster, as the
    parameter-server tutorial makes one), as device prefixes: `/job:worker/replica:0/task:1`. It walks
    the live objects: call it once per question, not per op."""
    tasks = set()
    for thing in gc.get_objects():
        if isinstance(thing, tf.distribute.Server):
            definition = thing.server_def
            tasks.add(f"/job:{definition.job_name}/replica:0/task:{definition.task_index}")
    return frozenset(tasks)
