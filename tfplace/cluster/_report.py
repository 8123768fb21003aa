"""The text report of a merged cluster (`tfplace merge`, `tfplace launch --trace`).

It leads with what is uneven or costly (failed tasks, uneven collective calls, missing group members,
ps tasks holding uneven bytes, uneven work among a job's tasks, idle devices, the most bytes between
tasks, incomplete logs), then where the time and bytes went per task and device, then the traffic
between tasks (collective groups, variables per ps task, remote reads and writes, every row, the
task-by-task bytes matrix), then each task's single-process sections as `tfplace trace` prints them
(ops per device, ops not where asked and why, failed ops, GPU readiness, memory), read from its JSON
without TensorFlow. Device names are printed whole.

Example:
    >>> from tfplace.cluster._merge import merge
    >>> from tfplace.cluster._report import render
    >>> record = {"op": "MatMul", "name": "", "device": "/job:worker/replica:0/task:0/device:CPU:0",
    ...           "kind": "execute", "count": 4}
    >>> merged = merge([("worker:0", {"format": "tfplace-log/2", "records": [record], "exit_status": 0})])
    >>> print("\\n".join(render(merged).splitlines()[4:6]))
      worker:0 (exit status 0): 4 op execution(s) on 1 device(s); sent 0 B to other tasks, received 0 B
        /job:worker/replica:0/task:0/device:CPU:0: 4 op execution(s)
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from tfplace.cluster._names import device_task, full_device, owner, task_key, task_name
from tfplace.cluster._trace_text import more, task_lines
from tfplace.placement.shown import _report, _steps_view
from tfplace.placement.shown._report import ROWS

__all__ = ["render", "device_figures"]

_UNEVEN = 1.2  # largest / mean (or most / least) from which the report calls figures uneven


def _group(c: Mapping[str, Any]) -> str:
    return f"{c['op']} (eager: group not kept)" if c.get("group_key") is None else f"{c['op']} group {c['group_key']}"


def device_figures(tasks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per device, on the task that owns it: executions, busy µs and share of the cluster's busy time (None
    untimed), bytes sent and received by implicit transfers, whether it is one of its task's own devices
    that the trace lists (`own`), and the tasks whose traces recorded it (`recorded_by`)."""
    rows: dict[str, dict[str, Any]] = {}

    def row(device: str) -> dict[str, Any]:
        return rows.setdefault(device, {"task": owner(device), "device": device, "executions": 0, "busy_us": None,
                                        "share": None, "sent_bytes": 0, "received_bytes": 0, "own": False,
                                        "recorded_by": []})

    for entry in tasks:
        trace, own = entry.get("trace") or {}, entry["device_prefix"]
        for device in (trace.get("cluster") or {}).get("devices") or []:
            row(full_device(device, own))["own"] = True
        cost = trace.get("cost") or {}
        figures = cost.get("devices")
        if figures is None:  # a trace without its cost: executions of its eager records
            figures = [{"device": r.get("device"), "executions": int(r.get("count", 1))}
                       for r in trace.get("records") or [] if r.get("kind") == "execute"]
        for figure in figures:
            found = row(full_device(str(figure.get("device", "")), own))
            found["executions"] += int(figure.get("executions") or 0)
            if figure.get("busy_us") is not None:
                found["busy_us"] = (found["busy_us"] or 0.0) + float(figure["busy_us"])
            found["recorded_by"] += [entry["task"]] if entry["task"] not in found["recorded_by"] else []
        for direction in cost.get("directions") or []:
            moved = int(direction.get("bytes") or 0)
            row(full_device(str(direction.get("from_device", "")), own))["sent_bytes"] += moved
            row(full_device(str(direction.get("to_device", "")), own))["received_bytes"] += moved
    total = sum(r["busy_us"] or 0.0 for r in rows.values())
    for found in rows.values():
        found["share"] = found["busy_us"] / total if found["busy_us"] is not None and total else None
    return sorted(rows.values(), key=lambda r: (task_key(r["task"]) if r["task"] else (9, "", 0), r["device"]))


