"""Who asked for an op, and for its device: the user, the input pipeline, or TensorFlow's and Keras' machinery.

An op's *origin* is decided by the code that made it, read from the innermost frame out; the
first frame that says something decides:

* the user's own code (outside TensorFlow, Keras and tfplace): `"user"`;
* Keras layers, models, losses and activations: `"user"` (the user called them, through `fit`
  or directly);
* `tf.data` and Keras' data adapters: `"input"` (so are dataset and iterator ops, whoever
  made them);
* Keras' optimizers, metrics, callbacks and trainer, and `tf.distribute`: `"framework"` (a
  strategy's variable initialisation and all-reduce, optimizer slots, metrics bookkeeping);
* anything else of TensorFlow's or Keras' (ops, backends, utilities) says nothing: the next
  frame out decides.

*Who asked* for a device (`requested_by`) is read the same way from the code that entered the
`tf.device` scope: the user's `"file.py:LINE"`, or the machinery's name (`"MirroredStrategy"`,
`"Keras"`, `"TensorFlow"`).

One definition of *plumbing* serves every report: a function's arguments and results
(`_Arg`, `_Retval`), `Identity`, `IdentityN`, `NoOp`, `Const`, tf.data's `FakeSink` nodes, and
nodes the graph optimizer removed before they ran.

Example:
    >>> from tfplace.placement.records import _origins
    >>> _origins.of_frames([("/site-packages/keras/src/optimizers/adam.py", 117)])
    'framework'
    >>> _origins.of_frames([("/site-packages/keras/src/layers/core/dense.py", 222), ("train.py", 9)])
    'user'
    >>> _origins.requester("/site-packages/tensorflow/python/distribute/mirrored_run.py", 1)
    'MirroredStrategy'
"""

from __future__ import annotations

import functools
import os
import sys
from types import FrameType
from typing import Any, Iterable, Iterator, Optional

from tfplace.placement.records._records import Kind, Origin
from tfplace.placement.session import _session
from tfplace.placement.session._sources import shown_path

__all__ = ["ORIGINS", "PLUMBING_OPS", "is_plumbing", "is_input_op", "of_op", "of_frames", "frames_of", "live",
           "deciding", "requester", "entering"]

ORIGINS = tuple(Origin)

# Nodes that carry values rather than compute them (with tf.data's FakeSink nodes and removed nodes).
PLUMBING_OPS = frozenset({"_Arg", "_Retval", "_DeviceArg", "_DeviceRetval", "Identity", "IdentityN", "NoOp", "Const"})

_S = os.sep
# Path parts, each deciding an origin; the first that matches a frame's file wins.
_DECIDING = (
    (f"{_S}keras{_S}src{_S}trainers{_S}data_adapters{_S}", Origin.INPUT),
    (f"{_S}tensorflow{_S}python{_S}data{_S}", Origin.INPUT),
    (f"{_S}keras{_S}src{_S}layers{_S}", Origin.USER),
    (f"{_S}keras{_S}src{_S}models{_S}", Origin.USER),
    (f"{_S}keras{_S}src{_S}losses{_S}", Origin.USER),
    (f"{_S}keras{_S}src{_S}activations{_S}", Origin.USER),
    (f"{_S}keras{_S}src{_S}applications{_S}", Origin.USER),
    (f"{_S}keras{_S}src{_S}optimizers{_S}", Origin.FRAMEWORK),
    (f"{_S}keras{_S}src{_S}backend{_S}tensorflow{_S}optimizer.py", Origin.FRAMEWORK),
    (f"{_S}keras{_S}src{_S}metrics{_S}", Origin.FRAMEWORK),
    (f"{_S}keras{_S}src{_S}callbacks{_S}", Origin.FRAMEWORK),
    (f"{_S}keras{_S}src{_S}trainers{_S}", Origin.FRAMEWORK),
    (f"{_S}keras{_S}src{_S}backend{_S}tensorflow{_S}trainer.py", Origin.FRAMEWORK),
    (f"{_S}keras{_S}src{_S}distribution{_S}", Origin.FRAMEWORK),
    (f"{_S}tensorflow{_S}python{_S}distribute{_S}", Origin.FRAMEWORK),
    (f"{_S}tensorflow{_S}python{_S}training{_S}", Origin.FRAMEWORK),
    (f"{_S}tensorflow{_S}python{_S}checkpoint{_S}", Origin.FRAMEWORK),
)
_FRAMEWORK_PARTS = (f"{_S}tensorflow{_S}", f"{_S}keras{_S}", f"{_S}tf_keras{_S}", f"{_S}tfplace{_S}", f"{_S}optree{_S}")
_SCOPE_PLUMBING = (f"{_S}framework{_S}ops.py", f"{_S}eager{_S}context.py", f"{_S}tf_contextlib.py", "contextlib.py")
_STDLIB = os.path.join(os.path.dirname(os.__file__), "")
_NEUTRAL_STDLIB = tuple(os.path.join(_STDLIB, name) for name in ("threading.py", "contextlib.py", "runpy.py"))

# Which machinery entered a tf.device scope, by file.
_REQUESTERS = (
    ("mirrored_", "MirroredStrategy"), ("one_device_strategy", "OneDeviceStrategy"),
    ("collective_all_reduce_strategy", "MultiWorkerMirroredStrategy"), ("parameter_server", "ParameterServerStrategy"),
    ("tpu_strategy", "TPUStrategy"),
)

# The capture session keeps the verdicts it reached (`_session.current()`): `origin_of_file`, file ->
# its origin ("" when it says nothing, "user" for the user's code; a code object's file name is one string
# per module, whose hash is kept); `origin_shortcuts`, id of an innermost code -> (frames out to the deciding
# one, its code, the code it called, the verdict). Outside a session nothing is kept.


