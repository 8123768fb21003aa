"""Finding a block's steps without annotation, from its records and, with timing, its profile.

In this order, the first that holds: a step marker's events (tf_keras' own, or a user's
`tf.profiler.experimental.Trace("train", step_num=i)`), the Python calls of the `tf.function` called most
(Keras 3's `multi_step_on_iterator`, tf_keras' `train_function`, a custom loop's step; at least twice),
`Session.run` calls, an eager loop (the user's line that ran most eager ops, at least three times, needing
`sources=True`). One loop is one thing repeated from one place: one function's calls from one line of the
user's (of two concrete functions taking turns from that line, as `fit`'s training and validation steps do,
the one that ran most); the loop of most steps is the block's, a training loop before an evaluation's, and the
others are named. A step spans from its
call to the next one (the last: to its end); a marked step spans its marker. The first steps whose call traced
a function that runs again are warm-up; a function traced anew later is retracing inside a steady step.

Example:
    >>> found = find([], None)
    >>> found.spans, found.reason[:13]
    ([], 'no step found')
"""

from __future__ import annotations

import ast
import linecache
import re
from collections import Counter
from typing import Any, Collection, Mapping, NamedTuple, Optional, Sequence

from tfplace.placement.records._records import Kind, PlacementRecord
from tfplace._names import function_name, is_function_call
from tfplace.placement.session._session import Parameters

__all__ = ["Found", "find", "loop_line"]

_KERAS = {"train_function": "keras-fit", "test_function": "keras-evaluate", "predict_function": "keras-predict"}
_KERAS3 = frozenset({"multi_step_on_iterator", "one_step_on_iterator", "one_step_on_data", "multi_step_on_data"})
_CALLED_AS = (("fit", "keras-fit"), ("evaluate", "keras-evaluate"), ("predict", "keras-predict"))
_MAKES_VARIABLES = frozenset({"VarHandleOp", "VariableV2", "_VarHandlesOp"})
_MARKS = {"train": "keras-fit", "test": "keras-evaluate", "predict": "keras-predict"}


class Found(NamedTuple):
    """What `find` found: the kind, the Python name called or marked, the user's line, each step's
    (start, end) in µs (empty without timing), how many steps ran and how many were warm-up, why
    nothing was found ("" when something was), and the other loops it saw."""

    kind: str
    name: str
    source: str
    spans: list[tuple[float, float]]
    total: int
    warmup: int
    reason: str = ""
    others: tuple[tuple[str, str, int], ...] = ()  # the other loops seen: (kind, the user's line, steps)


def _keras_kind(name: str, source: str) -> str:
    if name in _KERAS:
        return _KERAS[name]
    if name in _KERAS3 and source:
        path, _, number = source.rpartition(":")
        text = linecache.getline(path, int(number)) if number.isdigit() else ""
        for method, kind in _CALLED_AS:
            if re.search(rf"\.{method}\s*\(", text):
                return kind
    return "function"


def _calls(records: Sequence[PlacementRecord]) -> dict[str, list[PlacementRecord]]:
    out: dict[str, list[PlacementRecord]] = {}
    for record in records:
        if record.kind == Kind.EXECUTE and is_function_call(record.op):
            out.setdefault(function_name(record.op), []).append(record)
    return out


def _source(records: Sequence[PlacementRecord]) -> str:
    sources = Counter(r.source for r in records if r.source)
    return sources.most_common(1)[0][0] if sources else ""


def _top_level(calls: Sequence[Any]) -> list[Any]:
    """Calls not inside another call on their line (a function called while another traces)."""
    out: list[Any] = []
    ends: dict[tuple[Any, ...], float] = {}
    for call in sorted(calls):
        if call.start < ends.get(call.line, float("-inf")):
            continue
        ends[call.line] = call.start + call.duration
        out.append(call)
    return out


def _spans(starts: Sequence[float], last_end: float) -> list[tuple[float, float]]:
    return [(start, starts[i + 1] if i + 1 < len(starts) else max(last_end, start)) for i, start in enumerate(starts)]


