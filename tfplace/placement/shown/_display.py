"""How a `PlacementLog` looks in a notebook: a compact HTML view, and the same as text.

`html(log, explanations)` and `text(log, explanations)` are pure functions of a log and its `log.explain()`: a
summary line (records, implicit copies, complete or INCOMPLETE with the reason), the user's compute ops per device
(TensorFlow's and Keras' own ops, the input pipeline and plumbing counted in a line each, as `log.table()` does),
the implicit copies with their lines, the failed ops, why the user's ops ran elsewhere than they asked (grouped by
line and op), what TensorFlow's own code placed, one line per cause, and when memory was counted, each device's peak
and what it held then (an out-of-memory error's request first). Every text of the log is escaped: op and node names
can hold `<` and `&`. `PlacementLog._repr_html_` is `html(log, log.explain())`; the `%%placement` cell magic
(`tfplace.integrations._notebook`) shows both.

Example:
    >>> from tfplace.placement.shown._display import html, text
    >>> from tfplace.placement.api._log import PlacementLog
    >>> from tfplace.placement.records._records import PlacementRecord
    >>> log = PlacementLog([PlacementRecord("MatMul", "", "/device:CPU:1", "execute"),
    ...                     PlacementRecord("AddV2", "f/<lambda>", "/device:CPU:0", "failed")])
    >>> page = html(log, [])
    >>> "/device:CPU:1" in page, "f/&lt;lambda&gt;" in page, "<lambda>" in page
    (True, True, False)
    >>> print(text(log, []).splitlines()[0])
    PlacementLog: 2 records, 0 implicit copies, complete
"""

from __future__ import annotations

import html as _html
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from tfplace._devices import parse_device
from tfplace.placement.records import _groups
from tfplace.placement.records._memory_figures import NOT_COUNTED
from tfplace.placement.records._origins import is_plumbing
from tfplace.placement.records._records import CopyRecord, PlacementRecord, input_label
from tfplace.placement.shown import _explain, _report, _steps_view
from tfplace.placement.shown._report import ROWS, size

if TYPE_CHECKING:
    from tfplace.placement.records._cost import Cost, Transfer
    from tfplace.placement.records._memory_figures import Held, Memory
    from tfplace.placement.shown._explain import Explanation
    from tfplace.placement.steps._model import Advice, Steps

__all__ = ["Log", "html", "text", "table", "dataframe", "cost_lines", "size", "short_device"]


class Log(Protocol):
    """What the view reads of a `PlacementLog` (its text form is `str(log)`)."""

    @property
    def records(self) -> Sequence[PlacementRecord]: ...
    @property
    def copies(self) -> Sequence[CopyRecord]: ...
    @property
    def complete(self) -> bool: ...
    @property
    def incomplete_reason(self) -> str: ...
    def cost(self) -> "Cost": ...
    def transfers(self) -> list["Transfer"]: ...
    def memory(self) -> "Memory": ...
    def steps(self) -> "Steps": ...
    def advice(self) -> list["Advice"]: ...


_FONT = "font-family:var(--jp-code-font-family,ui-monospace,SFMono-Regular,Menlo,Consolas,monospace)"
_BOX = "font-size:13px;line-height:1.4;margin:4px 0;max-width:100%;overflow-x:auto"
_TABLE = f"border-collapse:collapse;margin:2px 0 8px 0;font-size:12px;{_FONT}"
_BASE = "padding:1px 12px 1px 0;border:0;border-bottom:1px solid rgba(128,128,128,.25);vertical-align:top;" \
        "white-space:nowrap"
_CELL = _BASE + ";text-align:left"
_NUM = _BASE + ";text-align:right"
_HEAD = "padding:1px 12px 1px 0;border:0;border-bottom:1px solid rgba(128,128,128,.7);vertical-align:bottom;" \
        "white-space:nowrap;font-weight:600"
