"""Conformance table: tfplace's captures against TensorFlow's own placement log, program by program.

Runs every program of tests/conformance/programs/ under the harness (a subprocess each, with
TensorFlow's placement log on) in each oneDNN mode and prints one row per run: whether the
eager events are equal (TensorFlow's `Executing op` lines vs the capture's execute/failed
records; "no (-missing/+extra)"), function nodes of TensorFlow's placer log the capture accounts
for (matched/total), capture `place` records TensorFlow's log lacks (extras), implicit copies
(TensorFlow's warn-policy lines that must be captured, "+N exempt" for explicit copies and
host-memory inputs, / the capture's copies), `complete` ("(!)" when not what the program
expects) and the wall time of the run. `--details` prints every difference.

    python benchmarks/conformance.py [--onednn 0,1] [--details] [--keep DIR] [program ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import print_table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # before this folder: `conformance` is the test package

from conformance import compare  # noqa: E402


def run(modes: tuple[str, ...] = ("0", "1"), programs: list[Path] | None = None, details: bool = False,
        keep: Path | None = None) -> list[dict[str, str]]:
    rows = []
    for mode in modes:
        for program in programs or compare.programs():
            result = compare.run_program(program, onednn=mode, keep=keep)
            rows.append(result.row())
            if details:
                print(compare.describe(result) + "\n", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("programs", nargs="*", help="program stems or files (default: all)")
    parser.add_argument("--onednn", default="0,1", help="TF_ENABLE_ONEDNN_OPTS values, comma-separated")
    parser.add_argument("--details", action="store_true", help="print every difference")
    parser.add_argument("--keep", default=None, help="folder for each run's stdout, stderr and capture JSON")
    args = parser.parse_args()
    chosen = [Path(p) if p.endswith(".py") else compare.PROGRAMS / f"{p}.py" for p in args.programs] or None
    modes = tuple(m.strip() for m in args.onednn.split(",") if m.strip())
    rows = run(modes, chosen, args.details, Path(args.keep) if args.keep else None)
    print_table(rows)


if __name__ == "__main__":
    main()
