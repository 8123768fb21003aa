"""A block's steps and their figures: `steps()` behind `PlacementLog.steps()`.

Example:
    >>> steps([], None, "").reason[:13]
    'no step found'
"""

from __future__ import annotations

import bisect
import math
from statistics import median
from typing import Mapping, Optional, Sequence

from tfplace.placement.records._records import Kind, PlacementRecord
from tfplace._names import function_name, is_function_call
from tfplace.placement.profile._model import OpTime, Timing
from tfplace.placement.profile._step_events import HostCopy, Span
from tfplace.placement.steps import _find, _input, _phases
from tfplace.placement.steps._model import PHASES, Step, Steps
from tfplace.placement.steps._thresholds import OUTLIER, OUTLIER_US
from tfplace.placement.session._session import Parameters

__all__ = ["steps", "COORDINATOR"]

COORDINATOR = ("a ParameterServerStrategy coordinator's steps: each times the scheduling of a step on a worker and "
               "the wait for it; the workers' own steps are in their tasks' traces (tfplace launch --trace --timing)")


def _percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def _eager_spans(records: Sequence[PlacementRecord], timing: Timing) -> list[Span]:
    count = sum(1 for r in records if r.kind == Kind.EXECUTE and not is_function_call(r.op))
    spans = [(math.nan, 0.0)] * count
    for index, span in timing.runs.of_eager().items():
        if index < count:
            spans[index] = span
    return spans


def steps(records: Sequence[PlacementRecord], timing: Optional[Timing], missing: str,
          parameters: Mapping[str, Parameters] = {}) -> Steps:
    """The steps of a block from its records and its profile (None without timing; `missing`: why a profile
    asked for is missing; `parameters`: concrete function -> what its trace held each parameter to, which tells
    a function traced again from another of the same code)."""
    events = timing.steps if timing is not None else None
    found = _find.find(records, events, _eager_spans(records, timing) if timing is not None else (), parameters)
    if not found.total:
        return Steps(0, 0, "", "", reason=found.reason)
    count = found.total - found.warmup
    if timing is None or events is None or not found.spans:
        why = found.reason or missing or ("times: the block ran without timing (capture_placement(timing=True), "
                                          "tfplace trace --timing)")
        return Steps(count, found.warmup, found.kind, found.source, reason=why, name=found.name,
                     steps=tuple(Step(i, None, None, None) for i in range(found.total)), others=found.others)
    layers = {"compute": timing.runs.spans(),
              "input": events.input, "sync": list(events.sync) + [(start, us) for start, us, _ in events.reads],
              "transfer": [(move.start_us, move.duration_us) for move in timing.moves],
              "compile": list(events.compile) + [(c.start, c.duration) for c in events.calls if c.traced]}
    remote = _remote(records, found.name, timing.devices)
    if remote:  # a coordinator's steps: waiting for the worker that runs each
        layers["sync"] = layers["sync"] + [(c.start, c.duration) for c in events.calls if c.name == found.name]
    inside = [(call.start_us, call.duration_us) for call in timing.calls] + list(events.sessions)
    phases = _phases.split(found.spans, layers, inside)
    timed = list(zip(found.spans, phases))
    every = tuple(Step(i, low, high - low, split) for i, ((low, high), split) in enumerate(timed))
    walls = [high - low for (low, high), _ in timed[found.warmup:]]
    typical = median(walls)
    # the typical steps decide the shares: a step over OUTLIER x the median (an epoch's end: a test loop, a
    # checkpoint, a new iterator) is reported apart (`Steps.outliers`) and neither fires nor hides a rule
    unusual = {i for i, wall in enumerate(walls)
               if len(walls) >= 3 and wall > OUTLIER * typical and wall - typical >= OUTLIER_US}
    splits = [split for i, (_, split) in enumerate(timed[found.warmup:]) if i not in unusual]
    total = sum(wall for i, wall in enumerate(walls) if i not in unusual)
    shares = {phase: (sum(split[phase] for split in splits) / total if total else 0.0) for phase in PHASES}
    outliers = tuple(every[found.warmup + i] for i in sorted(unusual))
    work = timing.runs.per_device()
    spans = found.spans[found.warmup:]
    usual = [span for i, span in enumerate(spans) if i not in unusual]
    per_device = {device: (busy, busy / total if total else 0.0)
                  for device, busy in sorted(_phases.busy(usual, work).items())}
    waited = sum(split["input"] for split in splits)
    # the loop's own pipeline as its typical steps use it: its stages' events from the first usual step's start
    # to the last one's end (an epoch that fills a cache, an earlier loop's or a later evaluation's are not)
    window = (usual[0][0], usual[-1][1]) if usual else (found.spans[0][0], found.spans[-1][1])
    ran = sum(1 for low, _ in found.spans if window[0] <= low <= window[1])
    stage = _input.slowest(events.stages(window), records, waited, ran) if waited > 0 else None
    return Steps(count, found.warmup, found.kind, found.source, typical, _percentile(walls, 0.9), max(walls),
                 shares, per_device, every, stage, COORDINATOR if remote else "", found.name,
                 _reads(events.reads, spans),
                 _gpus(spans, work, events.host_copies, count), outliers, found.others)


