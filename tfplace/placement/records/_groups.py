"""What every report shows first: the user's compute per device, and the rest in one line per kind.

A record is *compute* (an op of origin "user" that is not plumbing), *framework* (TensorFlow's or
Keras' machinery), *input* (the tf.data pipeline) or *plumbing* (`tfplace.placement.records._origins`).
Reports list compute ops by executions (or time, where the block was timed) and count the three
others in a line each, with their most frequent op types: a Keras `fit` leads with `MatMul`,
`BiasAdd` and `Relu`, not with `Identity`, `Const` and `NoOp`.

Example:
    >>> from tfplace.placement.records._groups import per_device
    >>> from tfplace.placement.records._records import PlacementRecord
    >>> records = [PlacementRecord("MatMul", "", "/device:CPU:0", "execute"),
    ...            PlacementRecord("Identity", "x", "/device:CPU:0", "place"),
    ...            PlacementRecord("MapDataset", "", "/device:CPU:0", "execute", origin="input")]
    >>> [(g.device, list(g.compute), g.others["plumbing"], g.others["input"]) for g in per_device(records, {})]
    [('/device:CPU:0', [('MatMul', 1)], Counter({'Identity': 1}), Counter({'MapDataset': 1}))]
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping, NamedTuple, Optional

from tfplace.placement.records._origins import is_plumbing
from tfplace.placement.records._records import Kind, Origin, PlacementRecord
from tfplace._names import is_function_call

__all__ = ["CATEGORIES", "OTHER_TITLES", "category", "DeviceGroups", "per_device", "other_line", "op_categories"]

# What reports list (compute) and what they count in one line each, in that order.
CATEGORIES = ("compute", "framework", "input", "plumbing")
OTHER_TITLES = {"framework": "TensorFlow's and Keras' own machinery", "input": "input pipeline (tf.data)",
                "plumbing": "plumbing (Identity, Const, NoOp, arguments, results, removed nodes)"}


def category(record: PlacementRecord) -> str:
    """"plumbing", "input", "framework" or "compute" (the user's own ops)."""
    if is_plumbing(record):
        return "plumbing"
    if not Origin(record.origin).users:
        return record.origin
    return "compute"


class DeviceGroups(NamedTuple):
    """One device's ops, as reports show them.

    Attributes:
      device: the canonical device name ("" for removed nodes whose device is unknown).
      compute: (op, amount) pairs of the user's compute, most first: executions, or ms with timing.
      others: category -> Counter of op type -> placement events, for "framework", "input", "plumbing".
      timed: whether the amounts are milliseconds.
      amounts: category -> executions (or ms) on the device, for "framework", "input", "plumbing".
    """

    device: str
    compute: tuple[tuple[str, float], ...]
    others: Mapping[str, Counter]
    timed: bool = False
    amounts: Mapping[str, float] = {}


def _device_key(device: str) -> tuple:
    return (device == "", device)


def per_device(records: Iterable[PlacementRecord], runs: Mapping[tuple[str, str, str], int] = {},
               ops: Optional[Mapping[tuple[str, str], Any]] = None) -> list[DeviceGroups]:
    """Each device's compute ops, most executions first (eager ops' records, and `runs`: a log's
    function-node executions by (device, op, category)); by time where `ops` (a `Cost`'s (device,
    op) -> figures) is timed, an op's time shared by its categories in proportion to their
    executions (an op the profile did not see counts 0 ms); and the other categories' op counts
    (placement events)."""
    events: dict[str, dict[str, Counter]] = {}
    executions: Counter = Counter()
    for record in records:
        if is_function_call(record.op):  # its nodes are its work
            continue
        kind = category(record)
        events.setdefault(record.device, {name: Counter() for name in CATEGORIES})[kind][record.op] += 1
        if record.kind == Kind.EXECUTE:
            executions[(record.device, record.op, kind)] += 1
    executions.update(runs)
    found = []
    for device in sorted(events, key=_device_key):
        groups = events[device]
        # executions, made ms below where the block was timed
        amounts: dict[str, float] = {op: executions[(device, op, "compute")] or n
                                     for op, n in groups["compute"].items()}
        rest: dict[str, dict[str, float]] = {name: {op: executions[(device, op, name)] for op in groups[name]}
                                             for name in CATEGORIES[1:]}
        figures = {op: (ops or {}).get((device, op)) for op in amounts}
        timed = any(f.time_us is not None for f in (ops or {}).values())
        if timed:
            every = {op: sum(executions[(device, op, kind)] for kind in CATEGORIES) for op in
                     {*amounts, *(op for name in rest for op in rest[name])}}
            for op, figure in figures.items():  # an op the profile did not see took no time it could measure
                amounts[op] = (figure.time_us or 0.0) / 1000 * amounts[op] / (every[op] or amounts[op]) \
                    if figure is not None else 0.0
            for name, counts in rest.items():
                for op, n in counts.items():
                    figure = (ops or {}).get((device, op))
                    counts[op] = (figure.time_us / 1000 * n / every[op] if figure and figure.time_us and every[op]
                                  else 0.0)
        ordered = tuple(sorted(amounts.items(), key=lambda item: (-item[1], item[0])))
        found.append(DeviceGroups(device, ordered, {name: groups[name] for name in CATEGORIES[1:]}, timed,
                                  {name: float(sum(rest[name].values())) for name in CATEGORIES[1:]}))
    return found


def other_line(name: str, ops: Counter, top: int = 3) -> str:
    """One line for a category that reports do not list: "input pipeline (tf.data): 45 (MapDataset 12, ...)"."""
    shown = ", ".join(f"{op} {n}" for op, n in ops.most_common(top))
    more = f", {len(ops) - top} more op type(s)" if len(ops) > top else ""
    return f"{OTHER_TITLES[name]}: {sum(ops.values())} ({shown}{more})"


def op_categories(records: Iterable[PlacementRecord]) -> dict[tuple[str, str], str]:
    """(device, op) -> the category most of its records have (what a plot colours it as)."""
    counts: dict[tuple[str, str], Counter] = {}
    for record in records:
        counts.setdefault((record.device, record.op), Counter())[category(record)] += 1
    return {key: found.most_common(1)[0][0] for key, found in counts.items()}
