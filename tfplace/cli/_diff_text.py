"""`tfplace diff`'s output: the text (`render`), the verdict first, then each kind of change, and the JSON
(`to_json`) of a `Diff` or `ClusterDiff` (`tfplace.cli._diff_match`).

Example:
    >>> from tfplace.cli._diff_match import diff
    >>> from tfplace.cli._diff_text import render
    >>> def trace(peak):
    ...     return {"records": [], "memory": {"devices": [{"device": "/device:GPU:0", "peak_bytes": peak}]}}
    >>> print(render(diff(trace(2 << 20), trace(3 << 20)), "a.json", "b.json"))
    tfplace diff a.json -> b.json: no change in where your compute ops ran or what moved between devices
    memory peak per device (A -> B):
      GPU:0: 2.0 MiB -> 3.0 MiB (+1.0 MiB, x1.50)
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Optional

from tfplace.cli._diff_match import ClusterDiff, Diff, Peak, function_name
from tfplace.placement.records._records import input_label
from tfplace._names import size_text
from tfplace.placement.shown._report import ROWS

__all__ = ["render", "to_json"]


def _short(device: str) -> str:
    """"/device:CPU:1" -> "CPU:1"; a full name (`/job:worker/replica:0/task:1/device:CPU:0`) whole."""
    return (device[len("/device:"):] if device.startswith("/device:") else device) or "(unknown)"


def _devices(found: Mapping[str, int]) -> str:
    return ", ".join(f"{_short(d)}" + (f" x{n}" if len(found) > 1 else "") for d, n in sorted(found.items()))


def _size(count: Optional[int]) -> str:
    return "? B" if count is None else size_text(count)


def _transfer(row: Mapping[str, Any]) -> str:
    where = row.get("source") or (f"(call at {row['call']})" if row.get("call") else "an unknown line")
    node = f" (node {row['node']} of {function_name(str(row.get('function', '')))})" if row.get("node") else ""
    each = f"{_size(row.get('bytes'))} each" if row.get("bytes") is not None else (
        f"{_size(row.get('total_bytes'))} in all" if row.get("total_bytes") is not None else "size unknown")
    return (f"{where}  {input_label(row.get('op'), row.get('input_index'))}{node} "
            f"{_short(str(row.get('from_device')))} -> {_short(str(row.get('to_device')))}, "
            f"{each}, x{row.get('count')}")


def _peak(peak: Peak) -> str:
    """A device's peaks side by side, with the change in bytes and as a ratio; or the one run that has it."""
    device, before, after = _short(peak.device), peak.a_peak_bytes, peak.b_peak_bytes
    if before is None or after is None:
        side, other, held = ("A", "B", before) if after is None else ("B", "A", after)
        return f"{device}: {size_text(held)} in {side} only (no peak for it in {other})"
    change = after - before
    ratio = f", x{after / before:.2f}" if before else ""
    said = f"{'+' if change > 0 else ''}{size_text(change)}{ratio}" if change else "no change"
    return f"{device}: {size_text(before)} -> {size_text(after)} ({said})"


def _memory(found: Diff, name_a: str, name_b: str) -> list[str]:
    """The memory section: each device's peak (A -> B), or the line saying which run alone counted memory."""
    if found.memory_only_in:
        (counted, counted_name), (other, other_name) = (("A", name_a), ("B", name_b))[
            ::1 if found.memory_only_in == "A" else -1]
        return [f"memory: only {counted} ({counted_name}) counted memory per device; trace {other} ({other_name}) "
                "again with tfplace trace --memory --json=FILE to compare each device's peak"]
    if not found.memory:
        return []
    return ["memory peak per device (A -> B):"] + [f"  {_peak(peak)}" for peak in found.memory]


def _render_clusters(found: ClusterDiff, name_a: str, name_b: str, top: int) -> str:
    changed = [task for task, d in found.tasks.items() if d.status]
    lines = [f"tfplace diff {name_a} -> {name_b} (clusters, task by task): "
             + (f"{len(changed)} task(s) changed: {', '.join(changed)}" if changed else "no task changed")
             + "".join(f"; {task} only in {side}" for side, task in found.only_in)]
    if found.traffic:
        lines.append("bytes between tasks (A -> B):")
        lines += [f"  {source} -> {target}: {old} B -> {new} B" for source, target, old, new in found.traffic[:top]]
    for task, task_diff in found.tasks.items():
        lines += [f"== {task}", render(task_diff, f"{name_a}:{task}", f"{name_b}:{task}", top=top)]
    return "\n".join(lines)


