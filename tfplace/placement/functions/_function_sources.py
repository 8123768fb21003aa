"""The user's line behind each node of the functions traced while a `sources=True` capture is open.

TensorFlow keeps the Python stack of every graph op it creates (`Operation.traceback`).
While watching, each FuncGraph that becomes a function (`tf.function`s, Keras steps, their
gradients, `cond`/`while` bodies, `tf.data` functions: all go through
`atomic_function.from_func_graph`) leaves, per node, the first frame outside TensorFlow,
Keras and tfplace: the line of user code that created it (a Keras layer's MatMul gets the
line that called the layer). An `Identity` gets a line only when the user's code made it
itself (`tf.identity`): one that TensorFlow's or Keras' code made (a strategy's copy to a
replica) has none, so that only the user's copies count as explicit transfers. Each node's origin is
read as TensorFlow makes its op, from the live stack (the op callback's graph branch, where each code
object's verdict is known after its first op): reading a saved stack of a Keras step's hundred frames
per node was most of what a capture added to tracing. `node_sources()` hands them to the records of placed nodes,
through their `origin` (see `tfplace.placement.functions._lowering`). Nothing is patched or kept while no
sources capture is open.

Example:
    >>> import tensorflow as tf
    >>> from tfplace.placement.functions import _function_sources
    >>> with _function_sources.watching():
    ...     f = tf.function(lambda x: x * 2.0).get_concrete_function(tf.TensorSpec([2]))
    >>> _function_sources.lines(f.name.decode())["mul"].startswith("<doctest")
    True
"""

from __future__ import annotations

import contextlib
import os
from types import FrameType
from typing import Any, Iterator, Mapping, NamedTuple, Optional, Sequence

from tfplace import _tensorflow
from tfplace.placement.functions._lowering import PlacerNode
from tfplace.placement.records import _origins
from tfplace.placement.records._records import Origin
from tfplace.placement.session import _session
from tfplace.placement.session._sources import AUTOGRAPH, live_line, stack_user_line, user_frame
from tfplace.placement.session._session import Parameters

__all__ = ["Note", "watching", "watched", "traced_parameters", "lines", "notes", "notes_of_graph",
           "functions_with_nodes", "node_notes", "identity_line", "made_in_graph"]

_LIMIT = 4096  # functions remembered (oldest forgotten first)
_IDENTITIES = frozenset({"Identity", "IdentityN"})
_GRADIENTS = ("gradient_tape", "gradients")


class Note(NamedTuple):
    """What the code that made a node says about it.

    Attributes:
      line: `"file.py:LINE"` of the user's code that made it ("" when unknown or not asked for).
      origin: "user", "input" or "framework" (`tfplace.placement.records._origins`).
      requested_by: who entered the `tf.device` scope that asked for its device ("" when none did).
    """

    line: str = ""
    origin: str = ""
    requested_by: str = ""


_NONE = Note()
# How many blocks watch, and how many want every node's line, is the capture session's
# (`tfplace.placement.session._session`: `watchers`, `line_watchers`); the notes of the functions traced
# while one watched outlive it, as the functions do (`_session.runtime()`: `lines`, function name ->
# node name -> its note; `by_nodes`, a function's node names, arguments left out -> the names of the
# functions traced with them, oldest first: `tf.function(lambda x: x * 2.0)` twice gives two).


# What the live stack says of an identity that no user's code made (so it is no explicit copy of the user's).
_NOT_USERS = (Origin.FRAMEWORK, Origin.INPUT)
# TensorFlow's modules that make ops on behalf of the code calling them (`tf.identity` and the like).
_OP_MAKERS = tuple(f"{os.sep}tensorflow{os.sep}python{os.sep}{part}{os.sep}"
                   for part in ("ops", "framework", "util", "eager", "autograph"))


def _made_by_caller(stack: Any) -> bool:
    """True if the first frame outside TensorFlow's op-making modules, from the innermost out, is
    the user's: the op is the user's own `tf.identity`, not one a strategy's or Keras' code made."""
    for index in range(len(stack) - 1, -1, -1):  # one frame at a time: the deciding one is near the op
        frame = stack[index]
        if not any(part in frame.filename for part in _OP_MAKERS):
            return bool(stack_user_line([frame]))
    return False


def identity_line(op_type: str, frame: Optional[FrameType]) -> Optional[str]:
    """The user's line of a traced op, read from the live stack as it is made (`frame`: the frame that made
    it; `live_line`): for an `Identity` that TensorFlow's or Keras' code made rather than the user's (the
    first frame outside TensorFlow's op-making modules is not the user's), "" (no explicit copy of the
    user's); None where only the op's saved stack can tell (autograph's generated code)."""
    line = live_line(frame)
    if line and op_type in _IDENTITIES:
        while frame is not None and any(part in frame.f_code.co_filename for part in _OP_MAKERS):
            frame = frame.f_back
        if frame is None or user_frame(frame)[0] != 0:
            return ""
    return line