_MUTED = "opacity:.55"
_MESSAGE = "padding:0 0 6px 16px;border:0;text-align:left;white-space:normal;font-size:12px;opacity:.8;" \
           "font-family:var(--jp-ui-font-family,system-ui,sans-serif)"
_COUNT5 = (False,) * 4 + (True,)
_COUNT6 = (False,) * 5 + (True,)
_TITLE = "font-weight:600;margin:6px 0 0 0"
_OK = "color:#1a7f37;font-weight:600"
_BAD = "color:#b35900;font-weight:600"
_PEAK_NUMERIC = (False, True, False, True, True)
_HELD_HEAD = ("device", "line", "bytes", "kind", "op (node)", "tensor", "count")  # a table of `Held` rows
_HELD_NUMERIC = (False, False, True, False, False, False, True)
_WARN = "background:rgba(255,193,7,.18);border-left:4px solid #d39e00;padding:4px 8px;margin:4px 0 6px 0"


def _e(value: object) -> str:
    return _html.escape(str(value), quote=True)


def _device_key(device: str) -> tuple:
    """Devices in a readable order: by type, then index; "" (unknown) last."""
    if not device:
        return (1, "", 0, "")
    try:
        parsed = parse_device(device)
    except ValueError:  # not a device name
        return (0, device, 0, device)
    return (0, parsed.device_type, parsed.index, device)


def _plural(count: int, word: str, plural: str = "") -> str:
    return f"{count} {word if count == 1 else plural or word + 's'}"


def _row(cells: Sequence[str], numeric: Sequence[bool] = ()) -> str:
    """One table row; the cells flagged numeric are right-aligned."""
    return "<tr>" + "".join(f'<td style="{_NUM if i < len(numeric) and numeric[i] else _CELL}">{cell}</td>'
                            for i, cell in enumerate(cells)) + "</tr>"


def _table(head: Sequence[str], rows: Sequence[str], numeric: Sequence[bool] = ()) -> str:
    heads = "".join(
        f'<th style="{_HEAD};text-align:{"right" if i < len(numeric) and numeric[i] else "left"}">{_e(h)}</th>'
        for i, h in enumerate(head))
    return f'<table style="{_TABLE}"><thead><tr>{heads}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _more(hidden: int, what: str, width: int, note: str = "all of them: log.summary(), log.to_dataframe()") -> str:
    return (f'<tr><td colspan="{width}" style="{_CELL};{_MUTED}">… and {_plural(hidden, what)} more '
            f"({_e(note)})</td></tr>") if hidden > 0 else ""


def _ops_table(records: Sequence[PlacementRecord]) -> str:
    """The user's compute ops per device, one row per op and kind, most placement events first; TensorFlow's
    and Keras' own ops, the input pipeline and plumbing counted in a line each (`tfplace.placement.records._groups`)."""
    counts: dict[tuple[str, str], Counter] = {}
    others: dict[str, Counter] = {}
    devices: set[str] = set()
    for record in records:
        kind = _groups.category(record)
        if kind != "compute":
            others.setdefault(kind, Counter())[record.op] += 1
            continue
        counts.setdefault((record.op, record.kind), Counter())[record.device] += 1
        devices.add(record.device)
    columns = sorted(devices, key=_device_key)
    rows = []
    ordered = sorted(counts.items(), key=lambda item: -sum(item[1].values()))
    for (op, kind), per_device in ordered[:ROWS]:
        cells = [_e(op), _e(kind)]
        cells += [str(per_device[d]) if per_device[d] else f'<span style="{_MUTED}">·</span>' for d in columns]
        rows.append(_row(cells, [False, False] + [True] * len(columns)))
    width = 2 + len(columns)
    rows.append(_more(len(counts) - ROWS, "op row", width))
    for name in _groups.CATEGORIES[1:]:
        if name in others:
            rows.append(f'<tr><td colspan="{width}" style="{_CELL};{_MUTED}">'
                        f"+{_e(_groups.other_line(name, others[name]))}</td></tr>")
    head = ["op", "kind"] + [d or "(unknown)" for d in columns]
    return _table(head, rows, [False, False] + [True] * len(columns))


