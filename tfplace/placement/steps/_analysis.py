"""A block's steps and their figures: `steps()` behind `PlacementLog.steps()`.

Example:
    >>> steps([], None, "").reason[:13]
    'no step found'
"""

from __future__ import annotations

import bisect
import math
from statistics import median
from typing import Any, Mapping, Sequence

from tfplace.placement.records._records import Kind, PlacementRecord, is_function_call
from tfplace.placement.steps import _find, _input, _phases
from tfplace.placement.steps._model import PHASES, Step, Steps

__all__ = ["steps", "OUTLIER", "OUTLIER_US"]

OUTLIER = 2.0  # a steady step longer than this many times the median is an unusual step, reported apart,
OUTLIER_US = 5000.0  # when it is also this much longer (a few ms more on a step of one is the machine's noise)


def _percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def _eager_spans(records: Sequence[PlacementRecord], timing: Any) -> list[tuple[float, float]]:
    count = sum(1 for r in records if r.kind == Kind.EXECUTE and not is_function_call(r.op))
    spans = [(math.nan, 0.0)] * count
    for _, _, start, duration, _, index in timing.events:
        if 0 <= index < count:
            spans[index] = (start, duration)
    return spans


def steps(records: Sequence[PlacementRecord], timing: Any, missing: str,
          parameters: Mapping[str, tuple] = {}) -> Steps:
    """The steps of a block from its records and its profile (`tfplace.placement.taking._profile.Timing`,
    None without timing; `missing`: why a profile asked for is missing; `parameters`: concrete function -> what
    its trace held each parameter to, which tells a function traced again from another of the same code)."""
    events = getattr(timing, "steps", None)
    found = _find.find(records, events, _eager_spans(records, timing) if events is not None else (), parameters)
    if not found.total:
        return Steps(0, 0, "", "", reason=found.reason)
    count = found.total - found.warmup
    if events is None or not found.spans:
        why = found.reason or missing or ("times: the block ran without timing (capture_placement(timing=True), "
                                          "tfplace trace --timing)")
        return Steps(count, found.warmup, found.kind, found.source, reason=why, name=found.name,
                     steps=tuple(Step(i, None, None, None) for i in range(found.total)), others=found.others)
    layers = {"compute": [(start, duration) for _, _, start, duration, _, _ in timing.events],
              "input": events.input, "sync": list(events.sync) + [(start, us) for start, us, _ in events.reads],
              "transfer": [(start, duration) for _, _, start, duration in timing.moves],
              "compile": list(events.compile) + [(c.start, c.duration) for c in events.calls if c.traced]}
    if _remote(records, found.name, timing.devices):  # a coordinator's steps: waiting for the worker that runs each
        layers["sync"] = layers["sync"] + [(c.start, c.duration) for c in events.calls if c.name == found.name]
    inside = [(start, duration) for start, duration, _ in timing.calls] + list(events.sessions)
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
    work: dict[str, list] = {}
    for device, _, start, duration, _, _ in timing.events:
        work.setdefault(device, []).append((start, duration))
    spans = found.spans[found.warmup:]
    usual = [span for i, span in enumerate(spans) if i not in unusual]
    per_device = {device: (busy, busy / total if total else 0.0)
                  for device, busy in sorted(_phases.busy(usual, work).items())}
    waited = sum(split["input"] for split in splits)
    # the loop's own pipeline as its typical steps use it: its stages' events from the first usual step's start
    # to the last one's end (an epoch that fills a cache, an earlier loop's or a later evaluation's are not)
    window = (usual[0][0], usual[-1][1]) if usual else (found.spans[0][0], found.spans[-1][1])
    run = sum(1 for low, _ in found.spans if window[0] <= low <= window[1])
    stage = _input.slowest(events.stages(window), records, waited, run) if waited > 0 else None
    return Steps(count, found.warmup, found.kind, found.source, typical, _percentile(walls, 0.9), max(walls),
                 shares, per_device, every, stage, "", found.name, _reads(events.reads, spans),
                 _gpus(spans, work, events.host_copies, count), outliers, found.others)


def _gpus(spans: Sequence[tuple[float, float]], work: dict[str, list], copies: Sequence[tuple],
          count: int) -> dict[str, dict[str, float]]:
    """Per GPU, per steady step: its kernels' time, its time without a kernel, its copies from host memory."""
    gpus = sorted({d for d in work if "/device:GPU:" in d} | {c[0] for c in copies})
    if not gpus or not count:
        return {}
    wall = sum(high - low for low, high in spans)
    busy = _phases.busy(spans, {d: work[d] for d in gpus if d in work})
    starts = [low for low, _ in spans]
    inside = [c for c in copies if (at := bisect.bisect_right(starts, c[3]) - 1) >= 0 and c[3] < spans[at][1]]
    found = {}
    for device in gpus:
        mine = [c for c in inside if c[0] == device]
        found[device] = {"compute_us": busy.get(device, 0.0) / count, "idle_us": (wall - busy.get(device, 0.0)) / count,
                         "h2d_bytes": sum(c[2] for c in mine) / count, "h2d_us": sum(c[4] for c in mine) / count,
                         "pageable_bytes": sum(c[2] for c in mine if c[1] == "pageable") / count,
                         "pinned_bytes": sum(c[2] for c in mine if c[1] == "pinned") / count}
    return found


def _remote(records: Sequence[PlacementRecord], name: str, local: Any) -> bool:
    """Whether every call of the step function `name` ran on another task's devices than this process's
    (`local`: the devices its profile saw), as a ParameterServerStrategy coordinator's scheduled steps do."""
    prefix = f"__inference_{name}_"
    devices = {r.device for r in records if r.kind == Kind.EXECUTE and r.op.startswith(prefix)
               and r.op[len(prefix):].isdigit()}
    tasks = {device.partition("/device:")[0] for device in local if device.startswith("/job:")}
    return bool(devices and tasks) and all(d.startswith("/job:") and d.partition("/device:")[0] not in tasks
                                           for d in devices)


def _reads(reads: Sequence[tuple[float, float, str]], spans: Sequence[tuple[float, float]]) -> dict:
    """Line -> (the steps in `spans` holding a read of that line, those reads' µs)."""
    starts = [low for low, _ in spans]
    found: dict[str, list] = {}
    for start, duration, line in reads:
        at = bisect.bisect_right(starts, start) - 1
        if line and at >= 0 and start < spans[at][1]:
            entry = found.setdefault(line, [set(), 0.0])
            entry[0].add(at)
            entry[1] += duration
    return {line: (len(steps), us) for line, (steps, us) in sorted(found.items())}