def _warm(traced: Sequence[bool], concrete: Optional[Sequence[str]] = None) -> int:
    """The first steps that are warm-up: those that traced, from the first, while the concrete function each
    traced runs again later (`concrete`: each step's; a function traced anew at a later step, as a new Python
    value makes it, is retracing inside a steady step, not warm-up). At least one step is left."""
    last = {name: i for i, name in enumerate(concrete)} if concrete is not None else {}
    warm = 0
    while warm < len(traced) - 1 and traced[warm] and (
            warm == 0 or concrete is None or last[concrete[warm]] > warm):
        warm += 1
    return warm


def _runs(concrete: Sequence[str]) -> dict[str, list[int]]:
    """Per concrete function, the lengths of its runs of consecutive steps."""
    runs: dict[str, list[int]] = {}
    for i, name in enumerate(concrete):
        if i and concrete[i - 1] == name:
            runs[name][-1] += 1
        else:
            runs.setdefault(name, []).append(1)
    return runs


def _loops(name: str, ran: Sequence[PlacementRecord], mine: Sequence[Any], untimed: bool,
           parameters: Mapping[str, Parameters] = {}) -> list[Found]:
    """The loops of the `tf.function` called as `name` (its records `ran`, its profile's calls `mine`): one per
    user's line that called it (`fit`'s and `evaluate`'s calls of Keras 3's `multi_step_on_iterator` are two
    loops) and per function (`_functions`); all its calls as one where the profile's calls and the records do
    not pair up."""
    aligned = untimed or len(ran) == len(mine)  # the k-th call is the k-th record
    pairs = list(zip(ran, mine if not untimed else ran)) if aligned else []
    if not aligned:
        return [found for found in [_loop(name, _source(ran), [], list(mine), untimed)] if found is not None]
    lines = list(dict.fromkeys(record.source for record in ran))
    return [found for line in lines
            for group in _functions([pair for pair in pairs if pair[0].source == line], parameters)
            for found in [_loop(name, line, group, [], untimed)] if found is not None]


def _functions(pairs: list[tuple[PlacementRecord, Any]],
               parameters: Mapping[str, Parameters]) -> list[list[tuple[PlacementRecord, Any]]]:
    """The calls of one line, per function: a concrete function whose trace held every parameter as the one
    before it did was not traced again for a new argument; it is another function of the same code (a new
    model's step, each `fit` of twelve models), and starts a group of its own."""
    groups: list[list[tuple[PlacementRecord, Any]]] = []
    owner: dict[str, int] = {}  # concrete function -> its group
    last: Optional[str] = None  # the concrete function of the call before
    for pair in pairs:
        op = pair[0].op
        if op not in owner:
            same = last is not None and last in parameters and op in parameters and parameters[last] == parameters[op]
            if last is None or same:
                groups.append([])
                owner[op] = len(groups) - 1
            else:
                owner[op] = owner[last]
        groups[owner[op]].append(pair)
        last = op
    return groups


def _loop(name: str, source: str, pairs: list[tuple[PlacementRecord, Any]], unpaired: list[Any],
          untimed: bool) -> Optional[Found]:
    """The loop of the calls of `name` from the user's line `source` (`pairs`: each call's record and profile
    event, or `unpaired`: the profile's events alone): where two concrete functions take turns in runs (Keras
    3's training and validation steps, both `multi_step_on_iterator` from the `fit` line), the calls of the one
    that ran most; None where that leaves fewer than two calls, or one steady call that traced."""
    aligned = not unpaired
    if aligned:
        runs = _runs([record.op for record, _ in pairs])
        turns = [op for op, lengths in runs.items() if sum(1 for n in lengths if n >= 2) >= 2]
        if len(runs) > 1 and turns:
            kept = max(turns, key=lambda op: sum(runs[op]))
            pairs = [(record, call) for record, call in pairs if record.op == kept]
        if len(pairs) < 2:
            return None
    kind = _keras_kind(name, source)
    concrete = [record.op for record, _ in pairs] if aligned else None
    if untimed:
        ops = [record.op for record, _ in pairs]
        first = {op: i for i, op in reversed(list(enumerate(ops)))}
        traced = [first[op] == i for i, op in enumerate(ops)]  # a concrete function's first call traced it
        warm = _warm(traced, concrete)
        return None if len(ops) - warm == 1 and traced[-1] else Found(kind, name, source, [], len(ops), warm)
    calls = [call for _, call in pairs] if aligned else unpaired
    if len(calls) < 2:
        return None
    warm = _warm([call.traced for call in calls], concrete)
    if len(calls) - warm == 1 and calls[-1].traced:
        return None
    spans = _spans([c.start for c in calls], calls[-1].start + calls[-1].duration)
    return Found(kind, name, source, spans, len(calls), warm)


