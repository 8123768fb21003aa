"""The cluster's commands: `tfplace launch` and `tfplace merge`, their options and their usage errors.

Pure Python at import, as `tfplace.cli._cli` is: `--help` and usage errors never import TensorFlow. Every
usage error exits 2 (`parser.error`) before any task starts.

Example:
    >>> import argparse
    >>> commands = argparse.ArgumentParser(prog="tfplace").add_subparsers(dest="command")
    >>> parser = add_launch(commands)
    >>> parser.parse_args(["--workers=2", "--trace", "train.py"]).workers
    2
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any

from tfplace.cli._arguments import add_settings, check_outputs, check_script, checked_settings, number
from tfplace.config._settings import SETTINGS
from tfplace.placement.shown._report import ROWS

__all__ = ["LAUNCH_USAGE", "LAUNCH_VALUED", "add_launch", "add_merge", "launch", "merge"]

LAUNCH_USAGE = ("tfplace launch --workers=N [--ps=M] [--chief] [--trace] [--timing] [--memory] [--json=FILE] "
                "[--perfetto=FILE.json[.gz]] "
                "[--timeout=S] [--kill_after=S] [--top=N] [tfplace flags] script.py [--] [args ...]")
LAUNCH_VALUED = ("--workers", "--ps", "--json", "--perfetto", "--timeout", "--kill_after", "--top")


def add_launch(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "launch", usage=LAUNCH_USAGE, allow_abbrev=False, help="start a cluster on 127.0.0.1 and watch it as one",
        description="Starts a cluster on 127.0.0.1, each task a process with its TF_CONFIG, and prints each line a "
                    "task prints prefixed with its task ([worker 1] ). Workers (and the chief) run script.py; ps tasks "
                    "run tf.distribute.Server, and with --ps so do the workers while the chief coordinates. Exit "
                    "status: 0 when every task running the script exits 0, else the first failing task's; 124 after "
                    "--timeout, 128 + the signal's number after SIGINT, SIGTERM or SIGHUP (every task stopped: SIGTERM "
                    "or the SIGINT, SIGKILL --kill_after s later). tfplace flags reach the tasks as tfplace trace's "
                    "options under --trace, else as TFPLACE_<NAME> variables (read by tfplace.configure(), servers).")
    parser.add_argument("--workers", metavar="N", required=True, type=number("workers", int, 1), help="worker tasks")
    parser.add_argument("--ps", metavar="M", default=0, type=number("ps", int, 1),
                        help="ps tasks, each a tf.distribute.Server (ParameterServerStrategy); implies --chief")
    parser.add_argument("--chief", action="store_true", help="a chief task too, running the script (implied by --ps)")
    parser.add_argument("--trace", action="store_true", help="run the script's tasks under tfplace trace, check the "
                        "tasks against each other as they run (a mismatch stops the cluster: exit status 3) and "
                        "print one report for the cluster")
    for option in ("timing", "memory"):
        parser.add_argument(f"--{option}", action="store_true", help=f"with --trace: trace --{option} in each task")
    parser.add_argument("--json", metavar="FILE", help="with --trace: write the merged traces of the tasks as JSON")
    parser.add_argument("--perfetto", metavar="FILE.json[.gz]", help="with --trace: write one timeline of the tasks "
                        "that run the script (a process per task and device) for ui.perfetto.dev or chrome://tracing")
    parser.add_argument("--top", metavar="N", type=number("top", int, 1), default=ROWS,
                        help=f"with --trace: rows per section of the report (default {ROWS})")
    parser.add_argument("--timeout", metavar="S", type=number("timeout", float, 0, strict=True),
                        help="seconds before every task is stopped (exit status 124); default: none")
    parser.add_argument("--kill_after", metavar="S", type=number("kill_after", float, 0), default=10.0,
                        help="seconds from SIGTERM (or the SIGINT received) to SIGKILL in stopping tasks (default 10)")
    add_settings(parser, SETTINGS, "each task's configure()")
    parser.add_argument("script", help="the Python script the worker tasks (or the chief) run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return parser



def add_merge(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "merge", help="one report for a cluster: merge tfplace trace --json files, one per task", allow_abbrev=False,
        description="Merges the traces of a cluster's tasks (one tfplace trace --json file per task) and reports what "
                    "is uneven or costly, time and bytes per task and device, the traffic between tasks, then each "
                    "task's own sections. Exit 2, naming the file, for a file that cannot be read, is not a trace, "
                    "or is a second trace of one task.")
    parser.add_argument("traces", nargs="+", metavar="TRACE.json", help="one tfplace trace --json file per task")
    parser.add_argument("--json", metavar="FILE", help="write the merged cluster JSON (tfplace-cluster/1)")
    parser.add_argument("--top", metavar="N", type=number("top", int, 1), default=ROWS,
                        help=f"rows per report section (default {ROWS})")
    return parser


def launch(parser: argparse.ArgumentParser, args: argparse.Namespace, passed: list[str]) -> int:
    """Runs `tfplace launch` (`tfplace.cli._launch.launch`); `passed`: the arguments after `--`."""
    from tfplace.cli._launch import Options
    from tfplace.cli._launch import launch as start

    check_script(parser, args, "launch", ("--workers", "--ps", "--chief", "--trace", "--timing", "--memory", "--json",
                                          "--perfetto", "--timeout", "--kill_after", "--top"))
    for option in ("json", "perfetto", "timing", "memory"):
        if getattr(args, option) and not args.trace:
            parser.error(f"--{option} (from option --{option}) needs --trace: allowed is tfplace launch --trace "
                         f"--{option}{'=FILE' if option in ('json', 'perfetto') else ''} ...")
    check_outputs(parser, args, ("json", "perfetto"))
    settings = checked_settings(parser, args)
    options = Options(**{field.name: getattr(args, field.name) for field in dataclasses.fields(Options)
                         if field.name != "settings"}, settings=settings)
    return start(args.script, [*args.args, *passed], options)


def merge(args: argparse.Namespace) -> int:
    """Runs `tfplace merge`: prints the report of the traces, merged, and writes `--json` whole.

    Returns:
      0, or 2 after one line on standard error naming the file that cannot be merged or written.
    """
    from tfplace._files import write_json
    from tfplace.cluster._merge import MergeError, merge_files
    from tfplace.cluster._report import render

    if args.json is not None:
        target = os.path.realpath(args.json)
        problem = ("is one of the traces to merge, which it would overwrite: allowed is another file"
                   if any(os.path.realpath(p) == target for p in args.traces) else
                   "cannot be written: allowed is a file in an existing folder"
                   if os.path.isdir(target) or not os.path.isdir(os.path.dirname(target)) else "")
        if problem:
            print(f"tfplace merge: --json={args.json!r} (from option --json) {problem}", file=sys.stderr)
            return 2
    try:
        merged = merge_files(list(args.traces))
    except MergeError as err:
        print(err, file=sys.stderr)
        return 2
    print(render(merged, top=args.top))
    if args.json is not None:
        write_json(args.json, merged)
        print(f"tfplace merge: wrote {len(merged['tasks'])} task(s) to {args.json}")
    return 0
