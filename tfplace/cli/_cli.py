"""The `tfplace` command line: `tfplace devices`, `tfplace env`, `tfplace doctor`, `tfplace trace`, `tfplace diff`
and `tfplace launch`.

Neither `devices` nor `env` starts TensorFlow's runtime or allocates GPU
memory: devices are listed from the physical inventory and the pending
configuration; TensorFlow's C++ INFO start-up lines are left out unless the user
set `TF_CPP_MIN_LOG_LEVEL`. `doctor` says why TensorFlow does (not) use the GPUs, without importing
TensorFlow here (`tfplace.machine`). `trace` runs a script under a capture (see
`tfplace.cli._trace` and `tfplace.cli._script`); `diff` compares two of its `--json` traces
(see `tfplace.cli._diff`); `launch` starts a cluster on 127.0.0.1 and `merge` reports a cluster's traces as
one (see `tfplace.cli._cluster`). How arguments are read: `tfplace.cli._arguments`.

    tfplace devices --logical_cpus=4     # the devices a program would see
    tfplace env --json                   # versions, build and placement env vars
    tfplace doctor                       # why TensorFlow does (not) use the GPUs, and the fix
    tfplace trace --logical_cpus=2 train.py --epochs=1
    tfplace diff laptop.json server.json  # exit 1 when a compute op moved or a transfer appeared
    tfplace launch --workers=2 train.py   # each line prefixed with its task: [worker 1] ...
    tfplace merge worker-0.json worker-1.json  # one report for the cluster
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
import traceback
from typing import Any, Optional, Sequence

# pure Python: --help and usage errors never import TensorFlow
from tfplace.cli._arguments import absl_booleans, add_settings, check_outputs, check_script, checked_settings, given
from tfplace.cli._cluster import LAUNCH_VALUED, add_launch, add_merge
from tfplace.cli._cluster import launch as run_launch
from tfplace.cli._cluster import merge as run_merge
from tfplace.cli._profile import add_profile, run_profile
from tfplace.config._settings import SETTINGS
from tfplace.placement.shown._report import ROWS

__all__ = ["main"]

TRACE_USAGE = ("tfplace trace [tfplace flags] [--json=FILE] [--plot=FILE.png] [--perfetto=FILE.json[.gz]] [--timing] "
               "[--profile_dir=DIR] [--memory] [--top=N] [--quiet] script.py [--] [args ...]")


def _add_trace(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "trace", usage=TRACE_USAGE, allow_abbrev=False,
        help="run a script under a capture and report where its placement goes wrong",
        description="Runs script.py as __main__ with its own arguments, then reports ops per device, ops on the "
                    "CPU while a GPU was visible, and implicit copies, each with its source line. "
                    "The script's exit status is kept; stopped by SIGINT, SIGTERM or SIGHUP, the trace "
                    "still reports what ran and writes its files, then exits with 128 + the signal's number. "
                    "Boolean flags are written as absl writes them: "
                    "--soft_placement, --nosoft_placement or --soft_placement=false.")
    add_settings(parser, SETTINGS, "configure() before the script")
    parser.add_argument("--json", metavar="FILE", help="write every record and copy as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="draw ops per device (needs matplotlib: .[plot]); "
                                                          "the extension picks the format: .png, .svg, .pdf, ...")
    parser.add_argument("--perfetto", metavar="FILE.json[.gz]",
                        help="write a timeline that ui.perfetto.dev and chrome://tracing open (ops per device in "
                             "order, transfers as arrows with bytes, live bytes per device with --memory)")
    parser.add_argument("--timing", action="store_true",
                        help="run the script under TensorFlow's profiler: busy time per device and op, time shares")
    parser.add_argument("--profile_dir", metavar="DIR", help="with --timing: keep TensorFlow's own profile under "
                        "DIR/plugins/profile/ for TensorBoard's profile plugin (tensorboard --logdir=DIR)")
    parser.add_argument("--memory", action="store_true",
                        help="count the tensors and variables the script makes per device: peak, live, top lines")
    parser.add_argument("--top", metavar="N", type=int, default=ROWS, help=f"rows per report section (default {ROWS})")
    parser.add_argument("--quiet", action="store_true", help="print nothing: only write --json and --plot")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return parser


def _trace(parser: argparse.ArgumentParser, args: argparse.Namespace, passed: list[str]) -> int:
    """Runs `tfplace trace`; `passed` are the arguments after a `--`, given to the script unchecked.

    Every usage error is found before TensorFlow is imported and before the script runs.
    """
    check_script(parser, args, "trace", ("--json", "--plot", "--perfetto", "--profile_dir", "--top", "--quiet"))
    if args.profile_dir is not None:
        if not args.timing and not args.memory:
            parser.error(f"--profile_dir={args.profile_dir!r} (from option --profile_dir) needs --timing or --memory: "
                         f"allowed is tfplace trace --timing --profile_dir={args.profile_dir} ...")
        if os.path.exists(args.profile_dir) and not os.path.isdir(args.profile_dir) or \
                not os.path.isdir(os.path.dirname(os.path.abspath(args.profile_dir))):
            parser.error(f"--profile_dir={args.profile_dir!r} (from option --profile_dir) cannot hold a profile: "
                         "allowed is a folder, or a new one in an existing folder")
    if args.top < 1:
        parser.error(f"--top={args.top} (from option --top) is not allowed: expected a whole number >= 1")
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        parser.error("--plot needs matplotlib, which is not installed: pip install 'tfplace[plot]' "
                     "(or pip install matplotlib)")
    check_outputs(parser, args, ("json", "plot", "perfetto"))
    outputs = {option: os.path.abspath(getattr(args, option)) for option in ("json", "plot", "perfetto")
               if getattr(args, option)}
    for (one, a), (other, b) in itertools.combinations(outputs.items(), 2):
        if os.path.realpath(a) == os.path.realpath(b):
            parser.error(f"--{one}={getattr(args, one)!r} and --{other}={getattr(args, other)!r} (from options "
                         f"--{one} and --{other}) name the same file {os.path.realpath(a)}: allowed are two different "
                         "files, one per output")
    settings = checked_settings(parser, args)
    from tfplace.cli import _script

    script_args = [*args.args, *passed]
    if args.memory:  # a CPU's allocator reports every allocation only as a BFC allocator, chosen at TensorFlow's start
        os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "1")
    out = _script.Output()  # standard output now: the report reaches it whatever the script does to sys.stdout
    started = os.getpid()
    opened: dict[str, Any] = {}
    with _script.stopping_signals(), contextlib.ExitStack() as stack:
        def start() -> None:  # when the script imports TensorFlow: what it set before applies, as under python
            import tfplace
            from tfplace.cli import _trace

            try:
                tfplace.configure(**settings)
            except tfplace.Error as err:
                opened["error"] = f"tfplace trace: error: {err}"
                raise SystemExit(2) from None
            kept = os.path.abspath(args.profile_dir) if args.profile_dir is not None else None
            opened["tracing"] = stack.enter_context(_trace.tracing(timing=args.timing, memory=args.memory,
                                                                   profile_dir=kept))

        with _script.after_import("tensorflow", start):
            status = _script.run_main(args.script, script_args)
        if os.getpid() != started:  # a child the script forked, ending with sys.exit(): its parent reports
            return status
        if "error" in opened:
            _note(opened["error"])
            return 2
        if "tracing" in opened:
            opened["tracing"].exited(status)
    if "tracing" not in opened:  # TensorFlow now would start after Python's shutdown of the script's threads
        _note(f"tfplace trace: {args.script} did not import TensorFlow: nothing to trace (no report"
              f"{', no files' if outputs else ''})")
        out.close()
        return status
    import tfplace

    log = opened["tracing"].log
    try:
        _outputs(out, log, args, script_args, status, outputs, gpus_visible=tfplace.num_gpus() > 0)
    except KeyboardInterrupt as error:  # a second interrupt: files are whole or absent, the rest is skipped
        _note(f"tfplace trace: interrupted ({error or 'SIGINT'}) while writing its report and files; "
              "those not yet written were left as they were")
        return _script.interrupt_status(error)
    except Exception as error:  # pylint: disable=broad-except  # tfplace's own defect: the script's status stays
        traceback.print_exc(file=sys.__stderr__)
        _note(f"tfplace trace: its report failed ({type(error).__name__}: {error}), a defect of tfplace (please "
              f"report it with the traceback above); the exit status is the script's ({status})")
    finally:
        out.close()
    return status


def _diff(args: argparse.Namespace) -> int:
    """Runs `tfplace diff`: 1 when a compute op moved or a transfer appeared, 0 when nothing did, 2 for an
    unreadable trace (one line naming it)."""
    from tfplace.cli import _diff as diffing

    try:
        found = diffing.diff(diffing.read(args.a), diffing.read(args.b))
    except diffing.DiffError as err:
        print(err, file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(diffing.to_json(found, args.a, args.b), indent=2))
    else:
        print(diffing.render(found, args.a, args.b, top=args.top))
    return found.status


def _note(text: str) -> None:
    """A line on the process's standard error, whatever the script did to `sys.stderr`."""
    try:
        print(text, file=sys.__stderr__, flush=True)
    except (AttributeError, OSError, ValueError):  # no standard error left to say it on
        pass