def find(records: Sequence[PlacementRecord], events: Optional[Any],
         eager_spans: Sequence[tuple[float, float]] = (), parameters: Mapping[str, Parameters] = {}) -> Found:
    """The steps of a block.

    Args:
      records: the log's records, in order.
      events: the profile's `StepEvents`, or None without timing.
      eager_spans: with timing, the (start, length) in µs of each eager op's event, by its index among the
        records' eager executions (`nan` where the profile has none).
      parameters: concrete function -> what its trace held each parameter to: two concrete functions in a row
        whose traces held every parameter alike are two functions (two models' steps), not one traced again.
    """
    calls = _calls(records)
    marked = _marked(events, calls) if events is not None and events.marks else None
    if marked is not None:
        return marked
    top = _top_level(events.calls) if events is not None else []
    named = Counter(call.name for call in top)
    counted = named if events is not None else Counter({name: len(rs) for name, rs in calls.items()})
    loops = [loop for name, n in counted.most_common() if n >= 2
             for loop in _loops(name, calls.get(name, []), [c for c in top if c.name == name], events is None,
                                parameters)]
    if loops:  # the loop that ran most steps, a training loop before an evaluation's
        chosen = max(loops, key=lambda loop: (loop.kind != "keras-evaluate" and loop.kind != "keras-predict",
                                              loop.total))
        others = tuple((loop.kind, loop.source, loop.total) for loop in loops if loop is not chosen)
        return chosen._replace(others=others)
    session = _session_runs(events) if events is not None else None
    return session if session is not None else _eager_loop(records, events, eager_spans)


def _session_runs(events: Any) -> Optional[Found]:
    """`Session.run` loops: one Session's runs from one line (the capture names both), the loop of most runs;
    where no capture named them (a kept profile), every `SessionRun` is one loop. None without two such runs."""
    groups: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for run in events.session_runs:
        groups.setdefault((run.session, run.source), []).append((run.start, run.duration))
    if not events.session_runs:
        groups = {(0, ""): list(events.sessions)}
    loops = sorted(((sorted(runs), source) for (_, source), runs in groups.items() if len(runs) >= 2),
                   key=lambda loop: -len(loop[0]))
    if not loops:
        return None
    (runs, source), others = loops[0], loops[1:]
    return Found("session", "Session.run", source, _spans([s for s, _ in runs], runs[-1][0] + runs[-1][1]),
                 len(runs), 1, others=tuple(("session", line, len(more)) for more, line in others))


def _marked(events: Any, calls: dict[str, list[PlacementRecord]]) -> Optional[Found]:
    """The steps markers mark: one loop is one marker name's marks whose calls ran one concrete function from
    one line (tf_keras marks every `fit` step "train": four `fit` calls of four models are four loops, not
    one), the loop of most marks, training ("train") before evaluation; None where no marker repeats so."""
    loops = []
    for name in {mark.name for mark in events.marks}:
        marks = sorted(m for m in events.marks if m.name == name)
        inside = [[c for c in events.calls if mark.start <= c.start < mark.start + mark.duration] for mark in marks]
        inner = Counter(c.name for calls_in in inside for c in calls_in)
        called = inner.most_common(1)[0][0] if inner else ""
        ran = iter(calls.get(called, ()))
        aligned = inner[called] == len(calls.get(called, ()))  # the k-th call inside marks is the k-th record
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, calls_in in enumerate(inside):
            records = [next(ran, None) for c in calls_in if c.name == called] if aligned else []
            first = next((r for r in records if r is not None), None)
            groups.setdefault((first.op, first.source) if first is not None else ("", ""), []).append(i)
        key, members = max(groups.items(), key=lambda item: len(item[1]))
        if len(members) < 2:
            continue
        kind = _MARKS.get(name, "marked") if _KERAS.get(called) == _MARKS.get(name) else "marked"
        traced = [any(c.traced for c in inside[i]) for i in members]
        spans = [(marks[i].start, marks[i].start + marks[i].duration) for i in members]
        source = key[1] or _source(calls.get(called, ()))
        loops.append(Found(kind, name, source, spans, len(members), _warm(traced)))
    if not loops:
        return None
    return max(loops, key=lambda loop: (loop.name == "train", loop.name not in ("test", "predict"), loop.total))


