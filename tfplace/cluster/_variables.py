"""The variables a task makes on other tasks (a ParameterServerStrategy coordinator's, on its ps tasks):
`recording()` is the variable creator `tfplace trace` runs a script under, `variable_name` names a handle
among them.

Example:
    >>> from tfplace.cluster import _variables
    >>> _variables.variable_name(object())   # nothing recorded for it
    ''
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from tfplace import _tensorflow
from tfplace._devices import canonical_name, local_task
from tfplace.cluster._names import task_of, tensor_bytes

__all__ = ["Variables", "recording", "variable_name", "last_recorded"]


class Variables:
    """A variable creator (`tf.variable_creator_scope`) that keeps the variables made on another task:
    name, shape, dtype, bytes and device (a ParameterServerStrategy's variables and shards on ps tasks)."""

    def __init__(self) -> None:
        self.made: list[dict[str, Any]] = []
        self.handles: dict[int, tuple[Any, str]] = {}  # id of a variable's handle -> (the handle, its name)

    def creator(self, next_creator: Any, **kwargs: Any) -> Any:
        variable = next_creator(**kwargs)
        if getattr(variable, "values", None) is None:  # a distributed variable's components come through here
            device = canonical_name(variable.device) if variable.device else ""
            if task_of(device) and task_of(device) != local_task():
                shape = tuple(variable.shape.as_list()) if variable.shape.is_fully_defined() else None
                dtype = variable.dtype.name
                self.made.append({"name": variable.name, "shape": None if shape is None else list(shape),
                                  "dtype": dtype, "bytes": tensor_bytes(dtype, shape), "device": device})
                handle = getattr(variable, "handle", None)
                if handle is not None:
                    self.handles[id(handle)] = (handle, variable.name)
        return variable


_recorded: list[Variables] = []  # the variables `tfplace trace` recorded in this process (the last run's)


@contextlib.contextmanager
def recording() -> Iterator[Variables]:
    """Records the variables the block makes on other tasks (`tfplace.cluster._collectives.section` lists them
    afterwards)."""
    variables = Variables()
    _recorded[:] = [variables]
    with _tensorflow.variable_creator_scope(variables.creator):
        yield variables


def variable_name(handle: Any) -> str:
    """The name of the variable whose handle this is, among those `recording()` kept ("" when unknown)."""
    known = _recorded[0].handles.get(id(handle)) if _recorded else None
    return known[1] if known is not None and known[0] is handle else ""


def last_recorded() -> "Variables | None":
    """What the last `recording()` of this process kept (None before any)."""
    return _recorded[0] if _recorded else None
