"""Helpers shared by the benchmarks: side-by-side timing and the results table.

Timings on a shared 2-core machine are noisy, so every figure is a ratio of
two things measured alternately in the same run, reported as the median of
several rounds.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable


def per_call(fn: Callable[[], object], calls: int) -> float:
    """Seconds per call of `fn`, over `calls` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def ratio(candidate: Callable[[], object], baseline: Callable[[], object], calls: int,
          rounds: int = 7) -> tuple[float, float, float]:
    """(median candidate/baseline ratio, median candidate s/call, median baseline s/call), alternating rounds."""
    per_call(candidate, max(1, calls // 10))
    per_call(baseline, max(1, calls // 10))
    pairs = []
    for _ in range(rounds):
        c = per_call(candidate, calls)
        b = per_call(baseline, calls)
        pairs.append((c / b, c, b))
    return (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs),
            statistics.median(p[2] for p in pairs))


def row(name: str, value: str, target: str = "", note: str = "") -> dict[str, str]:
    return {"benchmark": name, "result": value, "target": target, "note": note}


def print_table(rows: list[dict[str, str]]) -> None:
    widths = {k: max(len(k), *(len(r[k]) for r in rows)) for k in rows[0]}
    print(" | ".join(k.ljust(widths[k]) for k in widths))
    print("-|-".join("-" * widths[k] for k in widths))
    for r in rows:
        print(" | ".join(r[k].ljust(widths[k]) for k in widths))
