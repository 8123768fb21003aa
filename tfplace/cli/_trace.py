"""`tfplace trace`: run a Python script under a capture and report where its placement goes wrong.

The script runs as `__main__` with its own `sys.argv`, under
`capture_placement(sources=True, all_threads=True)` (and `timing=True` with `--timing`). After
its output comes a report: first where the time and bytes went (per device executions, and
busy time shares with `--timing`; transfers per direction with bytes; the top transfers by
bytes, eager and inside functions, with their lines); then ops per device; ops that did not run
where they asked, and why (`PlacementLog.explain()`), by source line; ops that ran on the CPU
while a GPU was visible, and why; failed ops; with no GPU visible, the GPU readiness of the
script's ops (`PlacementLog.gpu_readiness()`). The script runs as Python runs it (`tfplace.cli._script`):
its exit status is kept, an uncaught exception's traceback is printed as Python would, its
non-daemon threads are waited for, and SIGINT, SIGTERM and SIGHUP stop it with a report of what ran.
`--json` and `--plot` files are written whole or not at all.

    tfplace trace --logical_cpus=2 --json=trace.json train.py --epochs=1

Example:
    >>> from tfplace.placement.api._log import PlacementLog
    >>> from tfplace.cli._trace import Findings, report
    >>> log = PlacementLog.from_text(
    ...     "Executing op MatMul in device /job:localhost/replica:0/task:0/device:CPU:0\\n")
    >>> print(report(log, Findings(gpus_visible=False), top=5).splitlines()[2])
      CPU:0: 1 op execution(s)
"""

from __future__ import annotations

import contextlib
import heapq
import os
from collections import Counter, defaultdict
from typing import Any, Callable, Iterator, NamedTuple, Optional, Sequence

from tfplace import _files
from tfplace.placement.api._capture import capture_into
from tfplace.placement.api._log import PlacementLog
from tfplace.placement.functions import _placed
from tfplace.placement.records import _groups
from tfplace.placement.records._memory_figures import NOT_COUNTED
from tfplace.placement.records._records import ARGUMENT_OPS, Kind
from tfplace._names import function_name, is_function_call
from tfplace.placement.shown import _display, _explain, _report, _steps_view
from tfplace.placement.shown._explain import Explanation, Readiness

# what the header counts, said beside the count (the devices' "op executions" count function nodes once per call)
PLACEMENTS = "op placement(s) (eager ops run, function nodes placed: each once)"

__all__ = ["Tracing", "tracing", "Findings", "findings", "report", "to_json", "plot"]


class Tracing(NamedTuple):
    """An open trace: its placement log, and `exited(status)` to say how the script ended."""

    log: PlacementLog
    exited: Callable[[int], None]


@contextlib.contextmanager
def tracing(*, timing: bool = False, memory: bool = False, profile_dir: Optional[str] = None) -> Iterator[Tracing]:
    """What `tfplace trace` runs a script under: a capture with sources and all threads (and
    TensorFlow's profiler, with `timing` or `memory`, its profile kept in `profile_dir` where given; counting
    tensors per device, with `memory`); in a task of a
    cluster, its checks' publishing and the variables it makes on other tasks. Close it after the
    script's non-daemon threads ended, so that their ops are in the log.

    >>> import tensorflow as tf
    >>> with tracing() as opened:
    ...     _ = tf.ones(2) + 1
    ...     opened.exited(0)
    >>> "AddV2" in {r.op for r in opened.log.records}
    True
    """
    from tfplace.cluster import _checks, _variables

    directory = os.environ.get(_checks.DIRECTORY)  # a task of `tfplace launch --trace`: publish for its checks
    with contextlib.ExitStack() as stack:
        publisher = stack.enter_context(_checks.publishing(directory))
        stack.enter_context(_variables.recording())
        with capture_into(PlacementLog(), sources=True, all_threads=True, timing=timing, memory=memory,
                          profile_dir=profile_dir) as log:
            yield Tracing(log, publisher.exited)


def _is_op_type(op: str) -> bool:
    """An op type, not a function's argument or result node nor an eager call of a function."""
    return op not in ARGUMENT_OPS and not is_function_call(op)


class Findings(NamedTuple):
    """What a trace found beyond the records.

    Attributes:
      gpus_visible: whether the process saw a GPU.
      explanations: `log.explain()`.
      readiness: `log.gpu_readiness()` when no GPU was visible, else None.
      readiness_source: where the GPU kernels of `readiness` come from.
    """

    gpus_visible: bool
    explanations: tuple[Explanation, ...] = ()
    readiness: Optional[tuple[Readiness, ...]] = None
    readiness_source: str = ""