def render(found: Any, name_a: str, name_b: str, *, top: int = ROWS) -> str:
    """The diff as text: the verdict first, then each kind of change (at most `top` rows each); a
    `ClusterDiff` task by task."""
    if isinstance(found, ClusterDiff):
        return _render_clusters(found, name_a, name_b, top)
    changes = []
    if found.moved:
        changes.append(f"{len(found.moved)} compute op(s) moved")
    if found.appeared:
        changes.append(f"{len(found.appeared)} transfer(s) appeared")
    lines = [f"tfplace diff {name_a} -> {name_b}: " + (", ".join(changes) if changes else "no change")
             + ("" if changes else " in where your compute ops ran or what moved between devices")]

    def section(title: str, rows: list[str]) -> None:
        if rows:
            lines.append(f"{title} ({len(rows)}):")
            lines.extend(f"  {row}" for row in rows[:top])
            if len(rows) > top:
                lines.append(f"  ... and {len(rows) - top} more")

    section("compute ops that moved device", [
        f"{m.source or (f'node {m.node}' if m.node else 'an unknown line')}  {m.op}"
        + (f" (node {m.node})" if m.node and m.source else "") + f": {_devices(m.before)} -> {_devices(m.after)}"
        for m in found.moved])
    section("transfers that appeared", [_transfer(row) for row in found.appeared])
    section("transfers that disappeared", [_transfer(row) for row in found.disappeared])
    section("transfers whose bytes changed", [
        f"{_transfer(new)} (was {_size(old.get('bytes'))} each, {_size(old.get('total_bytes'))} in all; now "
        f"{_size(new.get('total_bytes'))})" for old, new in found.changed])
    section("GPU readiness", [f"{change}: {op}{' ' + dtypes if dtypes else ''}"
                              for change, op, dtypes in found.readiness])
    section("explanations", [f"{change}: {where or 'an unknown line'}  {op} ({reason})"
                             for change, where, op, reason in found.explanations])
    if found.steps:
        rate_a, rate_b = found.steps["per_second"]
        lines.append(f"steps (A -> B): {rate_a:.1f} -> {rate_b:.1f} per second (by the median step); " + ", ".join(
            f"{phase} {100 * share_a:.1f}% -> {100 * share_b:.1f}%" for phase, (share_a, share_b)
            in found.steps.items() if phase != "per_second" and max(share_a, share_b) >= 0.0005))
    if found.shares:
        lines.append("share of busy time per device (A -> B):")
        for device, (share_a, share_b) in found.shares.items():
            shown = [f"{100 * s:.1f}%" if s is not None else "-" for s in (share_a, share_b)]
            lines.append(f"  {_short(device)}: {shown[0]} -> {shown[1]}")
    lines += _memory(found, name_a, name_b)
    if found.only_in:
        counts = Counter(side for side, *_ in found.only_in)
        lines.append(f"({counts['A']} compute op(s) only in A, {counts['B']} only in B: another line or node, "
                     "not a move)")
    return "\n".join(lines)


def to_json(found: Any, name_a: str, name_b: str) -> dict[str, Any]:
    """The diff as JSON-ready data (`tfplace diff --json`); a `ClusterDiff`'s with one entry per task."""
    if isinstance(found, ClusterDiff):
        return {"a": name_a, "b": name_b, "status": found.status,
                "tasks": {task: to_json(d, f"{name_a}:{task}", f"{name_b}:{task}") for task, d in found.tasks.items()},
                "only_in": [list(entry) for entry in found.only_in],
                "traffic": [{"from_task": s, "to_task": t, "a": old, "b": new} for s, t, old, new in found.traffic]}
    return {"a": name_a, "b": name_b, "status": found.status,
            "moved": [m._asdict() for m in found.moved], "appeared": list(found.appeared),
            "disappeared": list(found.disappeared), "changed": [{"a": old, "b": new} for old, new in found.changed],
            "readiness": [list(entry) for entry in found.readiness],
            "explanations": [list(entry) for entry in found.explanations],
            "shares": {device: list(pair) for device, pair in found.shares.items()},
            "only_in": [list(entry) for entry in found.only_in],
            "steps": {key: list(pair) for key, pair in found.steps.items()},
            "memory": [peak._asdict() for peak in found.memory], "memory_only_in": found.memory_only_in or None}