def _transfers_table(log: Log) -> str:
    rows = log.transfers()
    shown = [_row([_e(t.source or (f"(call at {t.call})" if t.call else "(unknown line)")),
                   _e(t.op) + (f' <span style="{_MUTED}">{_e(t.node)} in {_e(t.function)}</span>' if t.node else ""),
                   f"#{t.input_index}", _e(short_device(t.from_device)), _e(short_device(t.to_device)),
                   f"{t.count}{'+' if t.lower_bound else ''}", _e(size(t.bytes)), _e(size(t.total_bytes))],
                  (False,) * 5 + (True,) * 3) for t in rows[:ROWS]]
    shown.append(_more(len(rows) - ROWS, "transfer row", 8))
    return _table(["line", "op (node in function)", "input", "from", "to", "count", "each", "total"], shown,
                  (False,) * 5 + (True,) * 3)


def _cost_html(log: Log) -> list[str]:
    """Where the time and bytes went: executions (and busy time) per device, bytes per direction."""
    cost = log.cost()
    if not cost.devices and not cost.directions:
        return []
    timed = any(c.busy_us is not None for c in cost.devices.values())
    rows = [_row([_e(short_device(device)), str(c.executions),
                  *([f"{c.busy_us / 1000:.1f} ms", f"{100 * c.share:.1f}%"] if timed and c.busy_us is not None
                    and c.share is not None else [])], (False, True, True, True))
            for device, c in cost.devices.items()]
    rows += [_row([_e(f"{short_device(a)} → {short_device(b)}"), f"{c.count} transfer(s)", _e(size(c.bytes)),
                   f"{c.time_us / 1000:.2f} ms" if c.time_us is not None else ""], (False, True, True, True))
             for (a, b), c in cost.directions.items()]
    note = cost.missing or ("" if timed else "function nodes count once per call; time it with timing=True")
    return [f'<div style="{_TITLE}">Where the time and bytes went</div>',
            _table(["device / direction", "executions", "busy" if timed else "bytes", "share" if timed else ""],
                   rows, (False, True, True, True)),
            *([f'<div style="{_MUTED}">{_e(note)}</div>'] if note else [])]


def _held_rows(rows: Sequence["Held"], device: str) -> list[str]:
    """`Held` rows, the largest 8 then how many more, the first naming `device`."""
    found = [_row([device if i == 0 else "", _e(h.source or "(unknown line)"), _e(size(h.bytes)), _e(h.kind),
                   _e(h.op) + (f' <span style="{_MUTED}">{_e(h.node)}</span>' if h.node not in ("", h.op) else ""),
                   _e(f"{h.dtype}{list(h.shape) if h.shape else ''}".replace(" ", "")), str(h.count or "")],
                  _HELD_NUMERIC) for i, h in enumerate(rows[:8])]
    hidden = f"{size(sum(h.bytes for h in rows[8:]))}; all of them: log.memory()"
    return found + [_more(len(rows) - 8, "row", 7, hidden)]


