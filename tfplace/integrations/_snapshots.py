"""Placement snapshots: a log's op counts per device, kept as readable JSON and compared.

Function plumbing (`_Arg`, `_Retval`, ...) is left out, and the numbers
TensorFlow appends to function names (`__inference_step_123`) are dropped,
so a snapshot does not depend on test order. `SnapshotUse` follows what a pytest run did with
snapshot files, to name the ones no test wrote or read.

Example:
    >>> from tfplace.placement.api._log import PlacementLog
    >>> from tfplace.integrations import _snapshots
    >>> log = PlacementLog.from_text(
    ...     "Executing op MatMul in device /job:localhost/replica:0/task:0/device:CPU:0\\n")
    >>> _snapshots.placement(log)
    {'/device:CPU:0': {'MatMul': 1}}
    >>> _snapshots.differences({"/device:CPU:1": {"MatMul": 1}}, _snapshots.placement(log))
    ['MatMul moved from /device:CPU:1 to /device:CPU:0: /device:CPU:0 0 -> 1, /device:CPU:1 1 -> 0']
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from tfplace.placement.records._records import ARGUMENT_OPS

if TYPE_CHECKING:  # this module loads without TensorFlow: the pytest plugin reads snapshot folders in any run
    from tfplace.placement.api._log import PlacementLog

__all__ = ["placement", "differences", "path_for", "folder_for", "read", "write", "FORMAT", "SnapshotError",
           "SnapshotUse"]

FORMAT = 1
UPDATE = "--tfplace-update-snapshots"
_FUNCTION_NUMBER = re.compile(r"^(__.+?)_\d+$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-\[\],=+]")
_LONGEST = 120  # characters of a file name before its hash
_SHAPE = ('{"tfplace_snapshot": %d, "placement": {device: {op: count}}}, as pytest %s writes it' % (FORMAT, UPDATE))


class SnapshotError(ValueError):
    """A snapshot file that cannot be read or written; the message names the file and the way out."""


def placement(log: "PlacementLog") -> dict[str, dict[str, int]]:
    """`log.summary()`, sorted, without function plumbing or function numbers, nor the records of the
    functions TensorFlow's own threads instantiate a varying number of times (`log.uncertain`)."""
    counts: dict[str, Counter] = {}
    for device, ops in log.summary().items():
        for op, count in ops.items():
            if op not in ARGUMENT_OPS:
                counts.setdefault(device, Counter())[_FUNCTION_NUMBER.sub(r"\1", op)] += count
    for record in log.uncertain:
        if record.op not in ARGUMENT_OPS and record.device in counts:
            counts[record.device][_FUNCTION_NUMBER.sub(r"\1", record.op)] -= 1
    return {device: dict(sorted((op, n) for op, n in ops.items() if n > 0)) for device, ops in sorted(counts.items())
            if any(n > 0 for n in ops.values())}


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


def folder_for(test_file: Path) -> Path:
    """`__placement__/<module>/` beside the test file: the folder of its snapshot files.

    >>> folder_for(Path("tests/test_model.py")).as_posix()
    'tests/__placement__/test_model'
    """
    return test_file.parent / "__placement__" / test_file.stem


def path_for(test_file: Path, names: Sequence[str]) -> Path:
    """`__placement__/<module>/<Class.test[id]>.json` beside the test file: one file per test item.

    `names` are the item's classes and its name with the parameter id, e.g.
    `["TestA", "test_step[a:b]"]`. A name that had to be made safe for a file
    system, or shortened, ends with a hash of the whole name, so no two items share a file.

    >>> path_for(Path("tests/test_model.py"), ["TestA", "test_step[a/b]"]).name
    'TestA.test_step[a_b]-9a6b222cf3.json'
    """
    name = ".".join(names)
    safe = _UNSAFE.sub("_", name)[:_LONGEST]
    if safe != name:  # unchanged names end with a letter, digit, "_" or "]": never with this "-" and hash
        safe += "-" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:10]
    return folder_for(test_file) / (safe + ".json")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_placement(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(ops, dict) and all(map(_is_count, ops.values())) for ops in value.values())


