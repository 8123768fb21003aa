"""Parsing of TensorFlow's out-of-memory error messages into what was asked for, where and by whom.

A `ResourceExhaustedError`'s text says `OOM when allocating tensor with shape[...] and type T on DEVICE by
allocator A`, then names the node (`[[{{node N}}]]`, TF 1.x `[[Node: N = ...]]`, TF 2.9+ `Detected at node N
defined at (most recent call last):` with the Python frames that built it) or, for an eager op, `[Op:N]`;
XLA's clusters say `Out of memory while trying to allocate B bytes.` `parse_oom()` reads any of these, whole
or pasted from a log, into an `OutOfMemory` (what was asked for); it imports no TensorFlow until it meets a device name.

Example:
    >>> from tfplace.placement.records._oom import parse_oom
    >>> oom = parse_oom("OOM when allocating tensor with shape[65536,1024] and type float on "
    ...                 "/job:localhost/replica:0/task:0/device:CPU:0 by allocator bfc_cpu_allocator_for_gpu\\n"
    ...                 "\\t [[{{node Tile}}]]")
    >>> oom.device, oom.dtype, oom.shape, oom.requested_bytes, oom.op, oom.allocator
    ('/device:CPU:0', 'float32', (65536, 1024), 268435456, 'Tile', 'bfc_cpu_allocator_for_gpu')
    >>> parse_oom("Incompatible shapes: [2] vs. [3]") is None
    True
"""

from __future__ import annotations

import math
import re
from typing import Optional

from tfplace.placement.records._memory_figures import OutOfMemory

__all__ = ["parse_oom"]

# TensorFlow's DataTypeString words: (the dtype's Python name, its size in bytes; 0 where it has none).
_DTYPES: dict[str, tuple[str, int]] = {
    "float": ("float32", 4), "double": ("float64", 8), "half": ("float16", 2), "bfloat16": ("bfloat16", 2),
    "int8": ("int8", 1), "int16": ("int16", 2), "int32": ("int32", 4), "int64": ("int64", 8),
    "uint8": ("uint8", 1), "uint16": ("uint16", 2), "uint32": ("uint32", 4), "uint64": ("uint64", 8),
    "bool": ("bool", 1), "complex64": ("complex64", 8), "complex128": ("complex128", 16), "string": ("string", 0),
    "qint8": ("qint8", 1), "quint8": ("quint8", 1), "qint16": ("qint16", 2), "quint16": ("quint16", 2),
    "qint32": ("qint32", 4), "float8_e5m2": ("float8_e5m2", 1), "float8_e4m3fn": ("float8_e4m3fn", 1),
}
# `OOM when allocating [temporary ]tensor with shape[2,3] and type float on /job:.../device:GPU:0 by allocator A`
# (TF 1.x: `of shape [2,3]`; a kernel's temporary names neither type nor device).
_OOM = re.compile(
    r"OOM when allocating (?:temporary )?tensor(?: (?:with|of) shape ?(?:\[(?P<shape>[^\]\n]*)\])?)?"
    r"(?: and type (?P<dtype>\w+))?(?: on (?P<device>/?[\w:/]+))?(?: by allocator (?P<allocator>[^\s\[\]]+))?",
    re.I)
_XLA = re.compile(r"Out of memory while trying to allocate (?P<bytes>\d+) bytes", re.I)
_NODE = re.compile(r"\[\[(?:\{\{node |node |Node: )(?P<name>[^\s{}\]]+)")
_DETECTED = re.compile(r"Detected at node '?(?P<name>[^'\s]+)'? defined at \(most recent call last\):")
_SECTION_END = re.compile(r"Detected at node |^\s*Node: |OOM when allocating|root error\(s\) found|"
                          r"Out of memory while trying", re.M | re.I)
