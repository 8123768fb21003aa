"""What each call of a function runs, remembered from when TensorFlow placed it.

TensorFlow places a function once per device it is called on (and per set of
devices holding its arguments), at its first call; graph collection reports its
nodes and transfers then (`tfplace.placement.functions._graphs.collect`). Every later call
runs the same nodes and the same transfers, so guards and captures opened after
that first call still see what each call moves. A function first placed while
nothing collected is unknown here: its calls report nothing (and a capture says
its log is incomplete).

Example:
    >>> from tfplace.placement.functions import _calls, _collected
    >>> ran = _calls.after("__inference_never_called_1", "/job:localhost/replica:0/task:0/device:CPU:0", [],
    ...                    _collected.Placed())
    >>> ran.functions, ran.records, ran.transfers
    (0, (), ())
"""

from __future__ import annotations

from typing import Any, Sequence, Union

from tfplace.placement.functions._collected import Later, Placed
from tfplace.placement.session import _session

__all__ = ["after", "argument_devices"]

_LIMIT = 1024  # (function, device) pairs remembered, oldest forgotten first
# What each call runs is a fact of TensorFlow's runtime, which outlives captures: kept in
# `_session.runtime().calls`, (function, device) -> argument devices -> Placed.


def _merged(old: Union[Placed, Later], new: Union[Placed, Later]) -> Placed:
    """`old` with what a later call placed (a branch function TensorFlow instantiates when first taken)."""
    runs = dict(old.runs)
    for key, count in new.runs:
        runs[key] = runs.get(key, 0) + count
    return Placed(old.functions + new.functions, old.records + new.records, old.transfers + new.transfers,
                  tuple(runs.items()), dataset_transfers=old.dataset_transfers + new.dataset_transfers,
                  datasets=old.datasets + new.datasets)


def argument_devices(inputs: Sequence[Any]) -> tuple[str, ...]:
    """Where each argument's memory is: with the function and device, what TensorFlow places a function for."""
    return tuple(tensor.backing_device for tensor in inputs)


def after(function: str, device: str, inputs: Sequence[Any], found: Union[Placed, Later]) -> Union[Placed, Later]:
    """What the call of `function` on `device` (full name) with `inputs` just ran, given what
    `collect()` found after it (`found`: what TensorFlow placed for this call, if anything)."""
    key = (function, device)
    if found.functions:
        devices = argument_devices(inputs)
        runtime = _session.runtime()
        with runtime.lock:
            known = runtime.calls
            entries = known.pop(key, {})
            old = entries.get(devices)
            entries[devices] = found if old is None else _merged(old, found)
            known[key] = entries
            if len(known) > _LIMIT:
                del known[next(iter(known))]
        return entries[devices]
    cached = _session.runtime().calls.get(key)
    if not cached:
        return found
    if len(cached) == 1:
        return next(iter(cached.values()))
    return cached.get(argument_devices(inputs), found)