def _memory_html(log: Log) -> list[str]:
    """Memory per device, when the log counted it: an out-of-memory error first (the request, what the device held),
    each device's peak and the node that reached it, what it held then (most bytes first), the lines that grow step
    after step, and what the allocators did not report."""
    counted = log.memory()
    if counted.note == NOT_COUNTED:
        return []
    parts, rows, held, growth = [], [], [], []
    unseen: dict[str, list[str]] = {}  # coverage -> the devices it describes
    if counted.oom is not None:  # "out of memory on DEVICE: N requested for ... by OP at LINE ...; the device held"
        parts += [f'<div style="{_WARN}"><b>Out of memory</b>{_e(counted.oom.lines()[0][len("out of memory"):])}'
                  "</div>", _table(_HELD_HEAD, _held_rows(counted.oom.held, _e(short_device(counted.oom.device))),
                                   _HELD_NUMERIC)]
    for device, m in counted.devices.items():
        name = _e(short_device(device))
        rows.append(_row([name, _e(size(m.peak_bytes)), _e(m.peak_node or "–"), _e(size(m.live_bytes)),
                          _e(f"{size(m.allocator_current_bytes)} / {size(m.allocator_peak_bytes)}"
                             if m.allocator_peak_bytes is not None else "–")], _PEAK_NUMERIC))
        held += _held_rows(m.at_peak, name)
        growth += [f"{short_device(device)}: {g.source or '(unknown line)'} keeps {size(g.bytes_per_step)} more per "
                   f"step over {g.steps} steps" for g in m.growth]
        unseen.setdefault(m.coverage, []).append(short_device(device))
    head = ["device", "peak", "reached by", "held at the end", "TensorFlow's allocator (now / peak)"]
    parts += [f'<div style="{_TITLE}">Memory per device</div>', _table(head, rows, _PEAK_NUMERIC)]
    if held:
        parts += [f'<div style="{_TITLE}">Held at each device\'s peak, most bytes first</div>',
                  _table(_HELD_HEAD, held, _HELD_NUMERIC)]
    parts += [f'<div style="{_WARN}">Grows step after step: {_e(line)}</div>' for line in growth]
    notes = [f"not seen on {', '.join(devices)}: {coverage}" for coverage, devices in unseen.items() if coverage]
    notes += [f"allocator {a.allocator} ({', '.join(map(short_device, a.devices)) or 'its devices unknown'}): peak "
              f"{size(a.peak_bytes)}" for a in counted.allocators]
    return parts + [f'<div style="{_MUTED}">{_e(note)}</div>' for note in [*notes, counted.note]]


def _failed_table(groups: Sequence[_report.Group]) -> str:
    shown, hidden = _report.first(groups)
    rows = [_row([_e(g.source or "–"), _e(g.op) + (f' <span style="{_MUTED}">{_e(", ".join(g.names))}</span>'
                                                  if g.names else ""),
                  _e(g.device or "(unknown)"), _e(g.requested or "–"), str(g.count)], _COUNT5) for g in shown]
    rows.append(_more(hidden, "failed op row", 5))
    return _table(["line", "op", "device", "asked for", "count"], rows, [False] * 4 + [True])


def _explanations_table(groups: Sequence[_report.Explained]) -> str:
    shown, hidden = _report.first(groups)
    rows = []
    for g in shown:
        op = _e(g.op) + (f' <span style="{_MUTED}">{_e(", ".join(g.names))}</span>' if g.names else "")
        rows.append(_row([_e(g.source or "–"), op, _e(g.device), _e(g.requested or "(none)"), f"<b>{_e(g.reason)}</b>",
                          str(g.count)], _COUNT6))
        # A zero-width box as wide as the row: the message wraps to the table's width instead of widening it.
        rows.append(f'<tr><td colspan="6" style="{_MESSAGE}"><div style="width:0;min-width:100%">{_e(g.message)}</div>'
                    "</td></tr>")
    rows.append(_more(hidden, "group", 6))
    return _table(["line", "op", "ran on", "asked for", "reason", "count"], rows, [False] * 5 + [True])


