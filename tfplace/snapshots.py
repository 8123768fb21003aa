"""Placement snapshots: a log's op counts per device, kept as readable JSON and compared.

Function plumbing (`_Arg`, `_Retval`, ...) is left out, and the numbers
TensorFlow appends to function names (`__inference_step_123`) are dropped,
so a snapshot does not depend on test order.

Example:
    >>> from tfplace.placement_log import PlacementLog
    >>> from tfplace import snapshots
    >>> log = PlacementLog.from_text(
    ...     "Executing op MatMul in device /job:localhost/replica:0/task:0/device:CPU:0\\n")
    >>> snapshots.placement(log)
    {'/device:CPU:0': {'MatMul': 1}}
    >>> snapshots.differences({"/device:CPU:1": {"MatMul": 1}}, snapshots.placement(log))
    ['MatMul moved from /device:CPU:1 to /device:CPU:0: /device:CPU:0 0 -> 1, /device:CPU:1 1 -> 0']
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from tfplace.placement_log import PlacementLog
from tfplace.records import PLUMBING

__all__ = ["placement", "differences", "path_for", "read", "write", "FORMAT"]

FORMAT = 1
_FUNCTION_NUMBER = re.compile(r"^(__.+?)_\d+$")
_UNSAFE = re.compile(r"[^\w.\-\[\],=+]")


def placement(log: PlacementLog) -> dict[str, dict[str, int]]:
    """`log.summary()`, sorted, without function plumbing or function numbers."""
    counts: dict[str, Counter] = {}
    for device, ops in log.summary().items():
        for op, count in ops.items():
            if op not in PLUMBING:
                counts.setdefault(device, Counter())[_FUNCTION_NUMBER.sub(r"\1", op)] += count
    return {device: dict(sorted(ops.items())) for device, ops in sorted(counts.items())}


def differences(expected: dict[str, dict[str, int]], actual: dict[str, dict[str, int]]) -> list[str]:
    """One line per op whose counts differ: where it moved, and each device's count before and after."""
    devices = sorted(set(expected) | set(actual))
    ops = sorted({op for counts in (*expected.values(), *actual.values()) for op in counts})
    lines = []
    for op in ops:
        changes = [(d, expected.get(d, {}).get(op, 0), actual.get(d, {}).get(op, 0)) for d in devices]
        changes = [(d, old, new) for d, old, new in changes if old != new]
        if not changes:
            continue
        detail = ", ".join(f"{d} {old} -> {new}" for d, old, new in changes)
        lost = [d for d, old, new in changes if new < old]
        gained = [d for d, old, new in changes if new > old]
        if len(lost) == 1 and len(gained) == 1:
            lines.append(f"{op} moved from {lost[0]} to {gained[0]}: {detail}")
        else:
            lines.append(f"{op}: {detail}")
    return lines


def path_for(test_file: Path, test_name: str) -> Path:
    """`__placement__/<module>/<test>.json` beside the test file (one file per parametrized case)."""
    return test_file.parent / "__placement__" / test_file.stem / (_UNSAFE.sub("_", test_name) + ".json")


def read(path: Path) -> dict[str, dict[str, int]]:
    """The placement kept in a snapshot file."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data["placement"]


def write(path: Path, counts: dict[str, dict[str, int]]) -> None:
    """Keeps `counts` in a snapshot file, creating its folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"tfplace_snapshot": FORMAT, "placement": counts}, indent=2, sort_keys=True)
    path.write_text(text + "\n", encoding="utf-8")
