"""Parsing of TensorFlow's placement output into records.

TensorFlow reports placement as text: eager lines `Executing op MatMul in device
D` (C++ `LOG(INFO)`, fd 2), graph placer lines `name: (Op): D` (printed twice:
`printf` to fd 1 and `LOG(INFO)` to fd 2) and, under the "warn" device
policy, `before computing Op input #i was expected to be on D1 but is actually
on D0 ...` copy warnings; each log line starts with a prefix, TensorFlow 2.21's
(`I1127 09:10:37.5647   1852 placer.cc:162] `) or 2.16-2.20's (`2026-11-27
09:10:37.5647: I tensorflow/core/common_runtime/placer.cc:125] `).
`parse_placement()` finds them anywhere in a text,
also where two streams spliced lines together, and keeps each placer event
once. Kernel variants (oneDNN's `_MklMatMul`) are read as their op type; each
record keeps the printed line. `PlacementLog.from_text` is built on it.

Example:
    >>> from tfplace.placement.records._parsing import parse_placement
    >>> parsed = parse_placement(
    ...     "hello\\nI0000 00:00:1.5  7 execute.cc:1775] Executing op MatMul in device "
    ...     "/job:localhost/replica:0/task:0/device:CPU:0\\n")
    >>> parsed.records[0].op, parsed.records[0].device, parsed.copies
    ('MatMul', '/device:CPU:0', [])
    >>> parse_placement("Executing op _MklMatMul in device /job:localhost/replica:0/task:0/device:CPU:0").records[0].op
    'MatMul'
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, NamedTuple

from tfplace._devices import canonical_name
from tfplace.placement.ops import _kernels
from tfplace.placement.ops._kernels import op_type
from tfplace.placement.records._origins import is_input_op
from tfplace.placement.records._records import ARGUMENT_OPS, CopyRecord, Kind, Origin, PlacementRecord

__all__ = ["Parsed", "parse_placement", "as_captured"]

_DEVICE = r"/job:\w+/replica:\d+/task:\d+/device:[A-Za-z_]+:\d+"
_EXECUTE = r"Executing op (\S+) in device (" + _DEVICE + ")"
_COPY = (
    r"before computing (\S+) input #(\d+) was expected to be on (" + _DEVICE + ")"
    r" but is actually on (" + _DEVICE + r") \(operation running on " + _DEVICE + r"\)\."
    r" This triggers a copy which can be a performance bottleneck\."
)
_PLACE = r"(?<![\w.\-/>])([\w.\-/>]+): \(([\w>]+)\): (" + _DEVICE + ")"  # a namespaced op type: `TFText>Op`
_NO_GROUPS = re.compile(r"(?<!\\)\((?!\?)")
# A log prefix: TensorFlow 2.21's `I1127 09:10:37.564717   1852 placer.cc:162] `, 2.16-2.20's
# `2026-11-27 09:10:37.564717: I tensorflow/core/common_runtime/placer.cc:125] `.
_PREFIX = r"[IWEF]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] |\d{4}-\d\d-\d\d [\d:.]+: [IWEF] [\w./\-]+:\d+\] "
# One placement statement, with its log prefix (group 1) and its newline.
_LINE = re.compile(
    r"(" + _PREFIX + r")?("
    + "|".join(_NO_GROUPS.sub("(?:", part) for part in (_EXECUTE, _COPY, _PLACE))
    + r")\n?"
)
_EXECUTE_RE, _COPY_RE, _PLACE_RE = (re.compile(p) for p in (_EXECUTE, _COPY, _PLACE))
_LEVELS = frozenset("IWEF")


class Parsed(NamedTuple):
    """What `parse_placement()` found: records and copies."""

    records: list
    copies: list


def _read_body(body: str) -> Any:
    """The record (or copy) of one placement statement without its prefix."""
    match = _EXECUTE_RE.fullmatch(body)
    if match:
        return PlacementRecord(op_type(match[1]), "", canonical_name(match[2]), Kind.EXECUTE, line=body)
    match = _COPY_RE.fullmatch(body)
    if match:
        return CopyRecord(op_type(match[1]), int(match[2]), canonical_name(match[4]), canonical_name(match[3]), "",
                          body)
    match = _PLACE_RE.fullmatch(body)
    if match is None:
        raise ValueError(f"not a placement statement: {body!r}")
    return PlacementRecord(op_type(match[2]), match[1], canonical_name(match[3]), Kind.PLACE, line=body)


_MARKERS = ("Executing op ", "): /job:", "before computing ")


def _split_line(line: str) -> list[tuple[str, Any]]:
    """The statements in a line that may hold several (spliced), with their log prefixes."""
    return [(match[1] or "", _read_body(match[2])) for match in _LINE.finditer(line)]  # linear in the line


def parse_placement(text: str) -> Parsed:
    """Finds the placement events in `text` (one stream, or streams merged).

    Placer lines printed both bare (fd 1) and with a log prefix (fd 2) are
    kept once: the prefixed copies, plus any bare line they do not account for
    (all of them when the log level hid fd 2's lines).

    Args:
      text: the output to parse.

    Returns:
      `Parsed(records, copies)`: records and copies in text order.
    """
    records: list = []
    copies: list = []
    bare: list[int] = []
    logged: Counter = Counter()
    bodies: dict[str, Any] = {}  # a statement read once per text: logs repeat the same lines
    for line in text.split("\n"):
        body, prefix = line, ""
        if (line[:1] in _LEVELS and line[1:5].isdigit()) or (line[:4].isdigit() and line[4:5] == "-"):
            cut = line.find("] ")
            if cut > 0:
                body, prefix = line[cut + 2 :], line[: cut + 2]
        record = bodies.get(body)
        found: list[tuple[str, Any]]
        if record is not None:
            found = [(prefix, record)]
        elif any(marker in line for marker in _MARKERS):
            found = _split_line(line)
            if len(found) == 1 and found[0][1].line == body:
                bodies[body] = found[0][1]
        else:
            continue
        for prefix, record in found:
            if type(record) is CopyRecord:
                copies.append(record)
                continue
            if record.kind == Kind.PLACE:
                if prefix:
                    logged[record] += 1
                else:
                    bare.append(len(records))
            records.append(record)
    if bare and logged:
        drop = set()
        for position in bare:
            if logged[records[position]] > 0:
                logged[records[position]] -= 1
                drop.add(position)
        records = [r for i, r in enumerate(records) if i not in drop]
    return Parsed(records, copies)


def _wrapper_size(group: list[PlacementRecord], op: str) -> int:
    """How many records at the end of `group` are the one-op functions TensorFlow built to run
    eager `op` (oneDNN builds print two: one for `MatMul`, one for its `_MklMatMul` kernel)."""
    size, seen = 0, False
    for record in reversed(group):
        if record.op == op and _kernels.op_type(record.name) == op:
            seen = True
        elif not (record.op in ARGUMENT_OPS and _kernels.is_wrapper_plumbing(record.name, op)):
            break
        size += 1
    return size if seen else 0


def _without_eager_wrappers(records: list[PlacementRecord]) -> list[PlacementRecord]:
    """`records` read from a log, without eager-op wrapper functions and `_EagerConst` events.

    TensorFlow prints the placer lines of the function it builds for an eager
    op just before that op's "Executing op" line.
    """
    kept: list[PlacementRecord] = []
    group_start = 0
    for record in records:
        if record.kind != Kind.EXECUTE:
            kept.append(record)
            continue
        del kept[len(kept) - _wrapper_size(kept[group_start:], record.op):]
        if record.op != "_EagerConst":
            kept.append(record)
        group_start = len(kept)
    return kept


def as_captured(parsed: Parsed) -> Parsed:
    """What a capture of the same run records, from what `parse_placement` read: without the one-op
    functions TensorFlow builds to run each eager op and its `_EagerConst` events, dataset and
    iterator ops of origin "input" (`PlacementLog.from_text`)."""
    records = [r._replace(origin=Origin.INPUT) if is_input_op(r.op) else r
               for r in _without_eager_wrappers(parsed.records)]
    return parsed._replace(records=records)