def html(log: Log, explanations: Sequence["Explanation"]) -> str:
    """The log as compact HTML: summary, ops per device, copies, failed ops and explanations.

    Args:
      log: the placement log.
      explanations: its `log.explain()` (computed by the caller: it needs TensorFlow's devices).

    Returns:
      One `<div>` with inline styles only (notebooks drop `<style>` blocks of untrusted
      outputs), every text of the log escaped.
    """
    records = log.records
    yours = [e for e in explanations if _explain.user_can_act(e.record)]
    failed = _report.failed(records)
    devices = {r.device for r in records if r.device and not is_plumbing(r)}
    state = f'<span style="{_OK}">complete</span>' if log.complete else f'<span style="{_BAD}">INCOMPLETE</span>'
    summary = " · ".join([
        f"<b>Placement</b>: {_plural(len(records), 'record')} on {_plural(len(devices), 'device')}",
        _plural(len(log.copies), "implicit copy", "implicit copies"),
        *([_plural(sum(g.count for g in failed), "failed op")] if failed else []),
        *([_plural(len(yours), "op of yours not where asked", "ops of yours not where asked")] if yours else []),
        state])
    parts = [f'<div class="tfplace-placement" style="{_BOX}">', f'<div style="margin:2px 0 4px 0">{summary}</div>']
    if not log.complete:
        parts.append(f'<div style="{_WARN}"><b>Incomplete log</b>: {_e(log.incomplete_reason)}</div>')
    cost = log.cost()
    if cost.timed or cost.missing:  # timing was asked for: the steps and the advice lead
        parts.append(_steps_view.html(log.steps(), log.advice()))
    parts += _cost_html(log)
    parts += _memory_html(log)
    parts.append(_ops_table(records) if records else f'<div style="{_MUTED}">(no placement events were recorded)</div>')
    if log.copies:
        parts += [f'<div style="{_TITLE}">Implicit transfers, most bytes first</div>', _transfers_table(log)]
    if failed:
        parts += [f'<div style="{_TITLE}">Failed ops</div>', _failed_table(failed)]
    if yours:
        parts += [f'<div style="{_TITLE}">Not where asked, and why</div>',
                  _explanations_table(_report.explained(yours))]
    causes = _explain.causes(explanations)
    if causes:
        parts += [f'<div style="{_TITLE}">Placed by TensorFlow\'s and Keras\' own code '
                  "(nothing to change in yours)</div>",
                  *(f'<div style="{_MUTED}">{_e(cause)}</div>' for cause in causes[:ROWS])]
    return "".join(parts) + "</div>"


def text(log: Log, explanations: Sequence["Explanation"]) -> str:
    """The log as text: `str(log)` (where the time and bytes went, with the top transfers, then its
    table), then failed ops and explanations."""
    lines = [str(log)]
    failed, hidden = _report.first(_report.failed(log.records))
    if failed:
        lines.append("  failed ops:")
        lines += [f"    {g.op} on {g.device or '(unknown)'}" + (f" (asked for {g.requested})" if g.requested else "")
                  + (f" at {g.source}" if g.source else "") + f"  x{g.count}" for g in failed]
        lines += [f"    ... and {hidden} more"] if hidden else []
    groups, hidden = _report.first(_report.explained(e for e in explanations if _explain.user_can_act(e.record)))
    if groups:
        lines.append("  not where asked, and why:")
        for g in groups:
            lines.append(f"    {g.op} on {g.device} (asked for {g.requested or 'no device'}): {g.reason}"
                         + (f" at {g.source}" if g.source else "") + f"  x{g.count}")
            lines.append(f"      {g.message}")
        lines += [f"    ... and {hidden} more"] if hidden else []
    causes = _explain.causes(explanations)
    if causes:
        lines.append("  placed by TensorFlow's and Keras' own code (nothing to change in yours):")
        lines += [f"    {cause}" for cause in causes[:ROWS]]
    counted = log.memory()
    if counted.note != NOT_COUNTED:
        lines.append("  memory per device:")
        lines += [f"  {line}" for line in counted.lines()]
    return "\n".join(lines)


def short_device(device: str) -> str:
    """"/device:CPU:1" -> "CPU:1"; a cluster's full names stay whole ("/job:worker/replica:0/task:1/device:CPU:0")."""
    return device[len("/device:"):] if device.startswith("/device:") else device or "(unknown)"


