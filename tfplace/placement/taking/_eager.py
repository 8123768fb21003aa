"""An eager op as the op callback sees it: what it is, its record, its type attributes and the
implicit copies of its inputs.

Example:
    >>> from tfplace.placement.taking import _eager
    >>> op, kind, record = _eager.describe("MatMul", "/job:localhost/replica:0/task:0/device:CPU:0", None, ())
    >>> op, kind == _eager.OP, record.device, record.kind
    ('MatMul', True, '/device:CPU:0', 'execute')
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Sequence

from tensorflow.core.framework import types_pb2

from tfplace import _tensorflow
from tfplace._devices import canonical_name, parse_device, requested_name
from tfplace._tensorflow import dtype_enum
from tfplace.placement.functions import _pipelines, _transfers
from tfplace.placement.ops import _kernels
from tfplace.placement.records import _origins
from tfplace.placement.records._records import CopyRecord, Kind, PlacementRecord
from tfplace._names import is_function_call
from tfplace.placement.session import _session

__all__ = ["OP", "FUNCTION", "ITERATOR", "EXPLICIT", "HOST", "kind_of", "describe", "type_values", "dtypes",
           "function_name", "copies", "device_of", "described", "with_line"]

HOST = "/job:localhost/replica:0/task:0/device:CPU:0"
_ON_HOST = frozenset({types_pb2.DT_STRING, types_pb2.DT_RESOURCE})
_RESOURCE = types_pb2.DT_RESOURCE
_INT32 = types_pb2.DT_INT32


@functools.lru_cache(maxsize=4096)
def _type_attrs(op: str) -> frozenset[str]:
    op_def = _tensorflow.op_def(op)
    if op_def is None:
        return frozenset()
    return frozenset(a.name for a in op_def.attr if a.type in ("type", "list(type)"))


@functools.lru_cache(maxsize=4096)
def dtypes(values: tuple) -> tuple[tuple[str, str], ...]:
    def name(value: Any) -> str:
        if isinstance(value, (list, tuple)):
            return ",".join(_kernels.dtype_name(v) for v in value)
        return _kernels.dtype_name(value)

    return tuple((key, name(value)) for key, value in values if value != ())


def type_values(op_type: Any, attrs: Any) -> tuple:
    op = op_type.decode() if isinstance(op_type, bytes) else op_type
    names = _type_attrs(op)
    if not names or not attrs:
        return ()
    return tuple(dict((attrs[i], tuple(attrs[i + 1]) if isinstance(attrs[i + 1], list) else attrs[i + 1])
                      for i in range(0, len(attrs), 2) if attrs[i] in names).items())


def function_name(value: Any) -> str:
    """The name in a function-valued attribute of an eager op (a name, bytes or a NameAttrList)."""
    name = getattr(value, "name", value)
    return name.decode() if isinstance(name, bytes) else str(name)


def _host_of(full: str) -> str:
    return full.rpartition("/device:")[0] + "/device:CPU:0" if "/device:" in full else HOST


@functools.lru_cache(maxsize=4096)
def copies_to_host(op_type: Any, full: str) -> bool:
    """True where an op of `op_type` (as its callback gets it, or its op type), run on `full`, has its int32
    host-memory inputs copied to the host CPU even when they are on `full` itself: `full` is not the host
    CPU, and the op's kernel there keeps some input in host memory."""
    op = _kernels.op_type(op_type.decode() if isinstance(op_type, bytes) else op_type)
    return full != _host_of(full) and bool(_kernels.host_memory_args(op, parse_device(full).device_type))


