"""`tfplace diff A.json B.json`: what moved between two `tfplace trace --json` runs of a script.

Compute ops (origin "user", plumbing left out) are matched by op type, function node and user
line; a function's name loses its trailing number (`__inference_step_52` and `__inference_step_61`
are one function). The diff lists the compute ops whose devices changed, the transfers that
appeared, disappeared or changed bytes, the GPU readiness entries and explanations that appeared
or disappeared, and, when both runs were timed, each device's share of busy time side by side.
The exit status makes it a CI gate: 1 when a compute op moved or a transfer appeared, 0 when
nothing did, 2 for a file that cannot be read. Reading JSON only, it never imports TensorFlow.

Example:
    >>> from tfplace._diff import diff, render
    >>> a = {"records": [{"op": "MatMul", "name": "", "device": "/device:CPU:0", "kind": "execute",
    ...                   "source": "train.py:9", "count": 3}], "transfers": []}
    >>> b = {"records": [{"op": "MatMul", "name": "", "device": "/device:CPU:1", "kind": "execute",
    ...                   "source": "train.py:9", "count": 3}], "transfers": []}
    >>> found = diff(a, b)
    >>> found.status, render(found, "a.json", "b.json").splitlines()[2]
    (1, '  train.py:9  MatMul: CPU:0 -> CPU:1')
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Mapping, NamedTuple, Optional

from tfplace.placement._groups import category
from tfplace.placement._records import Kind, Origin, PlacementRecord, is_function_call
from tfplace.placement._report import ROWS

__all__ = ["Moved", "Diff", "DiffError", "read", "diff", "render", "to_json"]

_NUMBERED = re.compile(r"_\d+$")


class DiffError(Exception):
    """A trace that cannot be read: the message names the file and what is wrong."""


class Moved(NamedTuple):
    """A compute op whose devices changed: where each run placed it (device -> placement events)."""

    source: str
    op: str
    node: str
    before: dict[str, int]
    after: dict[str, int]


class Diff(NamedTuple):
    """What changed from run A to run B.

    Attributes:
      moved: compute ops whose devices changed.
      appeared, disappeared: transfers (rows of `--json`'s "transfers") only in B, only in A.
      changed: (A's row, B's row) of transfers in both whose bytes per transfer or total differ.
      readiness: ("appeared" | "disappeared", op, dtypes) of GPU readiness entries.
      explanations: ("appeared" | "disappeared", source or node, op, reason) of explanations.
      shares: device -> (A's share, B's share) of busy time, when both runs were timed.
      only_in: compute ops matched in one run only: ("A" | "B", source, op, node).
      status: 1 when a compute op moved or a transfer appeared, else 0.
    """

    moved: tuple[Moved, ...]
    appeared: tuple[dict, ...]
    disappeared: tuple[dict, ...]
    changed: tuple[tuple[dict, dict], ...]
    readiness: tuple[tuple[str, str, str], ...]
    explanations: tuple[tuple[str, str, str, str], ...]
    shares: dict[str, tuple[Optional[float], Optional[float]]]
    only_in: tuple[tuple[str, str, str, str], ...]
    status: int


def read(path: str) -> dict[str, Any]:
    """The trace that `tfplace trace --json` wrote to `path`.

    Raises:
      DiffError: the file is missing, unreadable, not JSON, or not a tfplace trace.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as err:
        raise DiffError(f"tfplace diff: cannot read {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise DiffError(f"tfplace diff: {path} is not JSON (truncated or another format?): {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise DiffError(f"tfplace diff: {path} is JSON but not a tfplace trace (no list of records): allowed is what "
                        "tfplace trace --json=FILE writes")
    return data


def _function(name: str) -> str:
    return _NUMBERED.sub("", name)


def _record(item: Mapping[str, Any]) -> PlacementRecord:
    fields = {key: value for key, value in item.items() if key in PlacementRecord._fields and key != "dtypes"}
    return PlacementRecord(**fields)


def _compute(data: Mapping[str, Any]) -> dict[tuple[str, str, str], Counter]:
    """(source, op, node) -> devices (placement events) of the run's compute ops."""
    found: dict[tuple[str, str, str], Counter] = {}
    for item in data.get("records", []):
        record = _record(item)
        if category(record) != "compute" or is_function_call(record.op) or record.kind == Kind.FAILED:
            continue
        found.setdefault((record.source, record.op, record.name), Counter())[record.device] += int(item.get("count", 1))
    return found


def _transfer_key(row: Mapping[str, Any]) -> tuple:
    return (row.get("kind"), _function(str(row.get("function", ""))), row.get("node", ""), row.get("op"),
            row.get("input_index"), row.get("from_device"), row.get("to_device"), row.get("source", ""))


def _transfers(data: Mapping[str, Any]) -> dict[tuple, dict]:
    rows: dict[tuple, dict] = {}
    for row in data.get("transfers", []) or []:
        key = _transfer_key(row)
        if key in rows:  # one line's transfers of several tensors, or of two instances of a function: add them up
            merged = dict(rows[key])
            merged["count"] = merged.get("count", 0) + row.get("count", 0)
            both = (merged.get("total_bytes"), row.get("total_bytes"))
            merged["total_bytes"] = None if None in both else both[0] + both[1]
            if merged.get("bytes") != row.get("bytes"):
                merged["bytes"] = None  # sizes vary: the total says it
            rows[key] = merged
        else:
            rows[key] = dict(row)
    return rows


def _readiness(data: Mapping[str, Any]) -> set[tuple[str, str]]:
    return {(str(entry.get("op")), " ".join(f"{n}={v}" for n, v in entry.get("dtypes", [])))
            for entry in data.get("gpu_readiness") or []}


def _explained(data: Mapping[str, Any]) -> set[tuple[str, str, str]]:
    found = set()
    for entry in data.get("explanations") or []:
        record = entry.get("record", {})
        if record.get("origin", Origin.USER) != Origin.USER:
            continue
        where = record.get("source") or (f"node {record.get('name')}" if record.get("name") else "")
        found.add((where, str(record.get("op")), str(entry.get("reason"))))
    return found


def _shares(data: Mapping[str, Any]) -> dict[str, Optional[float]]:
    rows = (data.get("cost") or {}).get("devices") or []
    return {str(row.get("device")): row.get("share") for row in rows if isinstance(row, dict)}


def diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> Diff:
    """What changed from trace `a` to trace `b` (the data `tfplace trace --json` writes)."""
    before, after = _compute(a), _compute(b)
    moved = tuple(Moved(source, op, node, dict(before[key]), dict(after[key]))
                  for key in before if key in after and set(before[key]) != set(after[key])
                  for source, op, node in [key])
    only_in = tuple([("A", *key) for key in before if key not in after] + [("B", *key) for key in after if key not in before])
    old, new = _transfers(a), _transfers(b)
    appeared = tuple(new[key] for key in new if key not in old)
    disappeared = tuple(old[key] for key in old if key not in new)
    changed = tuple((old[key], new[key]) for key in new if key in old
                    and (old[key].get("bytes"), old[key].get("total_bytes")) != (new[key].get("bytes"),
                                                                                  new[key].get("total_bytes")))
    ready_a, ready_b = _readiness(a), _readiness(b)
    readiness = tuple([("appeared", *entry) for entry in sorted(ready_b - ready_a)]
                      + [("disappeared", *entry) for entry in sorted(ready_a - ready_b)])
    explained_a, explained_b = _explained(a), _explained(b)
    explanations = tuple([("appeared", *entry) for entry in sorted(explained_b - explained_a)]
                         + [("disappeared", *entry) for entry in sorted(explained_a - explained_b)])
    shares_a, shares_b = _shares(a), _shares(b)
    shares = {}
    if any(v is not None for v in shares_a.values()) and any(v is not None for v in shares_b.values()):
        shares = {device: (shares_a.get(device), shares_b.get(device)) for device in sorted({*shares_a, *shares_b})}
    return Diff(moved, appeared, disappeared, changed, readiness, explanations, shares, only_in,
                1 if moved or appeared else 0)


def _short(device: str) -> str:
    return device.replace("/device:", "") or "(unknown)"


def _devices(found: Mapping[str, int]) -> str:
    return ", ".join(f"{_short(d)}" + (f" x{n}" if len(found) > 1 else "") for d, n in sorted(found.items()))


def _size(count: Optional[int]) -> str:
    if count is None:
        return "? B"
    value = float(count)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _transfer(row: Mapping[str, Any]) -> str:
    where = row.get("source") or (f"(call at {row['call']})" if row.get("call") else "an unknown line")
    node = f" (node {row['node']} of {_function(str(row.get('function', '')))})" if row.get("node") else ""
    each = f"{_size(row.get('bytes'))} each" if row.get("bytes") is not None else (
        f"{_size(row.get('total_bytes'))} in all" if row.get("total_bytes") is not None else "size unknown")
    return (f"{where}  {row.get('op')} input #{row.get('input_index')}{node} {_short(str(row.get('from_device')))} -> "
            f"{_short(str(row.get('to_device')))}, {each}, x{row.get('count')}")


def render(found: Diff, name_a: str, name_b: str, *, top: int = ROWS) -> str:
    """The diff as text: the verdict first, then each kind of change (at most `top` rows each)."""
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
    section("GPU readiness", [f"{change}: {op}{' ' + dtypes if dtypes else ''}" for change, op, dtypes in found.readiness])
    section("explanations", [f"{change}: {where or 'an unknown line'}  {op} ({reason})"
                             for change, where, op, reason in found.explanations])
    if found.shares:
        lines.append("share of busy time per device (A -> B):")
        for device, (share_a, share_b) in found.shares.items():
            shown = [f"{100 * s:.1f}%" if s is not None else "-" for s in (share_a, share_b)]
            lines.append(f"  {_short(device)}: {shown[0]} -> {shown[1]}")
    if found.only_in:
        counts = Counter(side for side, *_ in found.only_in)
        lines.append(f"({counts['A']} compute op(s) only in A, {counts['B']} only in B: another line or node, not a move)")
    return "\n".join(lines)


def to_json(found: Diff, name_a: str, name_b: str) -> dict[str, Any]:
    """The diff as JSON-ready data (`tfplace diff --json`)."""
    return {"a": name_a, "b": name_b, "status": found.status,
            "moved": [m._asdict() for m in found.moved], "appeared": list(found.appeared),
            "disappeared": list(found.disappeared), "changed": [{"a": old, "b": new} for old, new in found.changed],
            "readiness": [list(entry) for entry in found.readiness],
            "explanations": [list(entry) for entry in found.explanations],
            "shares": {device: list(pair) for device, pair in found.shares.items()},
            "only_in": [list(entry) for entry in found.only_in]}