def _eager_loop(records: Sequence[PlacementRecord], events: Optional[Any],
                spans: Sequence[tuple[float, float]]) -> Found:
    eager = [r for r in records if r.kind == Kind.EXECUTE and not is_function_call(r.op)]
    # lines that make variables (a model's, an optimizer's) build what a loop trains: no loop of steps
    making = {r.source for r in eager if r.op in _MAKES_VARIABLES}
    runs: Counter[str] = Counter()  # per line, how often it started a run of eager ops (an iteration's: one run)
    starts: dict[str, list[int]] = {}
    head = 0
    while head < len(eager):
        record = eager[head]
        tail = head + 1
        while tail < len(eager) and eager[tail].source == record.source:
            tail += 1
        if record.source and record.origin.users and record.source not in making:
            # a loop of one line repeats its ops: one run per repetition
            period = _period([r.op for r in eager[head:tail]])
            for start in range(head, tail, period):
                runs[record.source] += 1
                starts.setdefault(record.source, []).append(start)
        head = tail
    if not runs or runs.most_common(1)[0][1] < 3:
        eager_why = ("no line of yours ran eager ops three times (a line making variables builds, it does not step)"
                     if any(r.source for r in eager)
                     else "eager loops are found by their lines (capture with sources=True)")
        why = ("no step found: no tf.function ran twice, as one function from one line of yours, no step was marked, "
               f"no Session.run ran twice, and {eager_why}")
        return Found("", "", "", [], 0, 0, why)
    most = runs.most_common(1)[0][1]
    first = min((line for line, n in runs.items() if n == most), key=lambda line: starts[line][0])
    at = starts[first]
    body = {line for line, n in runs.items() if n == most}  # the lines of every iteration
    source = loop_line(first, body)
    if events is None or not spans:
        return Found("eager-loop", "", source, [], len(at), 1)
    last = max((i for i, r in enumerate(eager[at[-1]:], at[-1]) if r.source in body), default=at[-1])
    begins = [spans[i][0] for i in at if spans[i][0] == spans[i][0]]  # nan: no event
    if len(begins) < 2:
        return Found("eager-loop", "", source, [], len(at), 1, "the profile has no event of the loop's ops")
    end = sum(spans[last]) if spans[last][0] == spans[last][0] else begins[-1]
    return Found("eager-loop", "", source, _spans(begins, end), len(begins), 1)


def _period(ops: Sequence[str]) -> int:
    """The length of the shortest sequence of ops whose repetitions make `ops` (its own length where none does):
    a loop whose body is one line runs that line's ops again and again in one run of that line's records."""
    for period in range(1, min(len(ops) // 2, 64) + 1):
        if len(ops) % period == 0 and ops[period:5 * period] == ops[:4 * period] and ops[period:] == ops[:-period]:
            return period
    return max(len(ops), 1)


def loop_line(line: str, body: Collection[str] = ()) -> str:
    """The `for` or `while` line of the innermost loop of the user's file that holds `line` ("file.py:LINE")
    and every line of `body` in that file; `line` itself where the file cannot be read or no loop holds it."""
    path, _, number = line.rpartition(":")
    if not number.isdigit():
        return line
    try:
        tree = ast.parse("".join(linecache.getlines(path)) or open(path, encoding="utf-8").read())
    except (OSError, SyntaxError, ValueError):
        return line
    wanted = {int(n) for p, _, n in (b.rpartition(":") for b in body) if p == path and n.isdigit()} | {int(number)}
    found = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) and node.body:
            end = max(getattr(child, "end_lineno", None) or child.lineno for child in node.body)
            if all(node.body[0].lineno <= n <= end for n in wanted) and (found is None or node.lineno > found.lineno):
                found = node
    return f"{path}:{found.lineno}" if found is not None else line