def findings(log: PlacementLog, *, gpus_visible: bool) -> Findings:
    """Explanations of `log` and, with no GPU visible, its GPU readiness."""
    if gpus_visible:
        return Findings(True, tuple(log.explain()))
    from tfplace.placement.ops import _kernel_table

    table = _kernel_table.gpu_table()
    source = table.source + (f"; {table.mismatch}" if table.mismatch else "")
    return Findings(False, tuple(log.explain()), tuple(log.gpu_readiness()), source)


_NO_OPS = "  (no ops ran)"


def _device_lines(log: PlacementLog, top: int) -> list[str]:
    """Per device, the user's compute ops by executions (or time), then plumbing, input pipeline and
    framework in a line each."""
    lines = []
    removed = 0
    compiled = Counter((r.device, r.op) for r in log.records
                       if r.kind == Kind.EXECUTE and is_function_call(r.op) and _placed.is_xla(r.op))
    for group in _groups.per_device(log.records, log.runs, log.cost().ops):
        if not group.device:
            removed = sum(group.others["plumbing"].values())
            continue
        unit = " ms" if group.timed else ""
        shown = ", ".join(f"{op} {amount:.1f}{unit}" if group.timed else f"{op} {amount:g}"
                          for op, amount in group.compute[:top])
        more = f", and {len(group.compute) - top} more op type(s)" if len(group.compute) > top else ""
        name = group.device or "(removed before running: device unknown)"
        lines.append(f"  {name}  " + (f"{len(group.compute)} compute op type(s): {shown}{more}" if group.compute
                                      else "no compute ops of yours"))
        lines += [f"      {_groups.other_line(kind, ops)}" for kind, ops in group.others.items() if ops]
        steps = sorted(((op, n) for (device, op), n in compiled.items() if device == group.device), key=lambda x: -x[1])
        if steps:  # XLA runs them whole: their ops' executions above count each call
            lines.append("      compiled by XLA (jit_compile), each call one compiled program: "
                         + ", ".join(f"{function_name(op)} {n} call(s)" for op, n in steps[:top]))
    if removed:
        lines.append(f"  ({removed} function node(s) removed by TensorFlow's graph optimizer before running, "
                     "device unknown)")
    return lines or [_NO_OPS]


def _explained_lines(explanations: Sequence[Explanation], top: int) -> list[str]:
    """The user's explanations grouped by line (a node's name where the line is unknown), most first."""
    groups, more = _report.first(_report.explained(explanations), top)
    lines = [f"  {g.source or ('function node ' + ', '.join(g.names) if g.names else 'an unknown line')}  "
             f"{g.op} x{g.count}: {g.reason}: {g.message}" for g in groups]
    return lines + ([f"  ... and {more} more"] if more else []) if lines else ["  (none of yours)"]


def _timed(log: PlacementLog) -> bool:
    """Timing was asked for (the times may be missing: another profiler session held the profiler)."""
    cost = log.cost()
    return cost.timed or bool(cost.missing)


