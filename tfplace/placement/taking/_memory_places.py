"""What tells each allocator event its device and line (`places`: the block's placement records and the runs of its
eager ops and calls), and what the allocators in force leave unseen on a device (`coverage`).

Example:
    >>> coverage("/device:CPU:0", allocators=[], cpus=["/device:CPU:0"], compiled=False).split(" (")[0]
    'allocations inside functions'
"""

from __future__ import annotations

from typing import Collection, Sequence

from tfplace._devices import parse_device
from tfplace._names import is_function_call
from tfplace.placement.profile._model import CallRun, Timing
from tfplace.placement.records._memory_held import Places, allocator_devices
from tfplace.placement.records._records import Kind, PlacementRecord

__all__ = ["places", "coverage"]


def places(timing: Timing, records: Sequence[PlacementRecord], cpus: tuple[str, ...],
            variables: frozenset[tuple[str, str, int]]) -> tuple[Places, list[float]]:
    """What tells each allocation its line, and the starts of the calls of the function called most."""
    nodes = {r.name: (r.device, r.source, r.op) for r in records if r.name and r.kind in (Kind.PLACE, Kind.COMPILED)}
    eager_records = [r for r in records if r.kind == Kind.EXECUTE and not is_function_call(r.op)]
    eager = sorted((run.start_us, run.start_us + run.duration_us, eager_records[run.eager_index].device,
                    eager_records[run.eager_index].source, eager_records[run.eager_index].op)
                   for run in timing.runs if 0 <= run.eager_index < len(eager_records))
    calls_of: dict[str, list[PlacementRecord]] = {}
    for record in records:
        if record.kind == Kind.EXECUTE and is_function_call(record.op):
            calls_of.setdefault(record.op, []).append(record)
    runs_of: dict[str, list[CallRun]] = {}
    for call in sorted(timing.calls):
        runs_of.setdefault(call.function, []).append(call)
    calls = sorted((run.start_us, run.start_us + run.duration_us, run.function, record.source)
                   for function, runs in runs_of.items() for run, record in zip(runs, calls_of.get(function, ())))
    most = max(runs_of.values(), key=len, default=[])
    return Places(nodes, eager, calls, variables, cpus), [run.start_us for run in most]


def coverage(device: str, allocators: Collection[str], cpus: Sequence[str], compiled: bool) -> str:
    """What the allocators whose events the profile holds (`allocators`) left unseen on `device`, one of the
    logical CPUs `cpus` or another device, and how to see it ("" when nothing); `compiled`: XLA ran there."""
    seen = any(device in allocator_devices(allocator, cpus) for allocator in allocators)
    said = []
    bfc = ("set TF_CPU_ALLOCATOR_USE_BFC=1 before TensorFlow starts to see every one (tfplace trace --memory "
           "does; configure(cpu_allocator=\"bfc\"))")
    if parse_device(device).device_type == "CPU":
        if "mklcpu" in allocators and not {"bfc_cpu_allocator_for_gpu", "cpu"}.intersection(allocators):
            said.append(f"allocations under 256 KiB (oneDNN's allocator mklcpu reports larger ones only): {bfc}")
        elif not seen:
            said.append("allocations inside functions (the CPU allocator in force reports none; with "
                        f"TF_ENABLE_ONEDNN_OPTS=0 only a BFC allocator does): only what eager ops and calls returned "
                        f"is counted; {bfc}")
        elif len(cpus) > 1:
            said.append("which logical CPU an allocation no node names belongs to (the logical CPUs share one "
                        "allocator): counted on the first")
    elif not seen:
        said.append("allocations inside functions: the profiler wrote no events of this device's allocator")
    if compiled:
        said.append("the buffers inside XLA clusters (a compiled cluster shows as one allocation)")
    return "; ".join(said)