def read(path: Path) -> dict[str, dict[str, int]]:
    """The placement kept in a snapshot file.

    Raises:
      SnapshotError: the file cannot be read, or is not a snapshot of this format.
    """
    def bad(what: str) -> SnapshotError:
        return SnapshotError(f"the placement snapshot {path} {what}: allowed is {_SHAPE}; "
                             f"run pytest with {UPDATE} to rewrite it, then review and commit it")

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise bad(f"cannot be read ({err.strerror or err})") from None
    except UnicodeDecodeError as err:
        raise bad(f"is not UTF-8 text ({err.reason} at byte {err.start})") from None
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as err:
        raise bad(f"is not JSON ({err})") from None
    if not isinstance(data, dict):
        raise bad(f"holds a JSON {type(data).__name__}, not an object")
    for key in ("tfplace_snapshot", "placement"):
        if key not in data:
            raise bad(f"has no {json.dumps(key)} key")
    if not _is_count(data["tfplace_snapshot"]) or data["tfplace_snapshot"] != FORMAT:
        raise bad(f"has \"tfplace_snapshot\": {json.dumps(data['tfplace_snapshot'])}, "
                  f"not the format {FORMAT} this tfplace reads")
    if not _is_placement(data["placement"]):
        raise bad(f"has \"placement\": {json.dumps(data['placement'])[:200]}, not op counts per device")
    return data["placement"]


def write(path: Path, counts: dict[str, dict[str, int]]) -> None:
    """Keeps `counts` in a snapshot file, creating its folders.

    Raises:
      SnapshotError: `path` is a folder, or cannot be written.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"tfplace_snapshot": FORMAT, "placement": counts}, indent=2, sort_keys=True)
        path.write_text(text + "\n", encoding="utf-8")
    except OSError as err:
        raise SnapshotError(f"the placement snapshot {path} cannot be written ({err.strerror or err}): "
                            f"remove what is in its place, or make its folder writable, "
                            f"and run pytest with {UPDATE} again") from None


class SnapshotUse:
    """What a run did with snapshot files, to find those no test wrote or read.

    A test module counts when the run covered it entirely: collected whole (no node id such as
    `test_m.py::test_a` narrowed the run) and none of its tests deselected (`-k`, `-m`,
    `--deselect`, `--lf`). Then a `.json` file of its snapshot folder (`__placement__/<module>/`)
    is unused unless a test read or wrote it, or it belongs to a test that failed or was skipped
    (which may have stopped before its `assert_match`). A run that stopped early (`-x`, Ctrl-C),
    only collected (`--co`), or lost a pytest-xdist worker says nothing. Snapshot folders of test
    modules that no longer exist are never touched.
    """

    def __init__(self) -> None:
        self.used: set[str] = set()  # read or written by assert_match
        self.kept: set[str] = set()  # of tests that failed or were skipped
        self.collected: set[str] = set()  # test files with selected tests
        self.narrowed: set[str] = set()  # test files with deselected tests
        self.whole = True  # False: node ids narrowed the run, or a pytest-xdist worker was lost
        self.unused: list[Path] = []
        self.removed = False

    def to_json(self) -> dict[str, Any]:
        return {"used": sorted(self.used), "kept": sorted(self.kept), "collected": sorted(self.collected),
                "narrowed": sorted(self.narrowed), "whole": self.whole}

    def merge(self, data: dict[str, Any]) -> None:
        for name in ("used", "kept", "collected", "narrowed"):
            getattr(self, name).update(data.get(name, ()))
        self.whole = self.whole and data.get("whole", False)

    def find_unused(self) -> list[Path]:
        """The snapshot files of the test modules the run covered entirely that no test wrote or read."""
        found: list[Path] = []
        for module in sorted(self.collected - self.narrowed):
            folder = folder_for(Path(module))
            if folder.is_dir():
                found += [path for path in sorted(folder.glob("*.json"))
                          if str(path) not in self.used and str(path) not in self.kept]
        return found
