"""The records of a placement log: one per placement event, one per implicit copy.

Example:
    >>> from tfplace.placement.records._records import PlacementRecord
    >>> record = PlacementRecord("MatMul", "", "/device:CPU:0", "execute", "train.py:12")
    >>> record.op, record.kind, record.to_json()["device"]
    ('MatMul', 'execute', '/device:CPU:0')
"""

from __future__ import annotations

import enum
from typing import Any, Iterable, NamedTuple, Optional

__all__ = ["PlacementRecord", "CopyRecord", "CONTROL", "CUSTOM_DEVICE", "input_label", "Kind", "Origin", "ARGUMENT_OPS"]

# Nodes TensorFlow adds to every function for its arguments and results.
ARGUMENT_OPS = frozenset({"_Arg", "_Retval", "_DeviceArg", "_DeviceRetval"})


class _Text(str, enum.Enum):
    """A member that is its string everywhere: compared, hashed, printed and written to JSON."""

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Kind(_Text):
    """What a record is: an eager op that ran or raised, or a function's node placed, removed or compiled.

    >>> Kind.PLACE == "place", Kind("execute").eager, Kind.REMOVED.ran
    (True, True, False)
    """

    EXECUTE = "execute"    # an eager op ran
    FAILED = "failed"      # an eager op raised
    PLACE = "place"        # the placer placed a function's node
    REMOVED = "removed"    # the placer placed it, the graph optimizer removed it before running
    COMPILED = "compiled"  # a node of a function XLA compiled, on the device it ran

    @property
    def eager(self) -> bool:
        """An eager op's record (it ran or raised)."""
        return self in (Kind.EXECUTE, Kind.FAILED)

    @property
    def ran(self) -> bool:
        """The op ran on the record's device: an eager op that did not raise, a node placed or compiled."""
        return self in (Kind.EXECUTE, Kind.PLACE, Kind.COMPILED)


class Origin(_Text):
    """Who made an op: the user's code, tf.data's input pipeline, or TensorFlow's and Keras' machinery
    (by the op, its name scope and the frames that made it).

    >>> Origin.USER == "user", Origin("framework").users
    (True, False)
    """

    USER = "user"
    INPUT = "input"
    FRAMEWORK = "framework"

    @property
    def users(self) -> bool:
        """The user's code asked for the op: advice about it is advice the user can follow."""
        return self is Origin.USER


class _RecordFields(NamedTuple):
    op: str
    name: str
    device: str
    kind: Kind
    source: str = ""
    requested: str = ""
    dtypes: tuple[tuple[str, str], ...] = ()
    line: str = ""
    requested_by: str = ""
    origin: Origin = Origin.USER
    error: str = ""


_KINDS = {kind.value: kind for kind in Kind}
_ORIGINS = {origin.value: origin for origin in Origin}


