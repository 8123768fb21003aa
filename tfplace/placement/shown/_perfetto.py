"""A placement log as a timeline: Chrome's Trace Event Format, which Perfetto's UI and `chrome://tracing` open.

Written with the standard library (`json`, `gzip`): the format is a JSON object whose `traceEvents`
are dictionaries, documented by Chrome ("Trace Event Format", the `X`, `s`/`f`, `C` and `M` phases).

* One process per device, named by its canonical name (sorted as the devices are); its threads:
  "ops" (eager ops and function calls), "function nodes" (the nodes a call's first run placed on
  that device, one slice per call and device), "transfers" (a slice per implicit transfer sent from
  or received on the device).
* Times are sequence numbers, not time: the k-th op of the block starts at `10 k` and lasts 8
  (`otherData.clock` says so); slices on one thread follow each other, a call's node slice lies
  within the call's step.
* With timing, a process "steps" first: a slice per step found (`log.steps()`, warm-up steps named so) with
  its phases in µs, and below it the step's phases laid end to end (their lengths, not their order in time).
* Each implicit transfer is a flow arrow (`s` then `f`, one id) from a "send" slice on the producing
  device to a "receive" slice on the consuming one, with its bytes.
* With `memory=True`, a counter "live bytes" per device (the census's eager tensors and variables); with a profile
  too, "bytes in use" per device on the profiler's clock: the allocators' events replayed as `log.memory()` does
  (requested bytes, from what each allocator held before; the logical CPUs' shared allocators counted on the
  first CPU), one value per time. It replaces "live bytes" on a device where it reached the census's peak.

Example:
    >>> from tfplace.placement.records._records import CopyRecord, PlacementRecord
    >>> add = PlacementRecord("AddV2", "", "/device:CPU:1", "execute", source="train.py:7")
    >>> copy = CopyRecord("AddV2", 0, "/device:CPU:0", "/device:CPU:1", bytes=16)
    >>> events = trace_events([add], [copy], [0])["traceEvents"]
    >>> [(e["ph"], e["name"]) for e in events if e["ph"] in "Xsf"]  # doctest: +NORMALIZE_WHITESPACE
    [('X', 'AddV2'), ('X', 'send AddV2 input #0'), ('s', 'transfer'), ('X', 'receive AddV2 input #0'),
     ('f', 'transfer')]
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from typing import Any, Iterable, Optional, Sequence

from tfplace import _files
from tfplace.placement.records._records import Kind, input_label
from tfplace._names import is_function_call
from tfplace.placement.profile._model import Allocation, Move, Timing
from tfplace.placement.records._memory_held import in_use

__all__ = ["trace_events", "merge_tasks", "write", "STEP"]

STEP = 10  # sequence units per op: a slice lasts 8, so neighbours never touch
_OPS, _NODES, _TRANSFERS = 1, 2, 3
_UNKNOWN = "(device unknown)"
_TIMED = ("TensorFlow's profiler: microseconds from the block's first event; each op at its kernel's start and "
          "duration, a lane per overlap on a device")
_THREADS = {_OPS: "ops", _NODES: "function nodes", _TRANSFERS: "transfers"}
_STEPS = "steps"  # the steps' process, sorted first
_CLOCK = ("sequence: the k-th op of the block starts at 10 k and lasts 8; the order is TensorFlow's, the "
          "times are not (capture with timing=True, or tfplace trace --timing, for busy time per device)")


def _device_key(device: str) -> tuple:
    if device == _STEPS:
        return ("",)
    head, _, index = device.rpartition(":")
    return (head, int(index) if index.isdigit() else 0)


class _Timeline:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.pids: dict[str, int] = {}
        self.flows = 0

    def pid(self, device: str) -> int:
        device = device or _UNKNOWN
        if device not in self.pids:
            self.pids[device] = len(self.pids) + 1
        return self.pids[device]

    def slice(self, device: str, tid: int, name: str, ts: float, dur: float, category: str,
              args: dict[str, Any]) -> None:
        self.events.append({"ph": "X", "name": name, "cat": category, "pid": self.pid(device), "tid": tid,
                            "ts": ts, "dur": dur, "args": {k: v for k, v in args.items() if v not in ("", None)}})

    def arrow(self, source: str, target: str, name: str, args: dict[str, Any], sent: tuple[float, float, int],
              received: tuple[float, float, int]) -> None:
        """A transfer: a "send" slice on `source` and a "receive" slice on `target` ((start, duration, tid)
        each), joined by a flow arrow from the middle of one to the middle of the other."""
        self.flows += 1
        for device, label, phase, (start, duration, tid) in ((source, "send", "s", sent),
                                                              (target, "receive", "f", received)):
            self.slice(device, tid, f"{label}{name}", start, duration, "transfer", args)
            flow = {"ph": phase, "name": "transfer", "cat": "transfer", "id": self.flows, "pid": self.pid(device),
                    "tid": tid, "ts": start + duration / 2}
            self.events.append(dict(flow, bp="e") if phase == "f" else flow)

    def metadata(self) -> list[dict[str, Any]]:
        found = []
        for order, device in enumerate(sorted(self.pids, key=_device_key)):
            pid = self.pids[device]
            found += [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": device}},
                      {"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": order}}]
            used = sorted({e["tid"] for e in self.events if e["pid"] == pid and "tid" in e}
                          | (set() if device == _STEPS else set(_THREADS)))
            found += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                       "args": {"name": ("steps", "phases, end to end")[tid - 1] if device == _STEPS else _thread(tid)}}
                      for tid in used]
        return found


def _thread(tid: int) -> str:
    if tid in _THREADS:
        return _THREADS[tid]
    return f"ops, lane {tid - 10}" if tid < 50 else f"function calls, lane {tid - 50}" if tid < 100 else \
        f"transfers, lane {tid - 100}"


def _copy_args(copy: Any) -> dict[str, Any]:
    return {"bytes": copy.bytes, "from": copy.from_device, "to": copy.to_device, "op": copy.op, "kind": copy.kind,
            "function": copy.function, "node": copy.node, "tensor": copy.tensor, "dtype": copy.dtype,
            "line": copy.source or copy.call, "in_loop": copy.in_loop or None}


def _record_args(record: Any) -> dict[str, Any]:
    return {"op": record.op, "node": record.name, "kind": record.kind, "device": record.device,
            "origin": record.origin, "line": record.source, "requested": record.requested,
            "requested_by": record.requested_by, "dtypes": dict(record.dtypes) or None}


def _free(ends: list[float], start: float, end: float) -> int:
    """The first lane (by the end of its last slice, `ends`) free at `start`, taken until `end`."""
    for lane, last in enumerate(ends):
        if last <= start:
            ends[lane] = end
            return lane
    ends.append(end)
    return len(ends) - 1


def _lanes(intervals: list[tuple[float, float, Any]]) -> list[tuple[int, float, float, Any]]:
    """Each (start, end, item) on the first lane free at its start (lane 0, 1, ...): a lane's slices follow
    each other, never overlapping."""
    ends: list[float] = []
    placed = []
    for start, end, item in sorted(intervals, key=lambda i: (i[0], i[1])):
        lane = _free(ends, start, end)
        placed.append((lane, start, end, item))
    return placed


def _record_times(records: Sequence[Any], timing: Timing, origin: float) -> list[Optional[tuple[float, float]]]:
    """Per record, its (start, end) on the profiler's clock from `origin`, where the profile saw it: an eager
    op's kernel, a function call's run (the k-th call of a function is its k-th record)."""
    times: list[Optional[tuple[float, float]]] = [None] * len(records)
    eager = [i for i, r in enumerate(records) if r.kind == Kind.EXECUTE and not is_function_call(r.op)]
    for run in timing.runs:
        if 0 <= run.eager_index < len(eager) and times[eager[run.eager_index]] is None:
            times[eager[run.eager_index]] = (run.start_us - origin, run.start_us - origin + max(run.duration_us, 0.001))
    calls: dict[str, list[int]] = {}
    for i, record in enumerate(records):
        if record.kind == Kind.EXECUTE and is_function_call(record.op):
            calls.setdefault(record.op, []).append(i)
    taken: Counter = Counter()
    for start, duration, function in timing.calls:  # a CallRun
        known = calls.get(function, [])
        if taken[function] < len(known):
            times[known[taken[function]]] = (start - origin, start - origin + max(duration, 0.001))
        taken[function] += 1
    return times


def _matched(copies: Sequence[Any], copy_slots: Sequence[int], moves: list[Move],
             times: list[Optional[tuple[float, float]]]) -> dict[int, Any]:
    """Profile transfer (index in `moves`) -> the log's copy it is: each copy takes the unused transfer of its
    direction that ended nearest before its consumer started (else the nearest after), so that every copy the
    log knows carries its bytes and line even where the profile saw more (a variable's initial value)."""
    found: dict[int, Any] = {}
    for copy, slot in sorted(zip(copies, copy_slots), key=lambda pair: pair[1]):
        at = times[slot] if 0 <= slot < len(times) else None
        free = [k for k, move in enumerate(moves)
                if k not in found and (move.source, move.target) == (copy.from_device, copy.to_device)]
        if not free:
            continue
        if at is None:
            best = free[0]
        else:
            before = [k for k in free if moves[k].start_us <= at[0] + 1e-3]
            best = (max(before, key=lambda k: moves[k].start_us) if before
                    else min(free, key=lambda k: moves[k].start_us))
        found[best] = copy
    return found


_GAP = 1e-6  # µs a step's slice ends before the next begins, and twice that a phase's: no rounding makes two touch


def _steps(timeline: _Timeline, steps: Any, origin: float) -> None:
    """The steps' process: a slice per step with its phases, and the phases end to end below it (each slice a
    picosecond or two short of the next, so that float rounding never makes slices overlap)."""
    timed = [step for step in steps.steps if step.start_us is not None and step.phases is not None]
    for k, step in enumerate(timed):
        end = step.start_us + step.wall_us
        if k + 1 < len(timed) and end >= timed[k + 1].start_us:
            end = timed[k + 1].start_us
        start, stop = step.start_us - origin, end - origin
        if stop - start <= 2 * _GAP:
            continue
        warm = step.index < steps.warmup
        timeline.slice(_STEPS, 1, f"{'warm-up ' if warm else ''}step {step.index}", start, stop - start - _GAP,
                       "step", {"kind": steps.kind, "line": steps.source, "name": steps.name,
                                **{f"{phase} us": round(us, 1) for phase, us in step.phases.items() if us}})
        at = start
        for phase, us in step.phases.items():
            width = min(at + us, stop) - at - 2 * _GAP
            if us > 0 and width > 0:
                timeline.slice(_STEPS, 2, phase, at, width, "phase",
                               {"us": round(us, 1), "share of the step": round(us / step.wall_us, 4)})
            at += us


def _in_use(allocations: Sequence[Allocation], origin: float, end: float) -> dict[str, list[tuple[float, int]]]:
    """Per device, (µs from `origin` clamped to [0, `end`], bytes in use after the last event then), as
    `log.memory()` counts them (`records._memory_held.in_use`: logical CPUs' shared allocators on the first)."""
    series: dict[str, list[tuple[float, int]]] = {}
    for event, device, now in in_use(allocations):
        at, points = min(max(event.start_us - origin, 0.0), end), series.setdefault(device, [])
        if points and points[-1][0] == at:
            points.pop()
        points.append((at, now))
    return series


def _timed(timeline: _Timeline, records: Sequence[Any], copies: Sequence[Any], copy_slots: Sequence[int],
           memory: Iterable[tuple], timing: Timing, steps: Any = None, counted: bool = False) -> None:
    """Slices at the profiler's times (µs from the block's first event), a lane per overlap on a device; every
    event on that one clock ("live bytes" at the end of the op after which they changed; "bytes in use": `_in_use`)."""
    eager = [r for r in records if r.kind == Kind.EXECUTE and not is_function_call(r.op)]
    memory = list(memory)
    begins = [s.start_us for s in steps.steps if s.start_us is not None] if steps is not None else []
    origin = min([run.start_us for run in timing.runs] + [move.start_us for move in timing.moves]
                 + [call.start_us for call in timing.calls] + begins)
    if steps is not None:
        _steps(timeline, steps, origin)
    times = _record_times(records, timing, origin)
    by_device: dict[str, list] = {}
    for run in timing.runs:
        at = run.start_us - origin
        by_device.setdefault(run.device, []).append((at, at + max(run.duration_us, 0.001), (run.op, run.eager_index)))
    for device, intervals in by_device.items():
        for lane, start, end, (op, index) in _lanes(intervals):
            record = eager[index] if 0 <= index < len(eager) else None
            args = _record_args(record) if record is not None else {"op": op, "device": device, "kind": "node"}
            timeline.slice(device, 10 + lane, op, start, end - start, "op" if record is not None else "function node",
                           args)
    intervals_of: dict[str, list] = {}
    for record, at in zip(records, times):
        if at is not None and record.kind == Kind.EXECUTE and is_function_call(record.op):
            intervals_of.setdefault(record.device, []).append((at[0], at[1], record))
    for device, found in intervals_of.items():
        for lane, start, end, record in _lanes(found):
            args = _record_args(record)
            args["function"] = args.pop("op")
            timeline.slice(device, 50 + lane, record.op, start, end - start, "function call", args)
    moves = sorted(timing.moves, key=lambda m: m.start_us)
    matched = _matched(copies, copy_slots, moves, times)
    ends: dict[str, list] = {}
    for k, (source, target, start, duration) in enumerate(moves):
        copy = matched.get(k)
        at, width = start - origin, max(duration, 0.001)
        lanes = [100 + _free(ends.setdefault(device, []), at, at + width) for device in (source, target)]
        timeline.arrow(source, target, " " + input_label(copy.op, copy.input_index) if copy is not None else "",
                       _copy_args(copy) if copy is not None else
                       {"from": source, "to": target, "note": "a transfer the placement log does not name (a "
                                                              "variable's initial value, a host-memory input)"},
                       (at, width, lanes[0]), (at, width, lanes[1]))
    latest = [0.0]  # per count of records, where the last timed one of them ended
    for at in times:
        latest.append(max(latest[-1], at[1]) if at is not None else latest[-1])
    end = max((e["ts"] + e["dur"] for e in timeline.events if e["ph"] == "X"), default=0.0)
    in_use = _in_use(timing.allocations, origin, end) if counted else {}
    for device, points in sorted(in_use.items()):
        timeline.events += [{"ph": "C", "name": "bytes in use", "pid": timeline.pid(device), "ts": at,
                             "args": {"bytes": level}} for at, level in points]
    peaks = {device: max(level for _, level in points) for device, points in in_use.items()}
    kept = {device for _, device, live, _ in memory if live > peaks.get(device, -1)}  # the census saw more
    for position, device, live, _ in memory:  # at the end of the last timed record before the change
        if device in kept:
            timeline.events.append({"ph": "C", "name": "live bytes", "pid": timeline.pid(device),
                                    "ts": latest[min(max(position, 0), len(records))], "args": {"bytes": live}})


def trace_events(records: Sequence[Any], copies: Sequence[Any], copy_slots: Sequence[int],
                 memory: Iterable[tuple] = (), timing: Optional[Timing] = None, steps: Any = None,
                 counted: bool = False) -> dict[str, Any]:
    """The trace (a JSON-ready dict) of a block's records in order, its copies with the index of the
    record each came with (`copy_slots`), its memory series ((log length, device, live bytes, epoch ns))
    and, where it was timed, its profile (`Timing`: slices at the profiler's times), its `Steps` (a steps
    track) and, `counted` with `memory=True`, a "bytes in use" counter per device from its allocators' events."""
    timeline = _Timeline()
    if timing is not None and timing.runs:
        _timed(timeline, records, copies, copy_slots, memory, timing, steps, counted)
        return {"traceEvents": timeline.metadata() + timeline.events, "displayTimeUnit": "ms",
                "otherData": {"producer": "tfplace", "clock": _TIMED,
                              "devices": sorted((p for p in timeline.pids if p != _STEPS), key=_device_key)}}
    step_of: list[int] = []  # per record, the step it belongs to
    step, call, called_on = -1, None, ""
    nodes: dict[str, list[Any]] = {}  # per device, the function nodes placed since the last eager op
    def flush_nodes() -> None:
        for device, placed in nodes.items():
            ops: dict[str, int] = {}
            for record in placed:
                ops[record.op] = ops.get(record.op, 0) + 1
            timeline.slice(device, _NODES, f"{call or 'function'}: {len(placed)} node(s)", step * STEP + 1, STEP - 4,
                           "function nodes", {"function": call, "nodes": len(placed), "ops": ops,
                                              "kinds": sorted({r.kind for r in placed})})
        nodes.clear()
    for record in records:
        if Kind(record.kind).eager:
            flush_nodes()
            step += 1
            function = is_function_call(record.op)
            call, called_on = (record.op if function else None), record.device
            args = _record_args(record)
            if function:
                args["function"] = args.pop("op")
            timeline.slice(record.device, _OPS, record.op, step * STEP, STEP - 2,
                           "function call" if function else "failed op" if record.kind == Kind.FAILED else "op", args)
        elif step >= 0:
            nodes.setdefault(record.device or called_on, []).append(record)  # a removed node may have none
        step_of.append(max(step, 0))
    flush_nodes()
    per_step: dict[int, list[Any]] = {}
    for copy, slot in zip(copies, copy_slots):
        per_step.setdefault(step_of[slot] if 0 <= slot < len(step_of) else 0, []).append(copy)
    for at, moved in per_step.items():  # a step's transfers side by side within it: never overlapping
        width = (STEP - 2) / len(moved)
        for j, copy in enumerate(moved):
            start, half = at * STEP + j * width, width / 2
            timeline.arrow(copy.from_device, copy.to_device, " " + input_label(copy.op, copy.input_index),
                           _copy_args(copy), (start, half * 0.8, _TRANSFERS), (start + half, half * 0.8, _TRANSFERS))
    for at, device, live, _ in memory:
        step_at = step_of[at - 1] if 0 < at <= len(step_of) else 0
        timeline.events.append({"ph": "C", "name": "live bytes", "pid": timeline.pid(device),
                                "ts": step_at * STEP + (STEP - 1 if at else 0), "args": {"bytes": live}})
    return {"traceEvents": timeline.metadata() + timeline.events, "displayTimeUnit": "ns",
            "otherData": {"producer": "tfplace", "clock": _CLOCK, "devices": sorted(timeline.pids, key=_device_key)}}


def merge_tasks(timelines: dict[str, str]) -> dict[str, Any]:
    """One trace of a cluster from each task's timeline file (`{"worker 0": path}`): a process per task and
    device, named `worker 0 /job:worker/replica:0/task:0/device:CPU:0`; each task keeps its own clock."""
    events: list[dict[str, Any]] = []
    devices: list[str] = []
    offset = 0
    for task, path in timelines.items():
        with open(path, "rb") as f:
            data = f.read()
        trace = json.loads(gzip.decompress(data) if path.endswith(".gz") else data)
        pids = [e["pid"] for e in trace["traceEvents"]]
        for event in trace["traceEvents"]:
            event = dict(event, pid=event["pid"] + offset)
            if event["ph"] == "M" and event["name"] == "process_name":
                event["args"] = {"name": f"{task} {event['args']['name']}"}
                devices.append(event["args"]["name"])
            if event["ph"] in "sf":
                event["id"] = f"{task} {event['id']}"
            events.append(event)
        offset += max(pids, default=0)
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"producer": "tfplace", "clock": _CLOCK + "; each task its own", "devices": devices}}


def write(path: str, trace: dict[str, Any]) -> None:
    """Writes `trace` to `path` whole (gzipped when it ends `.gz`)."""
    def dump(temporary: str) -> None:
        data = json.dumps(trace, separators=(",", ":")).encode("utf-8")
        with open(temporary, "wb") as out:
            out.write(gzip.compress(data) if path.endswith(".gz") else data)

    _files.write_whole(path, dump)
