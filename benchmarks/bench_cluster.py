"""Cost of `tfplace launch --trace` on a cluster, per step, as a ratio measured side by side.

Two MultiWorkerMirroredStrategy workers on 127.0.0.1 run a custom loop (`tests/cluster/mwms_loop.py`:
a gradient all-reduce per step); each worker prints its time per step after the first. The same
cluster is launched with `--trace` (every task traced, checked as it runs and merged) and without it,
alternately; the figure is the median over rounds of the slower worker's time per step, traced over
untraced (goal <= 1.10). The launch's own start and the merge are not steps.

    python benchmarks/bench_cluster.py [--steps=1000] [--rounds=3]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

from common import print_table, row

ROOT = Path(__file__).resolve().parents[1]
LOOP = ROOT / "tests" / "cluster" / "mwms_loop.py"
_PER_STEP = re.compile(r"^\[worker \d\] worker \d: done, .*; ([\d.]+) ms per step$", re.M)


def per_step(traced: bool, steps: int) -> float:
    """The slower worker's milliseconds per step in one launch of the cluster."""
    command = [sys.executable, "-m", "tfplace", "launch", "--workers=2", *(["--trace"] if traced else []),
               "--timeout=300", str(LOOP), "--", f"--steps={steps}"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=360)
    found = [float(ms) for ms in _PER_STEP.findall(done.stdout)]
    if done.returncode != 0 or len(found) != 2:
        raise RuntimeError(f"{' '.join(command)} exited with {done.returncode}: {done.stderr[-2000:]}")
    return max(found)


def run(steps: int = 1000, rounds: int = 3) -> list[dict[str, str]]:
    pairs = []
    for _ in range(rounds):
        traced, plain = per_step(True, steps), per_step(False, steps)
        pairs.append((traced / plain, traced, plain))
    ratio = statistics.median(p[0] for p in pairs)
    return [row("launch --trace vs launch, per step (2 MWMS workers, all-reduce per step)", f"{ratio:.2f}", "<= 1.10",
                f"{statistics.median(p[1] for p in pairs):.2f} vs {statistics.median(p[2] for p in pairs):.2f} ms "
                f"per step, median of {rounds} rounds of {steps} steps")]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    flags = parser.parse_args()
    print_table(run(flags.steps, flags.rounds))