def _work(rows: Sequence[Mapping[str, Any]]) -> dict[str, tuple[int, Optional[float]]]:
    """Per task: op executions and busy µs (None untimed) of the devices it owns."""
    found: dict[str, tuple[int, Optional[float]]] = {}
    for row in rows:
        runs, busy = found.get(row["task"], (0, None))
        timed = None if row["busy_us"] is None and busy is None else (busy or 0.0) + (row["busy_us"] or 0.0)
        found[row["task"]] = (runs + row["executions"], timed)
    return found


def _findings(merged: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], top: int) -> list[str]:
    """What is uneven or costly, each with what to do."""
    lines = []
    slow = merged.get("slowest")
    if slow and slow.get("ratio"):
        lines.append(f"  slowest worker: {slow['task']}, {slow['compute_us'] / 1000:.1f} ms of compute per step, "
                     f"{slow['ratio']:.1f} x the others' median ({slow['others_compute_us'] / 1000:.1f} ms)")
    for item in merged.get("advice") or []:
        lines.append(f"  [{item['severity']}] {item['rule']} on {item['task']} at {item['source']}: {item['message']}")
        lines.append(f"      fix: {item['fix']}")
    traced = [entry["trace"] for entry in merged.get("tasks") or [] if entry.get("trace")]
    # TensorFlow's profiler can crash a process as it stops: said unless the peers' traces show an untimed run
    profiled = not traced or any((trace.get("cost") or {}).get("timed") for trace in traced)
    for entry in merged.get("tasks") or []:
        status = entry.get("exit_status")
        if entry.get("trace") is None and entry.get("script_exit_status") is not None:
            how = f"was killed by signal {status - 128}" if isinstance(status, int) and status > 128 else \
                f"exited with status {status}"
            lines.append(f"  {entry['task']}: no trace: its script ended (status {entry['script_exit_status']}), then "
                         f"the process {how} as it closed its trace" +
                         (" (with --timing, TensorFlow's profiler can crash as it stops: run again, or leave out "
                          "--timing)" if profiled else "") + "; its figures below are what its peers saw")
        elif entry.get("trace") is None:
            lines.append(f"  {entry['task']}: no trace (exit status {status}): it ended before writing one; its "
                         "figures below are what its peers saw")
        elif isinstance(status, int) and status > 128 and entry["trace"].get("script") != "(server)":
            lines.append(f"  {entry['task']} was stopped by signal {status - 128} (exit status {status})")
        elif status not in (0, None) and not (isinstance(status, int) and status > 128):  # a server is stopped
            lines.append(f"  {entry['task']} exited with status {status}: its traceback is in its output; its "
                         "peers may have waited for it")
    by_group: dict[Any, tuple[int, set[str]]] = {}
    for c in merged.get("collectives") or []:
        if c.get("uneven"):
            most = next(t for t, n in c["calls_per_task"].items() if n == c["calls"])
            fewer = ", ".join(f"{t} made {c['calls_per_task'][t]}" for t in c["uneven"])
            lines.append(f"  uneven calls of {_group(c)}{' at ' + c['source'] if c['source'] else ''}: "
                         f"{most} made {c['calls']}, {fewer}: a task with fewer steps (uneven data shards) leaves its "
                         "peers waiting in the collective; give every worker the same number of steps")
        size_, devices = by_group.get(c["group_key"], (c["group_size"] or 0, set()))
        by_group[c["group_key"]] = (size_, devices | set(c["devices"]))
    untraced = [entry["task"] for entry in merged.get("tasks") or [] if entry.get("trace") is None]
    why = f"{', '.join(untraced)} left no trace" if untraced else "a task was not traced, or never ran it"
    for key, (members, devices) in by_group.items():
        if key is not None and 0 < len(devices) < members:
            lines.append(f"  collective group {key} has size {members}, but the traces show {len(devices)} member "
                         f"device(s) ({', '.join(sorted(devices))}): {why}")
    ps = merged.get("ps_bytes") or {}
    if merged.get("ps_imbalance", 1.0) >= _UNEVEN and sum(ps.values()):
        largest = max(ps, key=lambda p: ps[p])
        lines.append(f"  ps tasks hold uneven bytes: {largest} holds {_report.size(ps[largest])} of "
                     f"{_report.size(sum(ps.values()))} "
                     f"({merged['ps_imbalance']:.2f} x the mean): shard large variables "
                     "(ParameterServerStrategy(variable_partitioner=...)) so each ps task holds a similar share")
    work = _work(rows)
    traced = [e["task"] for e in merged.get("tasks") or [] if e.get("trace") is not None]
    for job in dict.fromkeys(t.partition(":")[0] for t in traced):
        tasks = [t for t in traced if t.partition(":")[0] == job and t in work]
        timed = all(work[t][1] is not None for t in tasks)
        amount: dict[str, float] = {}
        for t in tasks:
            runs, busy = work[t]
            amount[t] = busy / 1000 if timed and busy is not None else runs  # (timed: every task's busy time known)
        if len(tasks) > 1 and 0 < max(amount.values()) >= _UNEVEN * min(amount.values()):
            most, least = max(tasks, key=amount.__getitem__), min(tasks, key=amount.__getitem__)
            unit = " ms busy" if timed else " op executions"
            lines.append(f"  uneven work among {job} tasks: {most} {amount[most]:g}{unit}, {least} "
                         f"{amount[least]:g}{unit}: balance the data (or the devices) each task gets")
    idle = [r for r in rows if r["own"] and not r["executions"]]
    lines += [f"  {r['device']} ({r['task']}) ran no op: nothing was placed on it" for r in idle[:top]]
    traffic = [r for r in merged.get("traffic") or [] if r.get("bytes")]
    if traffic:
        r = traffic[0]
        lines.append(f"  most bytes between tasks: {r['from_task']} -> {r['to_task']} {_report.size(r['bytes'])}"
                     f"{' per step' if r.get('per_step') else ''} ({r['what']})")
    placing = {e["task"] for e in merged.get("tasks") or [] if (e.get("trace") or {}).get("records")}
    for entry in merged.get("tasks") or []:
        trace = entry.get("trace") or {}
        reasons = trace.get("incomplete_reasons") or ([trace["incomplete_reason"]] if trace.get("incomplete_reason")
                                                       else [])
        elsewhere: dict[str, None] = {}  # functions another traced task placed: its trace holds them
        for reason in reasons:
            found = _report.REMOTE_FUNCTION.match(reason)
            if found and task_name(device_task(found[2])) in placing:
                elsewhere[found[1]] = None
            else:
                lines.append(f"  {entry['task']}'s log is incomplete: {reason}")
        if elsewhere:
            owners = sorted({task_name(device_task(r.get("device", ""))) for r in trace.get("records") or []
                             if r.get("op") in elsewhere} & placing, key=task_key)  # every task it ran on
            lines.append(f"  ({entry['task']} ran {len(elsewhere)} function(s) that {', '.join(owners)} placed: "
                         f"{', '.join(elsewhere)}; their nodes are in those tasks' sections)")
    return lines