def _file_origin(filename: str) -> str:
    session = _session.current()
    by_file = session.origin_of_file if session is not None else {}
    found = by_file.get(filename)
    if found is None:
        found = ""
        for part, origin in _DECIDING:
            if part in filename:
                found = origin
                break
        else:
            if not (any(part in filename for part in _FRAMEWORK_PARTS) or filename.startswith(_NEUTRAL_STDLIB)
                    or filename.startswith("<frozen")):
                found = Origin.USER
        by_file[filename] = found
    return found


def is_input_op(op: str) -> bool:
    """True for tf.data's dataset and iterator ops (`MapDataset`, `IteratorGetNext`, `OptionalFromValue`...)."""
    return "Dataset" in op or "Iterator" in op or op.startswith("Optional") or op == "MapDefun"


def is_plumbing(record: Any) -> bool:
    """True for a record of plumbing (see the module's docstring): a report counts these in one line."""
    return (record.kind == Kind.REMOVED or record.op in PLUMBING_OPS
            or record.name.rpartition("/")[2].startswith("FakeSink"))


@functools.lru_cache(maxsize=4096)
def of_op(op: str, made_by: str) -> str:
    """The origin of an op of type `op` whose making code says `made_by` ("" when it said nothing)."""
    return Origin.INPUT if is_input_op(op) else made_by or Origin.USER


def of_frames(frames: Iterable[tuple[str, int]]) -> str:
    """What the code that made an op says, from its `(filename, lineno)` frames, innermost first ("" for nothing)."""
    for filename, _ in frames:
        found = _file_origin(filename)
        if found:
            return found
    return ""


def live(start: int = 1, shortcut: bool = True) -> str:
    """`of_frames()` of the live stack, from `start` frames above the caller out.

    Each code object's verdict is remembered, and, per innermost code object, how far out the
    deciding frame was and which code called it: a repeated call from the same place checks those
    two frames and is done (as `tfplace.placement.session._sources.user_line` does). `shortcut=False` reads
    every frame out to the deciding one: for callers whose innermost code is the same for every op
    (TensorFlow's op-making code), where those two frames do not tell two stacks apart.
    """
    frame = sys._getframe(start + 1)
    innermost = frame.f_code
    session = _session._current  # pylint: disable=protected-access  # `_session.current()`, inlined: it runs per op
    shortcuts = session.origin_shortcuts if session is not None else {}
    known = shortcuts.get(id(innermost)) if shortcut else None
    if known is not None:
        depth, decider, inner, verdict = known
        try:
            if sys._getframe(start + 1 + depth).f_code is decider and (
                    depth == 0 or sys._getframe(start + depth).f_code is inner):
                return verdict
        except ValueError:  # the stack is shallower this time
            pass
    verdict, depth, decider = deciding(frame)
    if shortcut and decider is not None:  # with the code of the frame just inside it
        shortcuts[_session.pin(innermost)] = (depth, decider.f_code,
                                              sys._getframe(start + depth).f_code if depth else None, verdict)
    return verdict


def deciding(frame: Optional[FrameType]) -> tuple[str, int, Optional[FrameType]]:
    """What the code that made an op says, read from `frame` out as `live()` reads it, with how many frames
    out of `frame` the deciding one is, and that frame (`("", -1, None)` when none says anything)."""
    session = _session._current  # pylint: disable=protected-access
    by_file = session.origin_of_file if session is not None else {}
    depth = 0
    while frame is not None:
        found = by_file.get(frame.f_code.co_filename)
        if found is None:
            found = _file_origin(frame.f_code.co_filename)
        if found:
            return found, depth, frame
        frame, depth = frame.f_back, depth + 1
    return "", -1, None


def requester(filename: str, lineno: int) -> str:
    """Who entered a `tf.device` scope from `filename:lineno`: the user's `"file.py:LINE"`, or the
    machinery's name (a strategy's: the one in scope, where tf.distribute's file does not say)."""
    if _file_origin(filename) == Origin.USER:
        return f"{shown_path(filename)}:{lineno}"
    if f"{_S}distribute{_S}" in filename:
        for part, name in _REQUESTERS:
            if part in os.path.basename(filename):
                return name
        from tfplace import _tensorflow  # a distribute frame: TensorFlow is loaded

        return _tensorflow.strategy_name() or "tf.distribute"
    if f"{_S}keras{_S}" in filename:
        return "Keras"
    return "TensorFlow"




def entering(frame: Optional[FrameType]) -> Optional[tuple[str, int]]:
    """(filename, lineno) of the code that entered a `tf.device` scope: the first frame from `frame`
    out that is not TensorFlow's scope plumbing (its `tf.device` and context managers, tfplace,
    contextlib); while a function is traced, read from TensorFlow's stack, which maps autograph's
    generated code back to the user's source."""
    from tfplace import _tensorflow  # entering a tf.device scope: TensorFlow is loaded

    for filename, lineno in _tensorflow.traced_stack():
        if not (filename.endswith(_SCOPE_PLUMBING) or f"{_S}tfplace{_S}" in filename):
            return filename, lineno
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.endswith(_SCOPE_PLUMBING) or f"{_S}tfplace{_S}" in filename):
            return filename, frame.f_lineno
        frame = frame.f_back
    return None


def frames_of(stack: Any) -> Iterator[tuple[str, int]]:
    """A graph op's saved stack (`Operation.traceback`, outermost first) as (filename, lineno), innermost
    first, read one frame at a time (Keras stacks are a hundred frames deep; the deciding one is near)."""
    for index in range(len(stack) - 1, -1, -1):
        frame = stack[index]
        yield frame.filename, frame.lineno