def cost_lines(log: Log, *, top: int = 10) -> list[str]:
    """Where the time and bytes went, as text (the first section of `tfplace trace`'s report): per device executions
    (time share with timing), transfers per direction with bytes, and the top transfers by bytes with their lines."""
    cost = log.cost()
    lines = ["where the time and bytes went:"]
    for device, figures in cost.devices.items():
        timed = (f", busy {figures.busy_us / 1000:.1f} ms = {100 * figures.share:.1f}% of all devices' busy time"
                 if figures.busy_us is not None and figures.share is not None else "")
        lines.append(f"  {short_device(device)}: {figures.executions} op execution(s){timed}")
    if not cost.devices:
        lines.append("  (no ops ran)" if log.complete else "  (none recorded: the log is incomplete)")
    lines += [f"  (no times: {cost.missing})"] if cost.missing else []
    if cost.devices:
        lines.append("  (an op execution: an eager op run, or a function node run once per call of its function"
                     + ("" if cost.timed or cost.missing else "; timing measures busy time per device") + ")")
    for (source, target), moved in cost.directions.items():
        timed = f", {moved.time_us / 1000:.2f} ms" if moved.time_us is not None else ""
        lines.append(f"  transfers {short_device(source)} -> {short_device(target)}: {moved.count} "
                     f"({size(moved.bytes)}{timed})")
    lines += [] if cost.directions else ["  transfers: none"]
    rows = log.transfers()
    lines += ["  top transfers by bytes:"] if rows else []
    for row in rows[:top]:
        what = input_label(row.op, row.input_index) + (f" (node {row.node} of {row.function})" if row.node else "")
        count = f"x{row.count}" + ("+ (in a loop body: at least)" if row.lower_bound else "")
        where = row.source or (f"(call at {row.call})" if row.call else "an unknown line")
        lines.append(f"    {where}  {count}  {size(row.total_bytes)}  {what} "
                     f"{short_device(row.from_device)} -> {short_device(row.to_device)}, {size(row.bytes)} each")
    lines += [f"    ... and {len(rows) - top} more"] if len(rows) > top else []
    return lines


def table(rows: Sequence[tuple[tuple[str, str, str], int]], others: dict[str, Counter], incomplete: str = "") -> str:
    """`PlacementLog.table()`: the rows of `_report.placements` (at most `ROWS`), the other categories
    in a line each, and why the log is incomplete (`incomplete`, "" when complete)."""
    note = f"\n  (incomplete log: {incomplete})" if incomplete else ""
    if not rows and not others:
        return "  (no placement events were recorded)" + note
    shown, hidden = _report.first(rows)
    width = max([2] + [len(o) for (o, _, _), _ in shown])
    place = max([6] + [len(d) for (_, d, _), _ in shown])
    lines = [f"  {'op':<{width}}  {'device':<{place}}  {'kind':<8}  count"]
    lines += [f"  {o:<{width}}  {d:<{place}}  {k:<8}  {n}" for (o, d, k), n in shown]
    lines += [f"  ... and {hidden} more rows"] if hidden else []
    lines += [f"  (+{_groups.other_line(name, others[name])})" for name in _groups.CATEGORIES[1:] if name in others]
    return "\n".join(lines) + note


def dataframe(records: Sequence[PlacementRecord]) -> Any:
    """`PlacementLog.to_dataframe()`: one row per record (dtypes as text, e.g. "T=float32").

    Raises:
      ImportError: pandas is not installed (it comes with the `notebook` extra).
    """
    try:
        import pandas
    except ImportError as err:
        raise ImportError("PlacementLog.to_dataframe needs pandas, which is not installed here: "
                          "pip install 'tfplace[notebook]' (or pip install pandas)") from err
    columns = ["op", "name", "device", "kind", "source", "requested", "dtypes", "line", "requested_by", "origin"]
    rows = [(r.op, r.name, r.device, str(r.kind), r.source, r.requested,
             ", ".join(f"{name}={value}" for name, value in r.dtypes), r.line, r.requested_by, str(r.origin))
            for r in records]
    return pandas.DataFrame(rows, columns=columns)
