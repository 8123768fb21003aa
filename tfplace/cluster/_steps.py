"""Each task's steps side by side (its trace's `"steps"`), the slowest worker named, `replica-skew` across
workers (the worker whose compute per step is >= 1.2 x the others' median, with the op and the line that
make the difference: under MultiWorkerMirroredStrategy the others wait for it in every all-reduce) and
`ps-hotspot` (a ps task serving >= 1.5 x its fair share of the bytes read and written per step). JSON only:
no TensorFlow.

Example:
    >>> def trace(busy_us, sync):
    ...     return {"steps": {"count": 10, "warmup": 1, "kind": "function", "source": "train.py:30",
    ...                       "median_us": 5000.0, "shares": {"compute": busy_us / 50000.0, "sync": sync},
    ...                       "per_device": {"/job:worker/replica:0/task:0/device:CPU:0": {"busy_us": busy_us}}}}
    >>> tasks = [{"task": "worker:0", "trace": trace(10000.0, 0.5)}, {"task": "worker:1", "trace": trace(40000.0, 0.0)}]
    >>> slow = slowest(worker_steps(tasks))
    >>> slow["task"], slow["ratio"]
    ('worker:1', 4.0)
"""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import median
from typing import Any, Mapping, Optional, Sequence

from tfplace.placement.session._sources import AUTOGRAPH
from tfplace.placement.steps._thresholds import HOT, HOT_BYTES, SKEW, severity

__all__ = ["worker_steps", "slowest", "skew", "ps_hotspot"]

_STEPPING = ("worker", "chief")  # the jobs whose tasks run steps (ps tasks serve)


