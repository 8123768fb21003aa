"""An `XSpace` plane's events with their stats resolved: the one reader of the profiler's stat metadata
(`tfplace.placement.profile._xspace` reads host planes with it, `_gpu_planes` GPU planes).

Example:
    >>> from tensorflow.tsl.profiler.protobuf import xplane_pb2
    >>> plane = xplane_pb2.XPlane(name="/host:CPU")
    >>> plane.stat_metadata[1].name = "step_num"
    >>> event = xplane_pb2.XEvent(stats=[xplane_pb2.XStat(metadata_id=1, int64_value=3)])
    >>> stats(plane, event)
    {'step_num': 3}
"""

from __future__ import annotations

from typing import Any, Union

__all__ = ["StatValue", "stats"]

StatValue = Union[int, float, str, bytes]


def _value(plane: Any, stat: Any) -> StatValue:
    kind = stat.WhichOneof("value")
    value = getattr(stat, kind) if kind else ""
    return str(plane.stat_metadata[value].name) if kind == "ref_value" else value


def stats(plane: Any, event: Any) -> dict[str, StatValue]:
    """The stats of `event` (an `XEvent` of `plane`) by name; a reference to stat metadata as the name it
    refers to (how CUPTI writes `kernel_details` and `memcpy_details`)."""
    return {plane.stat_metadata[s.metadata_id].name: _value(plane, s) for s in event.stats}