def report(log: PlacementLog, found: Findings, *, top: int = _report.ROWS) -> str:
    """The trace report of `log`: with timing, its steps and the advice that holds first (`log.steps()`,
    `log.advice()`); where the time and bytes went (with the top transfers and their
    lines); per device, the user's compute ops by executions (plumbing, input pipeline and
    framework one line each); the user's ops not where asked, and why, by source line, then what
    TensorFlow's own code placed, one line per cause; ops on the CPU while a GPU was visible;
    failed ops; and, with no GPU visible, the user's ops that would still run on the CPU on a GPU
    machine."""
    explanations, readiness = found.explanations, found.readiness
    records = [r for r in log.records if _is_op_type(r.op)]
    per_device = _device_lines(log, top)
    if not log.complete and per_device == [_NO_OPS]:  # TensorFlow may have run ops no hook saw (a Session's graph)
        per_device = ["  (none recorded: the log is incomplete, see why above)"]
    lines = [f"== tfplace trace: {len(records)} {PLACEMENTS}, {len(log.copies)} implicit transfer(s)",
             "" if log.complete else f"incomplete log: {log.incomplete_reason}",
             *(_steps_view.text(log.steps(), log.advice()) if _timed(log) else ()),
             *_display.cost_lines(log, top=top),
             "ops per device (your compute first, by " + ("time" if log.cost().timed else "executions")
             + "; the rest one line each):",
             *per_device]
    lines.append("not where asked, and why (by source line):")
    yours = [e for e in explanations if _explain.user_can_act(e.record)]
    lines += _explained_lines([e for e in yours if e.record.requested], top)
    machinery = _explain.causes(e for e in explanations if e.record.requested)
    if machinery:
        lines.append("  placed by TensorFlow's and Keras' own code (nothing to change in yours):")
        shown, more = _report.first(machinery, top)
        lines += [f"    {cause}" for cause in shown] + ([f"    ... and {more} more"] if more else [])
    lines.append("ops on the CPU while a GPU was visible:")
    if not found.gpus_visible:
        lines.append("  (no GPU visible)")
    else:
        lines += _explained_lines([e for e in yours if not e.record.requested], top)
    failed, more = _report.first(_report.failed(log.records), top)
    if failed:
        lines.append("failed ops:")
        lines += [f"  {g.source or 'an unknown line'}  {g.op} x{g.count} on {g.device}" for g in failed]
        lines.append(f"  ... and {more} more" if more else "")
    if readiness is not None:
        lines.append(f"GPU readiness: your ops that would still run on the CPU on a GPU machine "
                     f"({found.readiness_source}):")
        for entry in readiness[:top]:
            dtypes = " ".join(f"{name}={value}" for name, value in entry.dtypes)
            at = ", ".join(entry.sources[:3]) + (f" and {len(entry.sources) - 3} more" if len(entry.sources) > 3
                                                 else "")
            lines.append(f"  {entry.op}{' ' + dtypes if dtypes else ''} at {at or 'an unknown line'}: {entry.message}")
        lines.append("  (none)" if not readiness else
                     f"  ... and {len(readiness) - top} more" if len(readiness) > top else "")
        host = _explain.on_host_by_design(log.records)
        if host:
            lines.append(f"  ({sum(host.values())} input-pipeline op(s), {len(host)} type(s) such as "
                         f"{', '.join(op for op, _ in host.most_common(3))}, run on the host by design on every "
                         "machine: not listed)")
    counted = log.memory()
    if counted.note != NOT_COUNTED:
        lines.append("memory per device (each device's peak, what it held then by line, what grew step after step, "
                     "what was not seen):")
        lines += counted.lines()
    return "\n".join(line for line in lines if line)


def to_json(log: PlacementLog, found: Findings, *, script: str, args: Sequence[str],
            exit_status: int) -> dict[str, Any]:
    """Every record and copy of the trace, the explanations and the GPU readiness, as JSON-ready data
    (`gpu_readiness` is null when a GPU was visible; in a task of a cluster, `cluster`:
    `tfplace.cluster._collectives.section`)."""
    from tfplace.cluster import _collectives

    cluster = _collectives.section(log)
    return {"script": script, "args": list(args), "exit_status": exit_status, "summary": log.summary(),
            **log.to_json(), "explanations": [e.to_json() for e in found.explanations],
            "gpu_readiness": None if found.readiness is None else [r.to_json() for r in found.readiness],
            "gpu_readiness_source": found.readiness_source, **({"cluster": cluster} if cluster else {}),
            "steps": log.steps().to_json(), "advice": [a.to_json() for a in log.advice()]}


# What the plot draws as one band each, after the user's compute ops: label and colour.
_BANDS = {"framework": ("TensorFlow's and Keras' own ops", "#5f5f5f"), "input": ("input pipeline (tf.data)", "#a6a6a6"),
          "plumbing": ("plumbing (Identity, Const, NoOp, ...)", "#d9d9d9")}


def _colours(count: int) -> list[Any]:
    """`count` distinct colours from matplotlib's qualitative maps, greys left out (grey is "other").

    tab20's dark shades come first, then its light ones: neighbouring bars differ in hue.
    """
    from matplotlib import colormaps

    maps = [getattr(colormaps[name], "colors") for name in ("tab20", "tab20b", "tab20c")]  # ListedColormaps
    ordered = [*maps[0][0::2], *maps[0][1::2], *maps[1], *maps[2]]
    palette = [c for c in ordered if len(set(c[:3])) > 1]
    return [palette[i % len(palette)] for i in range(count)]


