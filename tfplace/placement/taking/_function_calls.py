"""What the op callback does with an eager op that is no plain op: a function call (what it placed, ran and
moved, and the tf.data functions its iterators instantiate), an iterator's making (its dataset's functions)
and an op on DTensor's device (the per-device functions it ran), told to the hook's listeners.

Example:
    >>> from tfplace.placement.taking import _function_calls
    >>> _function_calls.NOTHING_PLACED.functions   # what an op that is no function call places
    0
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from tensorflow.core.framework import types_pb2

from tfplace._devices import canonical_name
from tfplace._tensorflow import dtype_enum
from tfplace.placement.functions import _calls, _collected, _datasets, _dtensor, _graphs, _pipelines, _placed
from tfplace.placement.records._records import CUSTOM_DEVICE, CopyRecord, PlacementRecord
from tfplace.placement.session import _session
from tfplace.placement.session._sources import user_line
from tfplace.placement.taking import _eager, _events

__all__ = ["called", "NOTHING_PLACED"]

_ITERATING = 4096  # functions remembered as iterating a dataset they are given
_VARIANT = types_pb2.DT_VARIANT
_OP, _CUSTOM = _eager.OP, CUSTOM_DEVICE
NOTHING_PLACED = _collected.Placed()  # what an op that is no function call places (made once)


def called(hook: Any, session: _session.Session, op: str, kind: int, record: PlacementRecord, full: str,
            inputs: Sequence[Any], attrs: Any, outputs: Any) -> None:
    """The rest of `hook`'s call (a `tfplace.placement.taking._callback.Hook`) for a function call, an
    iterator's making and an op on DTensor's device: what they placed, ran and moved, and the records of the
    datasets they read, told to its listeners."""
    placed = waiting = False
    ran: Union[_collected.Placed, _collected.Later] = NOTHING_PLACED
    found: Union[_collected.Placed, _collected.Later] = NOTHING_PLACED
    copies: Sequence[CopyRecord] = ()
    later: Optional[tuple[_events.EventKey, Sequence[PlacementRecord]]] = None
    unseen = ""
    uncertain: Sequence[PlacementRecord] = ()  # records of `unseen`'s functions, where it names some
    executed: Sequence[PlacementRecord] = ()
    if kind <= _eager.FUNCTION and _CUSTOM in full:  # DTensor's device: per-device functions (`_dtensor`)
        host = _dtensor.on_host(op) if kind == _OP else ""
        if host:  # one eager op on the host, its result broadcast: no function of DTensor's ran
            executed = (record._replace(device=canonical_name(host), requested="", requested_by=""),)
        else:
            collected = _graphs.collect_dtensor(op, record.origin)
            mesh = _dtensor.after(_dtensor.key(op, attrs, inputs), collected)
            found, placed = collected.placed, collected.placed.functions > 0
            ran, copies, executed = mesh.placed, mesh.placed.transfers + mesh.arguments, mesh.executed
            kind = _eager.FUNCTION  # listeners hear of it as of a function call (its records, its runs)
    elif kind == _eager.FUNCTION:
        if _placed.is_xla(op):
            later = _events.EventKey(_events.Event.COMPILED, op, record.device), _placed.compiled_records(op, full)
            placed = True
            ran = _collected.Placed(1, later[1], runs=_placed.compiled_runs(op, full))
        else:
            found = _graphs.collect(op, _graphs.in_flight_elsewhere(session),
                                    (op, full, _calls.argument_devices(inputs)), later=hook.later)
            placed = found.functions > 0 or bool(found.unseen) or bool(session.awaited) and _graphs.awaits(session, op)
            unseen = found.unseen
            ran = _calls.after(op, full, inputs, found)
            # a call that can move tensors, whose records wait for its listeners' logs: its transfers too
            waiting = hook.later and isinstance(ran, _collected.Later) and not ran.made and ran.moves
            # the tf.data functions the call's iterators instantiate: again at every call
            copies = (() if waiting else ran.transfers) + (found.dataset_transfers if placed else ran.dataset_transfers)
            if _datasets.reading():
                _datasets.read_in_call(inputs, ran.records)
            # its iterators instantiate the dataset's functions at every call: looked up at its first call, and
            # at later ones where that found a dataset (another variant, a TensorList, needs no look-up per call)
            iterates = _session.runtime().iterating
            for tensor in inputs if placed or op in iterates else ():
                if dtype_enum(tensor) == _VARIANT:  # pylint: disable=protected-access
                    pipeline = _datasets.pipeline_of(tensor)
                    if pipeline is not None:
                        if placed and len(iterates) < _ITERATING:
                            iterates.add(op)
                        records, moved = _pipelines.iterator_placement(pipeline, full)
                        later, copies = (_events.EventKey(_events.Event.DATASET, op), records), copies + moved
                        if pipeline.unseen and not unseen:
                            unseen, uncertain = pipeline.unseen, _pipelines.uncertain_records(pipeline, full)
    elif kind == _eager.ITERATOR and inputs:
        own = tuple(_eager.function_name(attrs[i + 1]) for i in range(0, len(attrs), 2) if attrs[i] == "f")
        pipeline = _datasets.pipeline_of(inputs[0], own, iterator=inputs[1] if len(inputs) > 1 else None)
        if pipeline is not None:
            records, copies = _pipelines.iterator_placement(pipeline, full)
            later = _events.EventKey(_events.Event.DATASET, op), records
            unseen = pipeline.unseen
            uncertain = _pipelines.uncertain_records(pipeline, full) if unseen else ()
    plain = record
    if waiting:  # the call's transfers are made when its listeners' logs are read, with its line read now
        source = user_line()
        record = hook.sourced(session, record, (), source)[0]
        waited, moved = ran, tuple(copies)

        def made() -> list[CopyRecord]:
            return _eager.with_line(waited.transfers + moved, plain.op, source)

        for listener in tuple(hook.listeners):
            listener.on_op_later(record if listener.sources else plain, made)
    else:
        if hook.sources or copies:
            record, copies = hook.sourced(session, record, copies)
        for call, sources in hook.calls:  # a listener that did not ask for sources gets none
            call(record if sources else plain, copies)
    for call, sources in hook.outputs:
        call(record if sources else plain, outputs)
    if kind == _eager.FUNCTION:
        # its records, made when its listeners' logs are read
        if isinstance(found, _collected.Later) and not found.made:
            if found.functions:
                hook.records(_events.EventKey(_events.Event.PLACED, op), found)
        elif found.instantiated:
            hook.records(_events.EventKey(_events.Event.PLACED, op), found.instantiated)
        elif not placed and ran.datasets:
            hook.records(_events.EventKey(_events.Event.DATASET, op), ran.datasets)
        for listener in tuple(hook.listeners):
            listener.on_function(record, placed, ran)
    if executed:
        hook.records(_events.EventKey(_events.Event.DTENSOR, op), executed)
    if later is not None:
        hook.records(*later)
    if unseen:
        hook.records(_events.EventKey(_events.Event.UNSEEN, unseen), uncertain)
    return None