def _gpus(spans: Sequence[Span], work: dict[str, list[Span]], copies: Sequence[HostCopy],
          count: int) -> dict[str, dict[str, float]]:
    """Per GPU, per steady step: its kernels' time, its time without a kernel, its copies from host memory."""
    gpus = sorted({d for d in work if "/device:GPU:" in d} | {c.device for c in copies})
    if not gpus or not count:
        return {}
    wall = sum(high - low for low, high in spans)
    busy = _phases.busy(spans, {d: work[d] for d in gpus if d in work})
    starts = [low for low, _ in spans]
    inside = [c for c in copies if (at := bisect.bisect_right(starts, c.start) - 1) >= 0 and c.start < spans[at][1]]
    found = {}
    for device in gpus:
        mine = [c for c in inside if c.device == device]
        found[device] = {"compute_us": busy.get(device, 0.0) / count,
                         "idle_us": (wall - busy.get(device, 0.0)) / count,
                         "h2d_bytes": sum(c.bytes for c in mine) / count,
                         "h2d_us": sum(c.duration for c in mine) / count,
                         "pageable_bytes": sum(c.bytes for c in mine if c.memory == "pageable") / count,
                         "pinned_bytes": sum(c.bytes for c in mine if c.memory == "pinned") / count}
    return found


def _remote(records: Sequence[PlacementRecord], name: str, local: Mapping[str, OpTime]) -> bool:
    """Whether every call of the step function `name` ran on another task's devices than this process's
    (`local`: the devices its profile saw), as a ParameterServerStrategy coordinator's scheduled steps do."""
    devices = {r.device for r in records if r.kind == Kind.EXECUTE and r.op.startswith("__inference_")
               and function_name(r.op) == name}
    tasks = {device.partition("/device:")[0] for device in local if device.startswith("/job:")}
    return bool(devices and tasks) and all(d.startswith("/job:") and d.partition("/device:")[0] not in tasks
                                           for d in devices)


def _reads(reads: Sequence[tuple[float, float, str]], spans: Sequence[Span]) -> dict[str, tuple[int, float]]:
    """Line -> (the steps in `spans` holding a read of that line, those reads' µs)."""
    starts = [low for low, _ in spans]
    held: dict[str, set[int]] = {}
    waited: dict[str, float] = {}
    for start, duration, line in reads:
        at = bisect.bisect_right(starts, start) - 1
        if line and at >= 0 and start < spans[at][1]:
            held.setdefault(line, set()).add(at)
            waited[line] = waited.get(line, 0.0) + duration
    return {line: (len(held[line]), waited[line]) for line in sorted(held)}