def _outputs(out: Any, log: Any, args: argparse.Namespace, script_args: Sequence[str], status: int,
             paths: dict[str, str], *, gpus_visible: bool) -> None:
    """The report on standard output, then `--json` and `--plot` at `paths` (absolute: the script may
    have changed the working directory)."""
    from tfplace import _files
    from tfplace.cli import _trace

    found = _trace.findings(log, gpus_visible=gpus_visible)
    if not args.quiet and not out.write(_trace.report(log, found, top=args.top) + "\n"):
        _note("tfplace trace: the report was not printed: standard output is closed (a pipe whose reader left)")
    if "json" in paths:
        _files.write_json(paths["json"], _trace.to_json(log, found, script=args.script, args=script_args,
                                                        exit_status=status))
        args.quiet or out.write(f"tfplace trace: wrote {len(log.records)} records and {len(log.copies)} copies to "
                                f"{paths['json']}\n")
    if "perfetto" in paths:
        log.to_perfetto(paths["perfetto"])
        args.quiet or out.write(f"tfplace trace: wrote a timeline of {len(log.records)} records to {paths['perfetto']} "
                                "(open it in ui.perfetto.dev or chrome://tracing)\n")
    if "plot" in paths:
        _trace.plot(log, paths["plot"], top=args.top,
                    title=f"{'time' if args.timing else 'op executions'} per device: {os.path.basename(args.script)}")
        args.quiet or out.write(f"tfplace trace: drew {'time' if args.timing else 'executions'} per device and "
                                f"bytes per direction in {paths['plot']}\n")