def made_in_graph(session: Any, graph: Any, name: str, op_type: str, frame: Optional[FrameType]) -> None:
    """Keeps who made node `name` of `graph` as the op callback sees it traced (`frame`: the op's maker, read
    from the live stack), and its user's line where line watchers want it (`notes` reads them)."""
    made = session.made_by.get(graph)
    if made is None:
        made = session.made_by.setdefault(graph, {})
    made[name] = _origins.live(2, shortcut=False)
    if session.line_watchers:
        lines = session.lines_made.get(graph)
        if lines is None:
            lines = session.lines_made.setdefault(graph, {})
        lines[name] = identity_line(op_type, frame)


def _notes(operations: Sequence[tuple[Any, str, str]], lines: Mapping[str, str],
           said: Mapping[str, str]) -> dict[str, Note]:
    """Each op's line, origin and who asked for its device (`tfplace.placement.records._origins`); a gradient
    op (`gradient_tape/dense/MatMul/MatMul_1`) takes the origin of the op it differentiates. `operations`:
    (op, name, type) of each; `said`: what the code that made an op says, where the op callback read it as
    the op was made (else its saved stack)."""
    made: dict[str, str] = {}
    notes: dict[str, Note] = {}
    kept: dict[tuple, Note] = {}  # one Note per (line, origin, requester): most nodes share a few
    for op, name, op_type in operations:
        found = said.get(name)
        if found is None:
            stack = op.traceback  # None for an op made without a Python stack
            found = _origins.of_frames(_origins.frames_of(stack)) if stack is not None else ""
        made[name] = found
        scopes = _tensorflow.device_scopes(op) if op.device else []
        key = (lines.get(name, ""), _origins.of_op(op_type, found), _origins.requester(*scopes[-1]) if scopes else "")
        note = kept.get(key)
        if note is None:
            note = kept[key] = Note(*key)
        notes[name] = note
    for name, note in notes.items():
        head, slash, rest = name.partition("/")
        if slash and head.startswith(_GRADIENTS) and not _origins.is_input_op(name):
            forward = rest
            while forward and forward not in made:
                forward = forward.rpartition("/")[0]
            if forward:
                notes[name] = note._replace(origin=notes[forward].origin)
    return notes


def _remember(name: str, graph: Any) -> None:
    operations = [(op, op.name, op.type) for op in graph.get_operations()]  # (each a call into TensorFlow: read once)
    found = {}
    session = _session.current()
    every = session is not None and session.line_watchers > 0  # else only the identities: whether each is
    # the user's explicit copy
    said = session.made_by.get(graph, {}) if session is not None else {}
    lines = session.lines_made.get(graph, {}) if session is not None else {}  # as the op callback read them
    for op, op_name, op_type in operations:
        if not every and (op_type not in _IDENTITIES or said.get(op_name) in _NOT_USERS):
            continue  # (an identity the machinery made, as the live stack said: no explicit copy of the user's)
        line = lines.get(op_name)  # as the op callback read it from the live stack (`identity_line`)
        if line is None:  # else from its saved stack, TensorFlow's frames left out
            stack = op.traceback  # None for an op made without a Python stack
            line = stack_user_line(_unconverted(stack.get_user_frames())) if stack is not None else ""
            if line and op_type in _IDENTITIES and (stack is None or not _made_by_caller(stack)):
                line = ""  # a copy TensorFlow's or Keras' own code made: not the user's explicit copy
        if line:
            found[op_name] = line
    notes = _notes(operations, found, said)
    runtime = _session.runtime()
    with runtime.lock:
        if len(runtime.lines) >= _LIMIT:
            del runtime.lines[next(iter(runtime.lines))]
        runtime.lines[name] = notes
        if len(runtime.by_nodes) >= _LIMIT:
            del runtime.by_nodes[next(iter(runtime.by_nodes))]
        same = runtime.by_nodes.setdefault(tuple(sorted(op_name for _, op_name, op_type in operations
                                                        if op_type != "Placeholder")), [])
        same.append(name)
        del same[:-_LIMIT]


class _Frame(NamedTuple):
    filename: str
    lineno: int


def _unconverted(frames: Sequence[Any]) -> Sequence[Any]:
    """`frames` with each of autograph's generated code replaced by the user's line it was made from, where
    TensorFlow left it unmapped (a replica's function under a strategy)."""
    if not any(AUTOGRAPH in frame.filename for frame in frames):
        return frames
    mapped = []
    for frame in frames:
        for _ in range(8):  # a function defined inside a converted one was converted from generated code
            if AUTOGRAPH not in frame.filename:
                break
            origin = _tensorflow.autograph_origin(frame.filename, frame.lineno)
            if origin is None:
                break
            frame = _Frame(*origin)
        mapped.append(frame)
    return mapped


