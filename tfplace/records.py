"""The records of a placement log: one per placement event, one per implicit copy.

Example:
    >>> from tfplace.records import PlacementRecord
    >>> PlacementRecord("MatMul", "", "/device:CPU:0", "execute", "train.py:12").op
    'MatMul'
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["PlacementRecord", "CopyRecord", "PLUMBING"]

# Nodes TensorFlow adds to every function for its arguments and results.
PLUMBING = frozenset({"_Arg", "_Retval", "_DeviceArg", "_DeviceRetval"})


class PlacementRecord(NamedTuple):
    """One placement event.

    Attributes:
      op: the op type as the user knows it, e.g. "MatMul" (never a kernel
        variant such as oneDNN's `_MklMatMul`); for an eager call of a
        function, the function's name.
      name: the node name of a function's node ("place"), "" for eager ops.
      device: the canonical device name, e.g. "/device:CPU:0".
      kind: "execute" (an eager op ran) or "place" (a function's node was placed).
      source: "file.py:LINE" of the user's code that ran the op, when asked
        for (`capture_placement(sources=True)`), else "".
      line: the text TensorFlow printed, for records read from a saved log
        (`PlacementLog.from_text`), else "".
    """

    op: str
    name: str
    device: str
    kind: str
    source: str = ""
    line: str = ""


class CopyRecord(NamedTuple):
    """An implicit cross-device copy: an eager op read an input that lives on another device.

    Attributes:
      op: the op type that needed the copy, e.g. "AddV2".
      input_index: which of its inputs was copied.
      from_device: where the input lived (canonical name).
      to_device: where the op ran (canonical name).
      source: "file.py:LINE" of the user's code that ran the op ("" when unknown).
      line: the text TensorFlow printed, for copies read from a saved log.
    """

    op: str
    input_index: int
    from_device: str
    to_device: str
    source: str = ""
    line: str = ""