def _steps_line(steps: Mapping[str, Any]) -> str:
    """A task's steps: count and median, phase shares, compute per step, what ran them."""
    what = f"{steps['kind']} at {steps['source']}" if steps.get("source") else steps["kind"]
    if steps.get("median_us") is None:
        return f"steps: {steps['count']} ({what}; no times)"
    return (f"steps: {steps['count']} x {steps['median_us'] / 1000:.1f} ms median: "
            f"{_steps_view.shares(steps['shares'])}; compute {steps['compute_us'] / 1000:.1f} ms per step ({what})")


def _per_task(merged: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per task its executions, busy share and bytes to and from other tasks; per device its figures."""
    matrix = merged.get("matrix") or {"tasks": [], "bytes": []}
    index = {t: i for i, t in enumerate(matrix["tasks"])}
    entries = {e["task"]: e for e in merged.get("tasks") or []}
    total_busy = sum(r["busy_us"] or 0 for r in rows)
    lines = []
    for task in sorted({*entries, *(r["task"] for r in rows if r["task"]), *index}, key=task_key):
        mine = [r for r in rows if r["task"] == task]
        entry = entries.get(task)
        state = (f"exit status {entry.get('exit_status')}" if entry and entry.get("trace") is not None
                 else f"no trace, exit status {entry.get('exit_status')}" if entry else "no trace of its own")
        busy = sum(r["busy_us"] or 0 for r in mine)
        timed = f", busy {busy / 1000:.1f} ms = {100 * busy / total_busy:.1f}% of the cluster's busy time" \
            if any(r["busy_us"] is not None for r in mine) and total_busy else ""
        sent = sum(matrix["bytes"][index[task]]) if task in index else 0
        received = sum(row[index[task]] for row in matrix["bytes"]) if task in index else 0
        server = bool(entry and (entry.get("trace") or {}).get("script") == "(server)")
        ran = f"{sum(r['executions'] for r in mine)} op execution(s) on {len(mine)} device(s)" if mine else \
            ("no op recorded on its devices: a server logs what it places only when the coordinator logs "
             "placement (tfplace launch --trace --ps=M has it log unless --nolog_placement is given)" if server
             else "no op recorded on its devices")
        lines.append(f"  {task} ({state}): {ran}{timed}; sent {_report.size(sent)} to other tasks, "
                     f"received {_report.size(received)}")
        if task in (merged.get("steps") or {}):
            lines.append(f"    {_steps_line(merged['steps'][task])}")
        for r in mine:
            share = (f", busy {r['busy_us'] / 1000:.1f} ms = {100 * r['share']:.1f}%" if r["busy_us"] is not None
                     and r["share"] is not None else "")
            moved = (f", implicit transfers: sent {_report.size(r['sent_bytes'])}, "
                     f"received {_report.size(r['received_bytes'])}" if r["sent_bytes"] or r["received_bytes"] else "")
            seen = f" (recorded by {', '.join(r['recorded_by'])})" if r["recorded_by"] not in ([], [task]) else ""
            lines.append(f"    {r['device']}: {r['executions']} op execution(s){share}{moved}{seen}")
    unowned = [r for r in rows if not r["task"]]
    lines += [f"  (unknown device: {r['executions']} op execution(s), recorded by {', '.join(r['recorded_by'])})"
              for r in unowned]
    if rows and all(r["busy_us"] is None for r in rows):
        lines.append("  (no times: trace each task with --timing for busy time per device)")
    return lines or ["  (no ops ran)"]


def _traffic_lines(merged: Mapping[str, Any], top: int) -> list[str]:
    """Collective groups, variables per ps task, remote reads and writes, every row, the bytes matrix."""
    lines = []
    collectives = merged.get("collectives") or []
    if collectives:
        lines.append("  collective groups (op, group key, size, dtype, bytes per call, calls):")
    for c in collectives[:top]:
        fewer = ", ".join(f"{t} made {c['calls_per_task'][t]}" for t in c.get("uneven") or [])
        fewer = f" ({fewer})" if fewer else ""
        lines.append(f"    {_group(c)}: size {c['group_size'] or '?'}, {c['dtype'] or 'dtype unknown'}, "
                     f"{_report.size(c['bytes_per_call'])} per call, {c['calls'] if c['calls'] is not None else '?'} "
                     f"call(s){fewer}, tasks {', '.join(c['tasks'])}{' at ' + c['source'] if c.get('source') else ''}")
    lines += more(collectives, top, "    ")
    ps = merged.get("ps_bytes") or {}
    if ps:
        lines.append("  variables per ps task (ParameterServerStrategy):")
    for prefix, held in ps.items():
        mine = [v for v in merged.get("variables") or [] if device_task(v["device"]) == prefix]
        names = ", ".join(f"{v['name']} {v.get('dtype') or ''}{list(v['shape']) if v.get('shape') is not None else ''} "
                          f"{_report.size(v.get('bytes'))}"
                          for v in sorted(mine, key=lambda v: -(v.get("bytes") or 0))[:3])
        lines.append(f"    {prefix}: {len(mine)} variable(s), {_report.size(held)}"
                     + (f": {names}{f' and {len(mine) - 3} more' if len(mine) > 3 else ''}" if mine else ""))
    if ps:
        lines.append(f"    bytes per ps task, largest / mean: {merged.get('ps_imbalance', 1.0):.2f} (1.00 is balanced)")
    traffic = merged.get("traffic") or []
    remote = [r for r in traffic if r.get("kind") == "remote"]
    if remote:
        lines.append("  remote reads and writes of variables (per step where the trace knew it):")
    for r in remote[:top]:
        step = " per step" if r.get("per_step") else ""
        steps = f" ({r['steps']} step(s))" if r.get("steps") else ""
        lines.append(f"    {r['from_task']} -> {r['to_task']}: {r['what']}, x{r['count']}{step}, "
                     f"{_report.size(r['bytes'])}{step}{steps}")
    lines += more(remote, top, "    ")
    lines.append("  between tasks, most bytes first:" if traffic else "  between tasks: nothing moved")
    for r in traffic[:top]:
        step = " per step" if r.get("per_step") else ""
        lines.append(f"    {r['from_task']} -> {r['to_task']}: {_report.size(r['bytes'])}{step} in "
                     f"{r['count'] if r['count'] is not None else '?'}"
                     f" transfer(s): {r['what']}{' at ' + r['source'] if r.get('source') else ''}")
    lines += more(traffic, top, "    ")
    matrix = merged.get("matrix") or {}
    if traffic and matrix.get("tasks"):
        width = max(10, *(len(t) + 2 for t in matrix["tasks"]))
        lines.append("  bytes between tasks (row: from, column: to; per step where a row above is):")
        lines.append("    " + "from \\ to".ljust(width) + "".join(t.rjust(width) for t in matrix["tasks"]))
        for task, row in zip(matrix["tasks"], matrix["bytes"]):
            cells = ("-" if task == other else _report.size(amount) for other, amount in zip(matrix["tasks"], row))
            lines.append("    " + task.ljust(width) + "".join(cell.rjust(width) for cell in cells))
    return lines


def render(merged: Mapping[str, Any], top: int = ROWS) -> str:
    """The report of a merged cluster (`tfplace.cluster._merge.merge`): what is uneven or costly, where the
    time and bytes went per task and device, the traffic between tasks, then each task's own sections
    (at most `top` rows per list)."""
    tasks = merged.get("tasks") or []
    ps = merged.get("ps_bytes") or {}
    lines = [f"== tfplace merge: {len(tasks)} task(s) ({', '.join(e['task'] for e in tasks) or 'none'})"
             + (f", {len(ps)} ps task(s)" if ps else "") + f"; {len(merged.get('collectives') or [])} collective "
             f"group(s), {len(merged.get('variables') or [])} variable(s), "
             f"{len(merged.get('traffic') or [])} traffic row(s) between tasks",
             "what is uneven or costly (act on these first):"]
    rows = device_figures(tasks)
    lines += _findings(merged, rows, top) or ["  (nothing uneven: every task exited 0, collective calls are even, "
                                        "nothing moved between tasks)"]
    lines.append("where the time and bytes went, per task and device:")
    lines += _per_task(merged, rows)
    lines.append("traffic between tasks:")
    lines += _traffic_lines(merged, top)
    for entry in tasks:
        lines += task_lines(entry, top)
    return "\n".join(lines)