class PlacementRecord(_RecordFields):
    """One placement event.

    Attributes:
      op: the op type as the user knows it, e.g. "MatMul" (never a kernel
        variant such as oneDNN's `_MklMatMul`, nor a graph-optimizer fusion);
        for an eager call of a function, the function's name.
      name: the node name of a function's node, as TensorFlow's placer log
        prints it; "" for eager ops.
      device: the canonical device name, e.g. "/device:CPU:0" ("" for a
        "removed" node whose device cannot be known).
      kind: "execute" (an eager op ran), "failed" (an eager op raised),
        "place" (the placer placed a function's node), "removed" (the placer
        placed it, the graph optimizer removed it before running) or
        "compiled" (a node of a function XLA compiled, on the device it ran).
      source: "file.py:LINE" of the user's code that ran the op, when asked
        for (`capture_placement(sources=True)`), else "".
      requested: the canonical name of the device the program asked for, ""
        when none: the `tf.device` scope of an eager op, the device written
        on a function's node.
      dtypes: the op's type attributes, e.g. `(("T", "float32"),)`.
      line: the text TensorFlow printed, for records read from a saved log
        (`PlacementLog.from_text`), else "".
      requested_by: who entered the `tf.device` scope that asked for `requested`: the user's
        "file.py:LINE", or the machinery's name ("MirroredStrategy", "Keras", "TensorFlow");
        "" when nothing was asked, or the scope was entered before any capture opened.
      origin: "user" (the user's code asked for the op, Keras layers it called included),
        "input" (tf.data datasets, iterators and their functions) or "framework" (TensorFlow's
        or Keras' machinery with no user request: a strategy's variable initialisation and
        all-reduce, optimizer slots, metrics).
      error: for a "failed" record, the class of what TensorFlow raised (`"OutOfRangeError"`: the normal
        end of a dataset or iterator, which reports do not count as a failure), else "".
    """


    __slots__ = ()

    def __new__(cls, op: str, name: str, device: str, kind: str, source: str = "", requested: str = "",
                dtypes: tuple[tuple[str, str], ...] = (), line: str = "", requested_by: str = "",
                origin: str = Origin.USER, error: str = "") -> "PlacementRecord":
        try:
            kind, origin = _KINDS[kind], _ORIGINS[origin]
        except KeyError:
            raise ValueError(f"PlacementRecord received kind={kind!r}, origin={origin!r}: allowed kinds are "
                             f"{', '.join(_KINDS)}; origins {', '.join(_ORIGINS)}") from None
        return super().__new__(cls, op, name, device, kind, source, requested, dtypes, line, requested_by, origin,
                               error)

    # `_replace` makes its result here: checked too (mypy synthesizes a named tuple's `_make` and takes no override)
    @classmethod
    def _make(cls, iterable: Iterable[Any]) -> "PlacementRecord":  # type: ignore[override]
        return cls(*iterable)

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-ready data (`dtypes` as a list of pairs)."""
        data = self._asdict()
        data["dtypes"] = [list(pair) for pair in self.dtypes]
        return data


CONTROL = -1  # the `input_index` of a transfer that is a control edge
# in the name of a custom device (DTensor's), which runs its ops as functions of its own
CUSTOM_DEVICE = "/device:CUSTOM:"


def input_label(op: Any, input_index: Any) -> str:
    """How a transfer's consumer and input are shown: "AddV2 input #1", or "Cos control input" for a
    control edge (`CONTROL`)."""
    return f"{op} control input" if input_index == CONTROL else f"{op} input #{input_index}"


class CopyRecord(NamedTuple):
    """An implicit transfer of a tensor between devices: one per transfer.

    `kind="eager"`: an eager op read an input whose memory (`backing_device`)
    is on another device. `kind="function"`: an edge of a function that ran in
    the block whose producer and consumer TensorFlow placed on different
    devices (the `_Send`/`_Recv` pair its partitioner inserted), once per call.

    Attributes:
      op: the op type that needed the copy (the consumer), e.g. "AddV2".
      input_index: which of its inputs was copied; `CONTROL` (-1) for a control edge (the consumer
        waits for the producer on another device: `tensor` is "^producer", `bytes` 0).
      from_device: where the input's memory was (canonical name).
      to_device: where the op needed it (canonical name).
      source: "file.py:LINE" of the user's code that made the consumer ("" when
        unknown; for a function's transfer, known with `sources=True`).
      line: the text TensorFlow printed, for copies read from a saved log.
      kind: "eager" or "function".
      function: the function that ran the transfer (e.g. "__inference_step_52"), "" for eager.
      node: the consuming node's name in that function, "" for eager.
      tensor: the producer's output, e.g. "MatMul:0" ("" for eager).
      dtype: the tensor's dtype, e.g. "float32" ("" when unknown).
      bytes: bytes per transfer where the shape is known, else None.
      call: "file.py:LINE" of the user's call of `function` ("" for eager).
      in_loop: the transfer runs in a loop body of `function`: one record per
        call is a lower bound of how often it ran.
    """

    op: str
    input_index: int
    from_device: str
    to_device: str
    source: str = ""
    line: str = ""
    kind: str = "eager"
    function: str = ""
    node: str = ""
    tensor: str = ""
    dtype: str = ""
    bytes: Optional[int] = None
    call: str = ""
    in_loop: bool = False

    def to_json(self) -> dict[str, Any]:
        """The copy as JSON-ready data."""
        return self._asdict()
