"""Runs every benchmark, prints one table and writes benchmarks/RESULTS.md.

Each benchmark runs in its own process (TensorFlow's device configuration is
fixed per process). All figures are ratios or rates measured side by side in
one run, medians of repeated rounds; on a shared 2-core machine expect a few
percent of noise between runs.

    python benchmarks/run_all.py [--quick] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from common import print_table

HERE = Path(__file__).resolve().parent
SUITES = [
    ("d2l GPUs chapter exercises", "bench_gpus_chapter", "run(quick={quick})"),
    ("device helpers", "bench_devices", "run()"),
    ("the GPU doctor", "bench_doctor", "run()"),
    ("placement records, guards and trace", "bench_capture", "run(ops={ops})"),
    ("what a capture costs beside TensorFlow's floor", "bench_overhead", "run()"),
    ("the op callback's own work", "bench_callback", "run()"),
    ("transfers and timing", "bench_transfers", "run()"),
    ("tf.compat.v1 Session runs", "bench_sessions", "run()"),
    ("memory per device", "bench_memory", "run()"),
    ("replication", "bench_replication", "run()"),
    ("startup: the pytest plugin and the command line", "bench_startup", "run()"),
    ("clusters: tfplace launch --trace", "bench_cluster", "run()"),
    ("conformance: captures against TensorFlow's own placement log", "conformance.py", "run()"),
]


def _suite(module: str, call: str) -> list[dict[str, str]]:
    if module.endswith(".py"):  # a script whose name is taken by a package it imports: run it by path
        code = (f"import json, runpy\nrun = runpy.run_path({module!r}, run_name='bench')['run']\n"
                f"print('ROWS:' + json.dumps({call}))")
    else:
        code = f"import json, {module}\nprint('ROWS:' + json.dumps({module}.{call}))"
    env = dict(os.environ)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=HERE, env=env, check=True)
    line = next(text for text in done.stdout.splitlines() if text.startswith("ROWS:"))
    return json.loads(line[5:])


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo", encoding="utf-8")
                  if line.startswith("model name")), platform.processor())
    import tensorflow as tf

    return (f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, TensorFlow {tf.__version__}, "
            f"{platform.system()} {platform.release()}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer sizes and ops")
    parser.add_argument("--no-write", action="store_true", help="do not write RESULTS.md")
    args = parser.parse_args()
    started = time.time()
    sections = []
    for title, module, call in SUITES:
        rows = _suite(module, call.format(quick=args.quick, ops=5_000 if args.quick else 20_000))
        print(f"\n## {title}")
        print_table(rows)
        sections.append((title, rows))
    took = time.time() - started
    print(f"\n({took:.0f} s)")
    if args.no_write:
        return
    lines = ["# Benchmark results", "",
             f"Machine: {machine()}. Run: `python benchmarks/run_all.py`{' --quick' if args.quick else ''}, "
             f"{time.strftime('%Y-%m-%d')}, {took:.0f} s.", "",
             "Every figure is a ratio or rate measured side by side in one run (medians of repeated rounds, "
             "alternating candidate and baseline). The machine is shared and has 2 cores: between runs, "
             "ratios near 1 move by a few percent and GFLOP/s by more. No test asserts these numbers.", ""]
    for title, rows in sections:
        columns = list(rows[0])
        lines += [f"## {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(r[c] for c in columns) + " |" for r in rows]
        lines.append("")
    (HERE / "RESULTS.md").write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()