def plot(log: PlacementLog, path: str, *, top: int = _report.ROWS, title: Optional[str] = None) -> None:
    """Draws where the work and bytes went into `path` (its extension picks the format): per device,
    op executions (or, with timing, busy time) as bars stacked by op type; beside it, bytes moved
    per direction. The file is written whole or not at all.

    The user's `top` compute op types have a colour each, the rest of the user's compute is one grey
    "other"; TensorFlow's and Keras' own ops, the input pipeline and plumbing are a grey band each.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    cost = log.cost()
    groups = [g for g in _groups.per_device(log.records, log.runs, cost.ops) if g.device]
    timed = bool(groups) and all(g.timed for g in groups if g.compute)
    totals: defaultdict[str, float] = defaultdict(float)  # executions or ms: no Counter, whose counts are ints
    for group in groups:
        for op, amount in group.compute:
            totals[op] += amount
    kept = [op for op, _ in heapq.nlargest(top, totals.items(), key=lambda item: item[1])]  # Counter.most_common's way
    devices = [g.device for g in groups]
    counts: dict[str, defaultdict[str, float]] = {g.device: defaultdict(float) for g in groups}
    for group in groups:
        for op, amount in group.compute:
            counts[group.device][op if op in kept else "other"] += amount
        for name in _BANDS:
            counts[group.device][name] += group.amounts.get(name, 0.0)
    labels = {op: f"{op} ({totals[op]:.1f} ms)" if timed else f"{op} ({totals[op]:g})" for op in kept}
    stacked = list(zip(kept, _colours(len(kept))))
    if len(totals) > len(kept):
        rest = sum(totals.values()) - sum(totals[op] for op in kept)
        labels["other"] = (f"{len(totals) - len(kept)} other compute op types "
                           f"({f'{rest:.1f} ms' if timed else f'{rest:g}'})")
        stacked.append(("other", "#8c8c8c"))
    for name, (band, colour) in _BANDS.items():
        amount = sum(counts[d][name] for d in devices)
        if amount:
            labels[name] = f"{band} ({f'{amount:.1f} ms' if timed else f'{amount:g}'})"
            stacked.append((name, colour))
    directions = sorted(cost.directions.items())
    top_height = max(1.6 + 0.5 * len(devices), 0.9 + 0.24 * len(stacked))
    low_height = 1.0 + 0.4 * max(len(directions), 1)
    figure, (axes, moved) = plt.subplots(2, 1, figsize=(9, top_height + low_height),
                                         gridspec_kw={"height_ratios": [top_height, low_height]})
    left = [0.0] * len(devices)
    for op, colour in stacked:
        widths = [counts[d][op] for d in devices]
        axes.barh(devices, widths, left=left, label=labels[op], color=colour, edgecolor="white", linewidth=0.5)
        left = [a + b for a, b in zip(left, widths)]
    for y, total in enumerate(left):
        axes.annotate(f" {total:.1f} ms" if timed else f" {total:.0f}", (total, y), va="center", fontsize="small")
    axes.set_xlim(0, max(left, default=0) * 1.12 or 1)  # room for the totals
    axes.invert_yaxis()  # the first device on top
    if not timed:
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("busy time (ms, TensorFlow's profiler)" if timed
                    else "op executions (function nodes once per call)")
    axes.set_title(title or ("time per device: your compute by op type" if timed
                             else "op executions per device: your compute by op type"))
    if stacked:
        axes.legend(title="your compute op type, then the rest", fontsize="small", loc="upper left",
                    bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)
    arrows = [f"{_display.short_device(a)} → {_display.short_device(b)}" for (a, b), _ in directions]
    kib = [(c.bytes or 0) / 1024 for _, c in directions]
    moved.barh(arrows, kib, color="#4c72b0")
    unknown = Counter((c.from_device, c.to_device) for c in log.copies if c.bytes is None)
    for y, ((key, c), amount) in enumerate(zip(directions, kib)):
        note = f", {unknown[key]} of unknown size" if unknown[key] else ""
        moved.annotate(f" {_display.size(c.bytes)} in {c.count} transfer(s){note}", (amount, y), va="center",
                       fontsize="small")
    moved.set_xlim(0, max(kib, default=0) * 1.6 or 1)
    moved.invert_yaxis()
    moved.set_xlabel("KiB moved by implicit transfers (those of known size)")
    moved.set_title("bytes per direction" if directions else "bytes per direction: no implicit transfers")
    if not directions:
        moved.set_yticks([])
    figure.tight_layout()
    try:
        _files.write_whole(path, lambda temporary: figure.savefig(temporary, bbox_inches="tight", dpi=120))
    finally:
        plt.close(figure)