_FRAME = re.compile(r'File "(?P<path>[^"\n]+)", line (?P<line>\d+)')
_DEFINED = re.compile(r" *\(defined at (?P<where>[^\n()]+?:\d+)\)")
_EAGER_OP = re.compile(r"\[Op:(?P<name>[\w>./-]+)\]|\bby op (?P<by>[\w>./-]+)")
_NEXT_ERROR = re.compile(r"^\s*\(\d+\) \w", re.M)
_LIBRARY = re.compile(r"(?:site|dist)-packages[\\/]|[\\/]lib[\\/]python[\d.]*[\\/]|[\\/]python[\d.]*[\\/]lib[\\/]"
                      r"|^<frozen ", re.I)


def parse_oom(message: str) -> Optional[OutOfMemory]:
    """What an out-of-memory error's text (`str(error)`, or a log holding it) says was asked for, as an
    `OutOfMemory` with nothing `held` (the text does not say); None when the text is not one.

    Its fields, as the message gives them ("" or 0 or () where it does not): the device's canonical name, the
    shape's element count times the dtype's size (`requested_bytes`; the bytes of XLA's message), TensorFlow's
    dtype name (`float32` for the message's `float`), the shape, the node that asked or the eager op (`op`), the
    last user frame of the node's `defined at` traceback (`source`, `file.py:LINE`) and the allocator."""
    found = _OOM.search(message) or _XLA.search(message)
    if found is None:
        return None
    groups = found.groupdict()
    shape: Optional[tuple[int, ...]] = _shape(groups.get("shape"))
    dtype, size = _DTYPES.get(re.sub(r"_ref$", "", groups.get("dtype") or ""), ("", 0))
    if "bytes" in groups:
        requested = int(groups["bytes"])
    else:
        requested = math.prod(shape) * size if shape is not None and size else 0
    rest = message[found.end():]
    following = _NEXT_ERROR.search(rest)
    node = _NODE.search(rest[:following.start()] if following else rest)
    sections = [(m[1], m.end()) for m in _DETECTED.finditer(message)]
    op = node["name"] if node else sections[0][0] if sections else _eager_op(rest) or _eager_op(message)
    source = ""
    if sections:
        start = next((end for name, end in sections if name == op), sections[0][1])
        stop = _SECTION_END.search(message, start)
        source = _user_frame(message[start:stop.start() if stop else len(message)])
    elif node and (defined := _DEFINED.match(rest, node.end())):
        source = defined["where"].strip()
    return OutOfMemory(_device(groups.get("device") or ""), requested, dtype, shape or (), op, source,
                       groups.get("allocator") or "")


def _shape(text: Optional[str]) -> Optional[tuple[int, ...]]:
    """`65536,1024` as (65536, 1024); `` (a scalar) as (); None when there is no shape or it is not all numbers."""
    if text is None:
        return None
    try:
        return tuple(int(dim) for dim in text.split(",") if dim.strip())
    except ValueError:
        return None


def _eager_op(text: str) -> str:
    """The op of `[Op:Fill]` or `by op Fill`; not a function's call (`[Op:__inference_train_function_8]`)."""
    for match in _EAGER_OP.finditer(text):
        name = match["name"] or match["by"]
        if not name.startswith("__"):
            return name
    return ""


def _user_frame(traceback: str) -> str:
    """`path:line` of the last frame outside the installed libraries (of the last frame when all are)."""
    frames = [(m["path"], m["line"]) for m in _FRAME.finditer(traceback)]
    if not frames:
        return ""
    users = [frame for frame in frames if not _LIBRARY.search(frame[0].replace("\\", "/"))]
    path, line = (users or frames)[-1]
    return f"{path}:{line}"


def _device(name: str) -> str:
    """The canonical name of the message's device; "" for none or for one tfplace cannot read (`/job:localhost`)."""
    if not name:
        return ""
    from tfplace._devices import requested_name  # canonical_name, "" where it raises; TensorFlow only now

    return requested_name(name.rstrip("/:"))