_QUIET = "_TFPLACE_QUIET_START"  # set by `_quietly()` for its child
# A line of TensorFlow's C++ INFO log ("I1124 12:51:13.123456  9212 port.cc:153] ..."; "I0000 00:00:<epoch>"
# before absl's log is initialized), and absl's note that such lines go to stderr before its initialization.
_INFO_LINE = re.compile(r"^I\d{4} \d\d:\d\d:[\d.]+ +\d+ [^ \]]+:\d+\] ")
_ABSL_NOTE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def _add_doctor(commands: Any) -> None:
    doctor = commands.add_parser(
        "doctor", help="why TensorFlow does (not) use this machine's GPUs, and the fix (exit 1 when a GPU the driver "
                       "reports will not be used)", allow_abbrev=False)
    doctor.add_argument("--json", action="store_true", help="print JSON (format tfplace-doctor/1)")
    doctor.add_argument("--run", action="store_true", help="also run a MatMul on each GPU TensorFlow lists, in a "
                                                          "child process, and time its first call")
    doctor.add_argument("--save", metavar="FILE", help="write this machine's facts (tfplace-machine/1) to FILE")
    doctor.add_argument("--facts", metavar="FILE", help="explain facts saved elsewhere (tfplace doctor --save) "
                                                        "instead of this machine")


def _doctor(args: argparse.Namespace) -> int:
    from tfplace.machine import _doctor, _facts

    if args.facts and (args.run or args.save):
        print(f"tfplace doctor: error: --facts={args.facts} explains another machine's facts; --run and --save read "
              "this machine: give one or the other", file=sys.stderr)
        return 2
    try:
        diagnosis = _doctor.doctor(facts=args.facts, run=args.run)
    except _facts.FactsError as err:
        print(f"tfplace doctor: error: {err}", file=sys.stderr)
        return 2
    if args.save:
        try:
            _facts.save(diagnosis.facts, args.save)
        except OSError as err:
            print(f"tfplace doctor: error: --save={args.save}: {err}", file=sys.stderr)
            return 2
    text = json.dumps(diagnosis.to_json(), indent=2) if args.json else str(diagnosis)
    if args.save and not args.json:
        text += f"\nfacts saved to {args.save} (explain them anywhere: tfplace doctor --facts={args.save})"
    return _emit(text, 0 if diagnosis.ok else 1)


