"""One task's trace JSON, turned into its sections of the cluster report (`_report`), as `tfplace trace`
prints them for a single process: ops per device, ops not where asked and why, failed ops, GPU readiness,
memory. Read from the JSON without TensorFlow; device names are printed whole.

Example:
    >>> from tfplace.cluster._trace_text import task_lines
    >>> record = {"op": "MatMul", "name": "", "device": "/job:worker/replica:0/task:0/device:CPU:0",
    ...           "kind": "execute", "count": 4}
    >>> entry = {"task": "worker:0", "exit_status": 0, "trace": {"format": "tfplace-log/2", "records": [record]}}
    >>> print("\\n".join(task_lines(entry, top=10)[1:]))
    ops per device (your compute first, by executions; the rest one line each):
      /job:worker/replica:0/task:0/device:CPU:0  1 compute op type(s): MatMul 4
    >>> task_lines({"task": "ps:0", "exit_status": 1}, top=10)
    ['== ps:0: no trace (exit status 1)']
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, NamedTuple, Sequence

from tfplace.placement.records import _groups, _log_json
from tfplace.placement.records._cost import OpCost
from tfplace.placement.records._records import ARGUMENT_OPS, PlacementRecord, input_label
from tfplace._names import is_function_call
from tfplace.placement.shown import _report

__all__ = ["task_lines", "more"]


def more(rows: Sequence[Any], top: int, indent: str) -> list[str]:
    """The line that says how many of `rows` the first `top` leave out (none when they show every row)."""
    return [f"{indent}... and {len(rows) - top} more"] if len(rows) > top else []


class _Explained(NamedTuple):
    """An explanation read back from a trace's JSON."""

    record: PlacementRecord
    reason: str
    message: str


def _yours(record: PlacementRecord) -> bool:
    """The user's code made the op and, where a device was asked for, the user's code asked for it."""
    return record.origin == "user" and not (record.requested_by and ":" not in record.requested_by)


def task_lines(entry: Mapping[str, Any], top: int) -> list[str]:
    """One task's single-process sections, as `tfplace trace` prints them."""
    trace = entry.get("trace")
    if trace is None:
        return [f"== {entry['task']}: no trace (exit status {entry.get('exit_status')})"]
    try:
        records, copies, runs, _ = _log_json.from_json(trace)
        explanations = [_Explained(_log_json._record_from(e["record"]), str(e["reason"]), str(e["message"]))
                        for e in trace.get("explanations") or []]
    except (KeyError, TypeError, ValueError) as err:
        return [f"== {entry['task']}: its records cannot be read: {err}"]
    script = " ".join([str(trace.get("script", "")), *map(str, trace.get("args") or [])]).strip()
    placed = [r for r in records if r.op not in ARGUMENT_OPS and not is_function_call(r.op)]
    transfers = trace.get("transfers") or []
    moved = sum(int(t.get("count") or 0) for t in transfers) if transfers else len(copies)
    lines = [f"== {entry['task']}{': ' + script if script else ''} (exit status {entry.get('exit_status')}): "
             f"{len(placed)} op placement(s) (eager ops run, function nodes placed: each once), "
             f"{moved} implicit transfer(s)"]
    if transfers:
        lines.append("top transfers by bytes:")
    for t in transfers[:top]:
        node = f" (node {t['node']} of {t.get('function')})" if t.get("node") else ""
        lines.append(f"  {t.get('source') or 'an unknown line'}  x{t.get('count')}  "
                     f"{_report.size(t.get('total_bytes'))}  "
                     f"{input_label(t.get('op'), t.get('input_index'))}{node} "
                     f"{t.get('from_device')} -> {t.get('to_device')}, "
                     f"{_report.size(t.get('bytes'))} each")
    lines += more(transfers, top, "  ")
    cost = trace.get("cost") or {}
    ops = {(o["device"], o["op"]): OpCost(o.get("executions", 0), o.get("time_us")) for o in cost.get("ops") or []}
    lines.append("ops per device (your compute first, by " + ("time" if cost.get("timed") else "executions")
                 + "; the rest one line each):")
    for group in _groups.per_device(records, runs, ops):
        if not group.device:
            lines.append(f"  ({sum(group.others['plumbing'].values())} function node(s) removed by TensorFlow's "
                         "graph optimizer before running, device unknown)")
            continue
        unit = " ms" if group.timed else ""
        shown = ", ".join(f"{op} {amount:.1f}{unit}" if group.timed else f"{op} {amount:g}"
                          for op, amount in group.compute[:top])
        extra = f", and {len(group.compute) - top} more op type(s)" if len(group.compute) > top else ""
        lines.append(f"  {group.device}  "
                     + (f"{len(group.compute)} compute op type(s): {shown}{extra}" if group.compute
                        else "no compute ops of yours"))
        lines += [f"      {_groups.other_line(kind, n)}" for kind, n in group.others.items() if n]
    if not records:
        lines.append("  (no ops ran)")
    for title, chosen in (("not where asked, and why (by source line)",
                           [e for e in explanations if e.record.requested]),
                          ("ops on the CPU while a GPU was visible",
                           [e for e in explanations if not e.record.requested])):
        groups = _report.explained(e for e in chosen if _yours(e.record))
        if groups:
            lines.append(f"{title}:")
        lines += [f"  {g.source or ('function node ' + ', '.join(g.names) if g.names else 'an unknown line')}  {g.op} "
                  f"x{g.count} on {g.device}: {g.reason}: {g.message}" for g in groups[:top]] + more(groups, top, "  ")
        causes = Counter((e.record.requested_by or e.record.origin, e.reason, e.record.op, e.record.device)
                         for e in chosen if not _yours(e.record))
        if causes:
            lines.append("  placed by TensorFlow's and Keras' own code (nothing to change in yours):")
        lines += [f"    {who}: {n} x {op} ran on {device} ({reason})"
                  for (who, reason, op, device), n in causes.most_common(top)]
    failed = _report.failed(records)
    if failed:
        lines.append("failed ops:")
    lines += [f"  {g.source or 'an unknown line'}  {g.op} x{g.count} on {g.device}" for g in failed[:top]]
    lines += more(failed, top, "  ")
    readiness = trace.get("gpu_readiness")
    if readiness:
        lines.append(f"GPU readiness: your ops that would still run on the CPU on a GPU machine "
                     f"({trace.get('gpu_readiness_source') or 'tfplace kernel table'}):")
    for r in (readiness or [])[:top]:
        dtypes = " ".join(f"{n}={v}" for n, v in r.get("dtypes") or [])
        lines.append(f"  {r.get('op')}{' ' + dtypes if dtypes else ''} "
                     f"at {', '.join((r.get('sources') or [])[:3]) or 'an unknown line'}: {r.get('message')}")
    memory = trace.get("memory") or {}
    if memory.get("devices"):
        lines.append("memory per device (peak and live at the end; the lines holding most):")
    for m in memory.get("devices") or []:
        lines.append(f"  {m['device']}: peak {_report.size(m.get('peak_bytes'))}, "
                     f"live at the end {_report.size(m.get('live_bytes'))}")
        lines += [f"      {source or 'an unknown line'}  {_report.size(held)}" for source, held in m.get("top") or []]
    if trace.get("incomplete_reason"):
        lines.append(f"incomplete log: {trace['incomplete_reason']}")
    return lines