def copies(op: str, inputs: Sequence[Any], full: str, device: str) -> list[CopyRecord]:
    """Inputs whose memory is elsewhere than where the op needs them."""
    found: list[CopyRecord] = []
    device_type = parse_device(device).device_type
    host_inputs = _kernels.host_memory_inputs(op, device_type, len(inputs))
    host = _host_of(full)
    for index, tensor in enumerate(inputs):
        dtype = dtype_enum(tensor)
        if dtype == _RESOURCE:
            continue
        # an int32 the kernel keeps in host memory (StridedSlice's begin, Reshape's shape) is copied to the host CPU
        # from any other device, another CPU included; its other host-memory arguments are read where they are
        kept_on_host = dtype == _INT32 and index in host_inputs
        on_host = index in host_inputs or dtype in _ON_HOST or (dtype == _INT32 and device_type != "CPU")
        where = tensor.backing_device
        if on_host and not kept_on_host and "/device:CPU:" in where:
            continue  # other host-memory values are read on whichever CPU holds them
        target = host if on_host else full
        # in a cluster's task, /job:localhost and the task's job name one device: compared by canonical name
        if where and where != target and canonical_name(where) != canonical_name(target):
            dtype_name = _kernels.dtype_name(dtype)
            size = _tensorflow.dtype_size(dtype_name)
            found.append(CopyRecord(op, index, canonical_name(where), canonical_name(target),
                                    dtype=dtype_name,
                                    bytes=None if size is None else size * tensor.shape.num_elements()))
    return found


# What an eager op is, for the op callback: an op whose inputs may be copied, a function call,
# an op making an iterator (it instantiates tf.data functions), or an op that copies explicitly (an
# identity, under a `tf.device` scope: `describe`).
OP, FUNCTION, ITERATOR, EXPLICIT = range(4)


def kind_of(op_type: Any) -> tuple[str, int]:
    """(op type, what it is) of an eager op's type as its callback gets it (`b"_MklMatMul"` -> `"MatMul"`, OP)."""
    op = op_type.decode() if isinstance(op_type, bytes) else op_type
    if is_function_call(op) and _tensorflow.op_def(op) is None:
        return op, FUNCTION
    op = _kernels.op_type(op)
    return op, ITERATOR if op in _pipelines.ITERATOR_OPS else EXPLICIT if op in _transfers.EXPLICIT_COPIES else OP


def describe(op_type: Any, full: str, requested: Optional[str], types: tuple) -> tuple[str, int, PlacementRecord]:
    """(op type, what it is, its record without source) of an eager op. An identity is an explicit copy
    only under a `tf.device` scope; under none it runs where TensorFlow puts it and its input is copied
    there implicitly, as TensorFlow's "warn" device policy logs it."""
    op, kind = kind_of(op_type)
    if kind == EXPLICIT and not requested:
        kind = OP
    record = PlacementRecord(op, "", canonical_name(full), Kind.EXECUTE, requested=requested_name(requested),
                             dtypes=dtypes(types), origin=_origins.of_op(op, ""))
    return op, kind, record


def device_of(inputs: Sequence[Any]) -> str:
    """Where an op without outputs ran: with its resource, else where it was asked to run."""
    for tensor in inputs:
        if dtype_enum(tensor) == _RESOURCE:  # pylint: disable=protected-access
            return tensor.device
    return _tensorflow.device_name() or HOST


def described(session: _session.Session, op_type: Any, full: str, requested: Optional[str], attrs: Any) -> tuple:
    """(op type, what it is, its record without source) of an eager op, described once per session and kept
    (`describe`); keyed on the type attributes alone where an attribute is a list (strides)."""
    cache = session.described
    try:
        key: tuple = (op_type, full, requested, attrs)
        hash(key)
    except TypeError:  # a list-valued attribute
        key = (op_type, full, requested, type_values(op_type, attrs))
    known = cache.get(key)
    if known is None:
        known = describe(op_type, full, requested, type_values(op_type, attrs))
        if len(cache) > 100_000:  # caches, bounded: records are made again when needed
            cache.clear()
            session.noted.clear()
            session.sourced.clear()
        cache[key] = known
    return known


def with_line(copies: Sequence[CopyRecord], op: str, source: str) -> list[CopyRecord]:
    """Copies with the user's line of the op that made them (`source`): a function's transfer (a call's, or a
    tf.data function's) has its node's line, and the call's as its `call` (`op`: the function called)."""
    return [copy._replace(function=copy.function or op, call=source) if copy.kind == "function"
            else copy._replace(source=source) for copy in copies]