def _emit(text: str, status: int) -> int:
    """Prints a report through `_script.Output` (no traceback when the reader stopped: `tfplace env | head`)."""
    from tfplace.cli import _script

    sys.stdout.flush()
    return status if _script.Output().write(text + "\n") else 141  # 128 + SIGPIPE, as a shell reports it


def _quietly(argv: Sequence[str]) -> int:
    """Runs `tfplace devices|env` in a child process without TensorFlow's C++ INFO start-up lines.

    `TF_CPP_MIN_LOG_LEVEL=1` hides the INFO lines TensorFlow logs once its log is set up; the lines it
    logs before (oneDNN's "custom operations are on" notice) ignore the variable, so the child's
    standard error is read here and every other line (warnings, errors) passed on as it comes. The
    child's standard output is this process's own. Used only when the user did not set
    `TF_CPP_MIN_LOG_LEVEL` (then every line shows).
    """
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1", _QUIET: "1"}
    child = subprocess.Popen([sys.executable, "-m", "tfplace", *argv], env=env, stderr=subprocess.PIPE, text=True,
                             errors="backslashreplace")
    assert child.stderr is not None
    try:
        for line in child.stderr:
            if not _INFO_LINE.match(line) and line.rstrip("\n") != _ABSL_NOTE:
                sys.stderr.write(line)
                sys.stderr.flush()
        return child.wait()
    except KeyboardInterrupt:  # Ctrl-C reached the child too
        return child.wait()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns the exit status (the script's, for `trace`)."""
    parser = argparse.ArgumentParser(prog="tfplace", description="TensorFlow device placement: see it.")
    commands = parser.add_subparsers(dest="command", required=True)
    devices = commands.add_parser("devices", help="physical and logical devices (starts nothing)", allow_abbrev=False)
    add_settings(devices, [setting for setting in SETTINGS if setting.fixed], "preview")
    devices.add_argument("--json", action="store_true", help="print JSON")
    env = commands.add_parser("env", help="versions, build info and placement environment variables")
    env.add_argument("--json", action="store_true", help="print JSON")
    _add_doctor(commands)
    trace = _add_trace(commands)
    add_profile(commands)
    launch = add_launch(commands)
    compare = commands.add_parser(
        "diff", help="what moved between two tfplace trace --json runs (exit 1 if a compute op moved or a transfer "
                     "appeared)", allow_abbrev=False)
    compare.add_argument("a", metavar="A.json", help="the earlier trace (tfplace trace --json=A.json ...), a task of a "
                                                     "merged cluster (c.json:worker:0) or a merged cluster")
    compare.add_argument("b", metavar="B.json", help="the later trace (or task, or cluster)")
    compare.add_argument("--json", action="store_true", help="print JSON")
    compare.add_argument("--top", type=int, default=ROWS, help=f"rows per section (default {ROWS})")
    add_merge(commands)
    argv = list(sys.argv[1:] if argv is None else argv)
    passed: list[str] = []
    if argv[:1] in (["trace"], ["launch"]) and "--" in argv:
        argv, passed = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    if argv[:1] in (["trace"], ["devices"], ["launch"]):
        argv = argv[:1] + (absl_booleans(trace, argv[1:], ("--json", "--plot", "--perfetto", "--profile_dir", "--top"))
                           if argv[0] == "trace"
                           else absl_booleans(launch, argv[1:], LAUNCH_VALUED) if argv[0] == "launch"
                           else absl_booleans(devices, argv[1:]))
    args = parser.parse_args(argv)
    if args.command == "trace":
        return _trace(trace, args, passed)
    if args.command == "launch":
        return run_launch(launch, args, passed)
    if args.command == "diff":
        return _diff(args)
    if args.command == "profile":
        return run_profile(args)
    if args.command == "merge":
        return run_merge(args)
    if args.command == "doctor":
        return _doctor(args)
    environ = dict(os.environ)
    if environ.pop(_QUIET, None) is not None:  # the quiet run's child: report the user's environment
        environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
    elif "TF_CPP_MIN_LOG_LEVEL" not in environ:
        return _quietly(argv)
    import tfplace
    from tfplace.cli import _environment as _machine

    try:
        report = _machine.devices(given(args)) if args.command == "devices" else _machine.environment(environ)
    except tfplace.Error as err:
        print(f"tfplace {args.command}: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        return _emit(json.dumps(report, indent=2), 0)
    return _emit(_machine.devices_text(report) if args.command == "devices" else _machine.environment_text(report), 0)


if __name__ == "__main__":
    sys.exit(main())
