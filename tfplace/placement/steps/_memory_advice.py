"""The `memory-growth` rule: a line whose bytes stay allocated step after step (`DeviceMemory.growth`), as advice.

Example:
    >>> from tfplace.placement.records._memory_figures import DeviceMemory, Growth, Memory
    >>> grew = DeviceMemory(40 * 2**20, 40 * 2**20, (), growth=(Growth("train.py:9", 4 * 2**20, 9),))
    >>> [(a.rule, a.severity, a.source) for a in memory_advice(Memory({"/device:GPU:0": grew}))]
    [('memory-growth', 'high', 'train.py:9')]
"""

from __future__ import annotations

from tfplace._names import size_text
from tfplace.placement.records._memory_figures import Memory
from tfplace.placement.steps._model import Advice
from tfplace.placement.steps._thresholds import RULES, severity

__all__ = ["memory_advice"]

_FIX = next(rule.fix for rule in RULES if rule.name == "memory-growth")


def memory_advice(memory: Memory) -> list[Advice]:
    """An `Advice` per growing line of each device, most bytes first; its severity the share of the device's peak
    the growth makes up by the block's end."""
    found = []
    for device, figures in memory.devices.items():
        for growth in figures.growth:
            total = growth.bytes_per_step * growth.steps
            share = total / figures.peak_bytes if figures.peak_bytes else 0.0
            found.append(Advice(
                "memory-growth", severity(share),
                f"{size_text(growth.bytes_per_step)} per step stays allocated on {device} from "
                f"{growth.source or 'an unknown line'}, over {growth.steps} steps: {size_text(total)}, "
                f"{share:.0%} of the device's peak", growth.source, _FIX,
                {"device": device, "bytes_per_step": growth.bytes_per_step, "steps": growth.steps, "share": share}))
    return sorted(found, key=lambda a: -a.evidence["bytes_per_step"] * a.evidence["steps"])
