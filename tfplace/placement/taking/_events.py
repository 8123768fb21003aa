"""What the op callback tells its listeners (`tfplace.placement.taking._hooks.listening`): the `Listener`
protocol and the keys of its `on_records` events.

Example:
    >>> from tfplace.placement.taking._events import Event, EventKey
    >>> key = EventKey(Event.COMPILED, "__inference_f_12", "/device:CPU:0")
    >>> key.event == "compiled", key.about
    (True, '__inference_f_12')
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, Sequence

from tfplace.placement.records._records import CopyRecord, PlacementRecord

if TYPE_CHECKING:
    from tfplace.placement.functions._collected import Placed

__all__ = ["Listener", "CountingListener", "Event", "EventKey"]


class Listener(Protocol):
    """What `listening()` calls. A listener whose class says `copies_only = True` (a transfer guard) is not
    called for an eager op that copies nothing, while every listener of the thread says so. While every
    listener of the thread says `later = True` (a capture that counts no memory), a placed function's records
    and node runs come as a `tfplace.placement.functions._collected.Later` (made when read), and a call that can move
    tensors comes to `on_op_later(record, copies)`, `copies` a function that makes its transfers."""

    sources: bool
    all_threads: bool

    def on_op(self, record: PlacementRecord, copies: Sequence[CopyRecord]) -> None:
        ...

    def on_function(self, record: PlacementRecord, placed: bool, call: "Placed") -> None:
        ...

    def on_records(self, key: EventKey, records: Sequence[PlacementRecord]) -> None:
        ...


class CountingListener(Listener, Protocol):
    """A listener whose class says `memory = True` (a capture that counts memory): it is also handed the
    tensors each eager op returns."""

    def on_outputs(self, record: PlacementRecord, outputs: Any) -> None:
        ...


class Event(str, enum.Enum):
    """What `on_records` hands a listener (see the module's docstring)."""

    PLACED = "placed"
    COMPILED = "compiled"
    DATASET = "dataset"
    FAILED = "failed"
    UNSEEN = "unseen"
    SESSION = "session"
    DTENSOR = "dtensor"


class EventKey(NamedTuple):
    """Names one `on_records` event: `event`, what it is `about` (a function's name, an error's id,
    a reason) and, for compiled functions, the `device` they ran on."""

    event: Event
    about: Any
    device: str = ""