def worker_steps(tasks: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per task whose trace found steps: its count, warm-up, kind, line, median step time, phase shares and
    compute per steady step (µs; None without timing)."""
    found = {}
    for entry in tasks:
        steps = (entry.get("trace") or {}).get("steps") or {}
        if not steps.get("count"):
            continue
        busy = sum(float(d.get("busy_us") or 0.0) for d in (steps.get("per_device") or {}).values())
        timed = steps.get("median_us") is not None
        found[entry["task"]] = {"count": steps["count"], "warmup": steps.get("warmup", 0), "kind": steps.get("kind"),
                                "source": steps.get("source", ""), "median_us": steps.get("median_us"),
                                "shares": steps.get("shares"),
                                "compute_us": busy / steps["count"] if timed else None}
    return found


def slowest(steps: Mapping[str, Mapping[str, Any]]) -> Optional[dict[str, Any]]:
    """The worker (or chief) computing most per step, with the others' median and the ratio; None with fewer
    than two timed ones."""
    timed = {t: s["compute_us"] for t, s in steps.items() if s["compute_us"] and t.startswith(_STEPPING)}
    if len(timed) < 2:
        return None
    slow = max(timed, key=timed.__getitem__)
    others = median(v for t, v in timed.items() if t != slow)
    return {"task": slow, "compute_us": timed[slow], "others_compute_us": others,
            "ratio": round(timed[slow] / others, 2) if others else None, "median_us": steps[slow]["median_us"],
            "waiting": {t: (steps[t]["shares"] or {}).get("sync", 0.0) for t in timed if t != slow}}


def _op_times(trace: Mapping[str, Any], count: int) -> dict[str, float]:
    """Op type -> µs per steady step, over the task's devices."""
    times: defaultdict[str, float] = defaultdict(float)
    for row in ((trace.get("cost") or {}).get("ops") or []):
        times[row.get("op", "")] += float(row.get("time_us") or 0.0) / count
    return dict(times)


def _lines(trace: Mapping[str, Any], op: str) -> Counter:
    """The lines of the task's records of `op`, each as often as recorded (autograph's own files left out)."""
    return Counter({r["source"]: int(r.get("count", 1)) for r in trace.get("records") or []
                    if r.get("op") == op and r.get("source") and AUTOGRAPH not in r["source"]})


def skew(tasks: Sequence[Mapping[str, Any]], steps: Mapping[str, Mapping[str, Any]],
         slow: Optional[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`replica-skew` across workers as an advice dict (`Advice`'s fields and `"task"`), where it holds."""
    if slow is None or not slow["ratio"] or slow["ratio"] < SKEW:
        return []
    wall = steps[slow["task"]]["median_us"] or 0.0
    extra_us = slow["compute_us"] - slow["others_compute_us"]
    if extra_us < 0.02 * wall:
        return []
    traces = {e["task"]: e.get("trace") or {} for e in tasks}
    others = [t for t in steps if t != slow["task"] and t.startswith(_STEPPING) and steps[t]["compute_us"]]
    mine = _op_times(traces[slow["task"]], steps[slow["task"]]["count"])
    theirs = [_op_times(traces[t], steps[t]["count"]) for t in others]
    extra = {op: us - median([times.get(op, 0.0) for times in theirs]) for op, us in mine.items()}
    op = max(extra, key=extra.__getitem__) if extra else ""
    lines = _lines(traces[slow["task"]], op)
    for task in others:
        lines.subtract({line: n / len(others) for line, n in _lines(traces[task], op).items()})
    where = max(lines, key=lines.__getitem__) if lines and max(lines.values()) > 0 else steps[slow["task"]]["source"]
    share = extra_us / wall if wall else 0.0
    waiting = ", ".join(f"{t} {s:.0%}" for t, s in slow["waiting"].items())
    return [{"rule": "replica-skew", "severity": severity(share),
             "message": f"{slow['task']} computes {slow['ratio']:.1f} x the other workers' median per step "
                        f"({slow['compute_us'] / 1000:.1f} ms against {slow['others_compute_us'] / 1000:.1f} ms)"
                        + (f"; {op} makes most of the difference" if op else "")
                        + (f"; the others wait for it in the collectives (sync: {waiting})" if waiting else ""),
             "source": where, "fix": "# give every worker the same work (even data shards, the same batch size, "
                                     "no branch on the task's index)",
             "evidence": {"share": share, "task": slow["task"], "op": op, "ratio": slow["ratio"]},
             "task": slow["task"]}]


def ps_hotspot(traffic: Sequence[Mapping[str, Any]], ps_tasks: Sequence[str]) -> list[dict[str, Any]]:
    """`ps-hotspot` as an advice dict (with `"task"`), where one ps task serves >= `HOT` x its fair share of the
    bytes that remote variable reads and writes move per step, and at least `HOT_BYTES`: the line is the one
    that made its largest variable (its initial value's transfer)."""
    served: Counter = Counter({task: 0 for task in ps_tasks})
    for row in traffic:
        if row.get("kind") == "remote" and row.get("per_step"):
            for task in (row["from_task"], row["to_task"]):
                if task in served:
                    served[task] += int(row.get("bytes") or 0)
    total = sum(served.values())
    if len(served) < 2 or not total:
        return []
    hot, fair = max(served, key=served.__getitem__), total / len(served)
    if served[hot] < HOT * fair or served[hot] < HOT_BYTES:
        return []
    made = [r for r in traffic if r.get("to_task") == hot and r.get("kind") == "tensor" and r.get("source")]
    where = max(made, key=lambda r: int(r.get("bytes") or 0))["source"] if made else ""
    share = (served[hot] - fair) / total
    return [{"rule": "ps-hotspot", "severity": severity(share),
             "message": f"{hot} serves {served[hot] / 2 ** 20:.1f} MiB of variable reads and writes per step, "
                        f"{served[hot] / fair:.1f} x its fair share ({fair / 2 ** 20:.1f} MiB of {len(served)} ps "
                        "tasks): the workers wait on it",
             "source": where,
             "fix": "tf.distribute.ParameterServerStrategy(resolver, variable_partitioner="
                    "tf.distribute.experimental.partitioners.MinSizePartitioner(min_shard_bytes=256 << 10, "
                    f"max_shards={len(served)}))  # shards large variables over the ps tasks",
             "evidence": {"share": share, "task": hot, "bytes_per_step": served[hot], "fair_bytes": fair},
             "task": hot}]
