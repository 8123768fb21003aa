"""An `XSpace` plane's events with their stats resolved: the one reader of the profiler's stat metadata
(`tfplace.placement.profile._xspace` reads host planes with it, `_gpu_planes` GPU planes), and an allocator's
event read from its stats.

Example:
    >>> from tensorflow.tsl.profiler.protobuf import xplane_pb2
    >>> plane = xplane_pb2.XPlane(name="/host:CPU")
    >>> plane.stat_metadata[1].name = "step_num"
    >>> event = xplane_pb2.XEvent(stats=[xplane_pb2.XStat(metadata_id=1, int64_value=3)])
    >>> stats(plane, event)
    {'step_num': 3}
"""

from __future__ import annotations

from typing import Any, Mapping, Union

from tfplace.placement.profile._model import Allocation

__all__ = ["StatValue", "allocation", "integer", "stats"]

StatValue = Union[int, float, str, bytes]


def _value(plane: Any, stat: Any) -> StatValue:
    kind = stat.WhichOneof("value")
    value = getattr(stat, kind) if kind else ""
    return str(plane.stat_metadata[value].name) if kind == "ref_value" else value


def stats(plane: Any, event: Any) -> dict[str, StatValue]:
    """The stats of `event` (an `XEvent` of `plane`) by name; a reference to stat metadata as the name it
    refers to (how CUPTI writes `kernel_details` and `memcpy_details`)."""
    return {plane.stat_metadata[s.metadata_id].name: _value(plane, s) for s in event.stats}


def integer(value: StatValue) -> int:
    """A stat's number (0 where it holds text)."""
    return int(value) if isinstance(value, (int, float)) else 0


def allocation(said: Mapping[str, StatValue], start: float, freed: bool) -> Allocation:
    """A `MemoryAllocation`/`MemoryDeallocation` event's stats as an `Allocation`."""
    dtype = said.get("data_type")
    return Allocation(str(said.get("allocator_name", "")), start, freed, integer(said.get("bytes_allocated", 0)),
                      integer(said.get("bytes_reserved", 0)), integer(said.get("peak_bytes_in_use", 0)),
                      integer(said.get("requested_bytes", 0)), integer(said.get("allocation_bytes", 0)),
                      integer(said.get("addr", 0)), str(said.get("tf_op", "")), str(said.get("region_type", "")),
                      dtype if isinstance(dtype, int) else None, str(said.get("shape", "")))
