"""What TensorFlow's kernel registry says about an op: its user-facing type, its
host-memory inputs, its resource inputs and output dtypes.

oneDNN builds rename kernels (`_MklMatMul` for `MatMul`, `_MklNativeConv2D` for
`Conv2D`, `_MklFusedMatMul` for `_FusedMatMul`); `op_type()` maps them back, so
a log says the same on every CPU. Inputs a kernel keeps in host memory (a
`Fill`'s `dims`, every int32 input of a GPU kernel) are never copied, so they
are not implicit copies.

Example:
    >>> from tfplace.placement.ops import _kernels
    >>> _kernels.op_type("_MklMatMul"), _kernels.op_type("_MklFusedMatMul")
    ('MatMul', '_FusedMatMul')
    >>> _kernels.host_memory_inputs("Fill", "CPU", 2)
    frozenset({0})
    >>> _kernels.resource_inputs("AssignAddVariableOp")
    ('resource',)
"""

from __future__ import annotations

import functools
import re
from typing import Any, Mapping, Optional, Sequence

import tensorflow as tf
from tensorflow.core.framework import types_pb2

from tfplace import _tensorflow

__all__ = ["op_type", "dtype_name", "node_dtypes", "is_wrapper_plumbing", "host_memory_inputs",
           "resource_inputs", "output_dtypes", "is_registered_op"]

_VARIANT_PREFIXES = ("_MklNative", "_Mkl")


@functools.lru_cache(maxsize=4096)
def op_type(name: str) -> str:
    """The op type a kernel variant implements (`_MklMatMul` → `MatMul`); other names unchanged."""
    if not name.startswith("_Mkl"):
        return name
    for prefix in _VARIANT_PREFIXES:
        if name.startswith(prefix):
            base = name[len(prefix):]
            for candidate in (base, "_" + base):
                if _tensorflow.op_def(candidate) is not None:
                    return candidate
    return name


@functools.lru_cache(maxsize=256)
def dtype_name(enum: int) -> str:
    """The name of a dtype enum of an attribute, e.g. 1 -> "float32"."""
    return tf.dtypes.as_dtype(enum).name


def node_dtypes(attr: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The type attributes of a node's attr map (NodeDef.attr), e.g. `(("T", "float32"),)`;
    a list of types is joined with commas."""
    found = []
    for key in sorted(attr):
        value = attr[key]
        kind = value.WhichOneof("value")
        if kind == "type":
            found.append((key, dtype_name(value.type)))
        elif kind == "list" and value.list.type:
            found.append((key, ",".join(dtype_name(t) for t in value.list.type)))
    return tuple(found)


@functools.lru_cache(maxsize=4096)
def is_registered_op(name: str) -> bool:
    """True if `name` is a registered op type (False for a function's name such as `__inference_f_12`)."""
    return _tensorflow.op_def(name) is not None


@functools.lru_cache(maxsize=4096)
def resource_inputs(op: str) -> tuple[str, ...]:
    """Names of `op`'s inputs that are resources (a variable's handle, a table's ...)."""
    op_def = _tensorflow.op_def(op)
    if op_def is None:
        return ()
    return tuple(a.name for a in op_def.input_arg if a.type == types_pb2.DT_RESOURCE)


def output_dtypes(op: str, dtypes: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """The dtype names of `op`'s outputs, given its type attributes (`()` where unknown)."""
    op_def = _tensorflow.op_def(op)
    if op_def is None:
        return ()
    values = dict(dtypes)
    found: list[str] = []
    for arg in op_def.output_arg:
        if arg.type:
            found.append(dtype_name(arg.type))
        elif arg.type_attr in values:
            found.append(values[arg.type_attr])
        elif arg.type_list_attr in values:
            found.extend(values[arg.type_list_attr].split(","))
    return tuple(found)


@functools.lru_cache(maxsize=4096)
def _arguments(op: str) -> tuple[frozenset[str], frozenset[str]]:
    op_def = _tensorflow.op_def(op)
    if op_def is None:
        return frozenset(), frozenset()
    return frozenset(a.name for a in op_def.input_arg), frozenset(a.name for a in op_def.output_arg)


_NUMBERED = re.compile(r"_\d+$")


@functools.lru_cache(maxsize=4096)
def is_wrapper_plumbing(node: str, op: str) -> bool:
    """True if `node` names an argument or result node of the one-op function TensorFlow
    builds to run eager `op`: named after the op's inputs (`a`, `input__dataset`,
    `inputs_0`) or outputs (`product_RetVal`, `components_0_RetVal`)."""
    inputs, outputs = _arguments(op)
    result = node.endswith("_RetVal")
    name = node[:-7] if result else node
    # a list argument's entries are numbered (`inputs_0`); some names end in a digit of their own
    # (FusedBatchNormV3's `reserve_space_1`)
    return any(base.replace("__", "_") in (outputs if result else inputs) for base in (name, _NUMBERED.sub("", name)))


@functools.lru_cache(maxsize=4096)
def host_memory_args(op: str, device_type: str) -> frozenset[str]:
    """The names of `op`'s arguments its `device_type` kernels keep in host memory."""
    return frozenset(
        arg for k in _tensorflow.registered_kernels(op) if k.device_type == device_type
        for arg in k.host_memory_arg)


@functools.lru_cache(maxsize=4096)
def host_memory_inputs(op: str, device_type: str, count: int) -> frozenset[int]:
    """Indices of `op`'s inputs that its `device_type` kernel keeps in host memory.

    Args:
      op: the op type.
      device_type: where the op runs, e.g. "GPU".
      count: how many inputs this call has (list arguments take several).
    """
    names = host_memory_args(op, device_type)
    op_def = _tensorflow.op_def(op)
    if not names or op_def is None:
        return frozenset()
    args = list(op_def.input_arg)
    lists = [a for a in args if a.number_attr or a.type_list_attr]
    list_size: Optional[int] = (count - (len(args) - len(lists))) if len(lists) == 1 else None
    found: set[int] = set()
    index = 0
    for arg in args:
        if arg.number_attr or arg.type_list_attr:
            if list_size is None:  # several list arguments: sizes unknown without attrs
                return frozenset(found)
            size = list_size
        else:
            size = 1
        if arg.name in names:
            found.update(range(index, index + size))
        index += size
    return frozenset(found)
