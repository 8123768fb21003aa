"""The assertions of a placement log (`PlacementLog.assert_placed`, `assert_not_placed`): what ran
where against what was expected, with a table of the actual placements when it fails.

Example:
    >>> from tfplace.placement.api import _assertions
    >>> from tfplace.placement.api._log import PlacementLog
    >>> log = PlacementLog.from_text("Executing op MatMul in device /job:localhost/replica:0/task:0/device:CPU:0\\n")
    >>> _assertions.assert_placed(log, "MatMul", "CPU:0")
"""

from __future__ import annotations

import warnings
from typing import Any

from tfplace._devices import canonical_name

__all__ = ["assert_placed", "assert_not_placed"]


def assert_placed(log: Any, op: str, device: str) -> None:
    """`log.assert_placed(op, device)` (`PlacementLog.assert_placed`)."""
    __tracebackhide__ = True
    if not any(True for _ in _select(log, op, device)):
        where = ", ".join(log.devices_for(op)) or "no device"
        absent = _absent(log, device)
        raise AssertionError(f"expected {op} on {canonical_name(device)}, but it was placed on {where}:\n"
                             + (f"  ({absent})\n" if absent else "") + log.table(op))


def assert_not_placed(log: Any, op: str, device: str) -> None:
    """`log.assert_not_placed(op, device)` (`PlacementLog.assert_not_placed`)."""
    __tracebackhide__ = True
    hits = sum(1 for _ in _select(log, op, device))
    if hits:
        raise AssertionError(
            f"expected no {op} on {canonical_name(device)}, but {hits} event(s) were placed there:\n"
            f"{log.table(op)}")
    absent = _absent(log, device)
    if absent:
        warnings.warn(f"tfplace: assert_not_placed({op!r}, {device!r}) holds trivially: {absent}",
                      RuntimeWarning, stacklevel=3)  # the caller of PlacementLog.assert_not_placed


def _absent(log: Any, device: str) -> str:
    """That `device` exists neither in this process nor in the log, with the devices that do; "" when it exists."""
    from tfplace import _tensorflow

    wanted = canonical_name(device, origin="PlacementLog's argument device")
    existing = [canonical_name(name) for name in _tensorflow.logical_device_names()]
    if wanted in existing or any(r.device == wanted for r in log.records):
        return ""
    return f"{wanted} does not exist in this process; its devices are {', '.join(existing)}"


def _select(log: Any, op: str, device: str) -> list[Any]:
    where = canonical_name(device, origin="PlacementLog's argument device")
    return [r for r in log.records if r.op == op and r.device == where]
