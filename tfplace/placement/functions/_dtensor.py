"""DTensor: the per-device functions DTensor's device runs for each op and function called on it.

An op or a `tf.function` called on DTensor's device (`/device:CUSTOM:0`) runs as one function per
device of its mesh, each called on its device from DTensor's own thread: TensorFlow's log prints
`Executing op MatMul__func_<h>_<h>_2 in device .../device:CPU:1` per device and call (and nothing
for the op on `CUSTOM:0`). TensorFlow places each instance at its first call and graph collection
reports it; as DTensor's threads place the instances at the same time, the collection may merge
them: one entry holding every instance's nodes under the same names, another holding only its
placed graph (`tfplace.placement.functions._instances.split` takes such entries apart again); `function_name()`
finds the name TensorFlow's log gives each instance; `argument_copies()` the copies TensorFlow makes of
its arguments before each call; `after()` remembers what a call with the same inputs runs, for the calls
that place nothing.

Example:
    >>> is_dtensor_device("/job:localhost/replica:0/task:0/device:CUSTOM:0"), is_dtensor_device("/device:CPU:1")
    (True, False)
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple, Sequence

from tensorflow.core.framework import types_pb2

from tfplace import _tensorflow
from tfplace._devices import canonical_name
from tfplace.placement.functions import _instances, _transfers
from tfplace.placement.ops import _kernels
from tfplace.placement.records._records import CUSTOM_DEVICE, CopyRecord, Kind, Origin, PlacementRecord
from tfplace.placement.session import _session

__all__ = ["is_dtensor_device", "function_name", "count_host_runs", "on_host", "key", "Ran", "execute_record",
           "argument_copies", "after"]

_LIMIT = 1024  # calls remembered (by op and inputs), oldest forgotten first
_HOST_RUNS = "eager_pure_optimization.hit"  # DTensor's count of ops it ran as one eager op on the host
_INNER = re.compile(r"^_func_\d+_\d+$")
_RESOURCE = types_pb2.DT_RESOURCE


def is_dtensor_device(device: str) -> bool:
    """True for DTensor's device (a custom device: `/job:localhost/replica:0/task:0/device:CUSTOM:0`)."""
    return CUSTOM_DEVICE in device


def function_name(op: str, instance: _instances.Instance) -> str:
    """The name TensorFlow's log gives the per-device function DTensor runs for `op`
    (`MatMul__func_<h>_<h>_2`): the op's name, the SPMD function it calls and DTensor's counter."""
    inner = next((n.attr["f"].func.name for n in instance.pre_optimization_graph.node
                  if "f" in n.attr and _INNER.match(n.attr["f"].func.name)), "")
    if not inner:
        return f"{op}__func"
    prefix = f"{op}_{inner}_"
    numbered = [name for name in _tensorflow.function_names() if name.startswith(prefix)
                and name[len(prefix):].isdigit()]
    return max(numbered, key=lambda name: int(name[len(prefix):])) if numbered else prefix.rstrip("_")


def count_host_runs(session: _session.Session) -> None:
    """Notes how many ops DTensor's device ran on the host so far, when a capture session starts."""
    session.dtensor_host_runs = _tensorflow.dtensor_stats().get(_HOST_RUNS, 0)


def on_host(op: str) -> str:
    """Where DTensor ran the op it just ran as one eager op on the mesh's host, then broadcast its
    result (ops of constant inputs with a replicated layout: `tf.zeros` under `call_with_layout`);
    "" when it ran per-device functions. TensorFlow logs `Executing op Fill in device .../CPU:0` for it."""
    stats = _tensorflow.dtensor_stats()
    session = _session.current()
    hits = stats.get(_HOST_RUNS, 0)
    if session is None:
        return ""
    with session.lock:
        before, session.dtensor_host_runs = session.dtensor_host_runs, hits
    if hits <= before:
        return ""
    prefix = f"kernel_cache.__wrapped__{op}_device_"
    return next((name[len(prefix):-len(".size")] for name in stats if name.startswith(prefix)),
                "/job:localhost/replica:0/task:0/device:CPU:0")


def key(op: str, attrs: Any, inputs: Sequence[Any]) -> tuple:
    """What DTensor keys its per-device functions on: the op, its attributes and its inputs'
    layouts (shapes included), or devices for inputs that are not DTensors."""
    try:
        hash(attrs)
    except TypeError:  # a list-valued attribute
        attrs = repr(attrs)
    described = []
    for tensor in inputs:
        device = tensor.device
        described.append(_tensorflow.dtensor_layout(tensor) + repr(_tensorflow.shape_tuple(tensor))
                         if is_dtensor_device(device) else device)
    return (op, attrs, tuple(described))


class Ran(NamedTuple):
    """What one call on DTensor's device runs: the nodes, transfers and node runs of its per-device
    functions (`_collected.Placed`, transfers named after each instance), their calls ("execute"
    records on the mesh's devices, as TensorFlow's log prints them from DTensor's threads) and the
    copies of their arguments before those calls (`argument_copies`)."""

    placed: Any
    executed: tuple[PlacementRecord, ...] = ()
    arguments: tuple[CopyRecord, ...] = ()


def execute_record(name: str, device: str, origin: str) -> PlacementRecord:
    """The "execute" record of one call of a per-device function (a function call: `is_function_call`)."""
    return PlacementRecord(name, "", canonical_name(device), Kind.EXECUTE, origin=origin or Origin.USER)


def argument_copies(name: str, instance: _instances.Instance) -> tuple[CopyRecord, ...]:
    """The copies TensorFlow makes before each call of the per-device function `name` (`instance`):
    DTensor gives an instance its arguments on the instance's device, and an argument TensorFlow
    placed elsewhere (DTensor's int32 `device_id`, kept in host memory) is copied there first; the
    "warn" policy logs `before computing <name> input #0 was expected to be on .../CPU:0 but is
    actually on .../CPU:1`."""
    graph = instance.post_optimization_graph
    here = canonical_name(instance.device)
    moved = [(node.attr["index"].i, canonical_name(node.device), node.attr["T"].type, node.name)
             for node in graph.node if node.op == "_Arg" and node.device
             and node.attr["T"].type != _RESOURCE and canonical_name(node.device) != here]
    sizes = _tensorflow.static_sizes(graph, {f"{arg}:0" for *_, arg in moved}) if moved else {}
    return tuple(CopyRecord(name, index, here, there, dtype=_kernels.dtype_name(dtype),
                            bytes=_transfers.bytes_of(sizes.get(f"{arg}:0"), _kernels.dtype_name(dtype)))
                 for index, there, dtype, arg in sorted(moved))


def after(call_key: tuple, ran: Ran) -> Ran:
    """What the call keyed `call_key` ran: `ran` when it placed functions now (remembered for later
    calls with the same key), else what an earlier call with that key ran (`ran` when none did)."""
    runtime = _session.runtime()
    with runtime.lock:
        known = runtime.dtensor
        if ran.placed.functions:
            known.pop(call_key, None)
            known[call_key] = ran
            if len(known) > _LIMIT:
                del known[next(iter(known))]
            return ran
        return known.get(call_key, ran)