def _from_func_graph(name: Any, graph: Any, *args: Any, **kwargs: Any) -> Any:
    """`atomic_function.from_func_graph` while watching: the function, its nodes' lines remembered."""
    function = _tensorflow.FROM_FUNC_GRAPH.original(name, graph, *args, **kwargs)
    made = function.name
    made = made.decode() if isinstance(made, bytes) else str(made)
    _remember(made, graph)
    parameters = _tensorflow.traced_parameters(args, kwargs)
    if parameters:
        runtime = _session.runtime()
        with runtime.lock:
            if len(runtime.parameters) >= _LIMIT:
                del runtime.parameters[next(iter(runtime.parameters))]
            runtime.parameters[made] = parameters
    return function


@contextlib.contextmanager
def watching(every_line: bool = True) -> Iterator[None]:
    """Remembers the lines of the functions traced in the block (nested and threaded blocks share one
    patch); with `every_line=False`, only those of `Identity` nodes the user's code made (what tells
    an explicit copy apart, at a fraction of the cost), unless another block watches every line."""
    with _session.hold() as session:
        with session.lock:
            session.watchers += 1
            session.line_watchers += every_line
            if session.watchers == 1:
                _tensorflow.FROM_FUNC_GRAPH.install(_from_func_graph)
        try:
            yield
        finally:
            with session.lock:
                session.watchers -= 1
                session.line_watchers -= every_line
                if session.watchers == 0:
                    _tensorflow.FROM_FUNC_GRAPH.remove()


def traced_parameters() -> Mapping[str, Parameters]:
    """Function (e.g. "__inference_step_12") -> (name, what its trace held it to) per parameter: a tensor's
    `TensorSpec`, a Python value's `Literal[...]` (what tells which argument made a function trace again)."""
    return _session.runtime().parameters


def watched() -> bool:
    """True once any function was watched (until then there are no notes to look up)."""
    return bool(_session.runtime().lines)


def notes(function: str) -> Mapping[str, Note]:
    """Node name -> `Note` of `function` (e.g. "__inference_f_12"), empty if it was not watched."""
    return _session.runtime().lines.get(function, {})


def lines(function: str) -> dict[str, str]:
    """Node name -> `"file.py:LINE"` of `function`'s nodes that have one."""
    return {name: note.line for name, note in notes(function).items() if note.line}


def notes_of_graph(node_names: Sequence[str], called: str = "") -> Mapping[str, Note]:
    """`notes()` of the watched function whose nodes (arguments and results left out) are `node_names`:
    the function `called` (the function call that placed the graph) when it has those nodes or no watched
    function has them, else the one traced last with them."""
    runtime = _session.runtime()
    names = runtime.by_nodes.get(tuple(sorted(node_names)), [])
    if not names and called in runtime.lines:  # the placed graph's nodes differ from the traced ones' (a captured
        return runtime.lines[called]  # constant the runtime lifted into an argument: `Gather/indices`)
    name = called if called in names else names[-1] if names else ""
    return runtime.lines.get(name, {}) if name else {}


def functions_with_nodes(node_names: Sequence[str]) -> list[str]:
    """The watched functions whose nodes (arguments and results left out) are `node_names`, oldest first."""
    return list(_session.runtime().by_nodes.get(tuple(sorted(node_names)), ()))


def node_notes(nodes: Sequence[PlacerNode], top: Mapping[str, Note],
               known: Optional[Mapping[str, Mapping[str, Note]]] = None) -> list[Note]:
    """The note of each placer node: through its origin (`top` holds the notes of the graph's own
    nodes; `known`, those of the functions it inlines, by function: every watched function's by default);
    a node the lowering passes added takes the note of the node whose name prefixes its own
    (`cond/switch_pred/_2` that of `cond`, `Func/call/input/_0` that of `call`)."""
    by_name: dict[str, Note] = {}
    found = []
    known = _session.runtime().lines if known is None else known
    for node in nodes:
        function, colon, name = node.origin.rpartition(":")
        note = (known.get(function, {}).get(name, _NONE) if colon else top.get(node.origin, _NONE)) \
            if node.origin else _NONE
        prefix = node.name[5:] if node.name.startswith("Func/") else node.name
        while prefix and note is _NONE and not node.origin:
            note = by_name.get(prefix) or top.get(prefix, _NONE)
            prefix = prefix.rpartition("/")[0]
        if note is not _NONE:
            by_name[node.name] = note
        found.append(note)
    return found
