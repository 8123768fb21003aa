"""The `tfplace` command line: `tfplace devices`, `tfplace env`, `tfplace trace`, `tfplace diff` and `tfplace launch`.

Neither `devices` nor `env` starts TensorFlow's runtime or allocates GPU
memory: devices are listed from the physical inventory and the pending
configuration; TensorFlow's C++ INFO start-up lines are left out unless the user
set `TF_CPP_MIN_LOG_LEVEL`. `trace` runs a script under a capture (see
`tfplace._trace` and `tfplace._script`); `diff` compares two of its `--json` traces
(see `tfplace._diff`); `launch` starts a cluster on 127.0.0.1 (see `tfplace.cluster._launch`).

    tfplace devices --logical_cpus=4     # the devices a program would see
    tfplace env --json                   # versions, build and placement env vars
    tfplace trace --logical_cpus=2 train.py --epochs=1
    tfplace diff laptop.json server.json  # exit 1 when a compute op moved or a transfer appeared
    tfplace launch --workers=2 train.py   # each line prefixed with its task: [worker 1] ...
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
from typing import Any, Optional, Sequence

from tfplace._errors import ConfigurationError
# pure Python: --help and usage errors never import TensorFlow
from tfplace.config._settings import BOOLEAN, BY_NAME, NAMES, SETTINGS, Setting, Sourced, check_conflicts
from tfplace.placement._report import ROWS

__all__ = ["main"]

def _option(setting: Setting):
    """An argparse type reading `--<name>` as `configure()` reads that setting."""
    def parse(text: str) -> Any:
        try:
            return setting.parse(text, f"option --{setting.name}")
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return parse


TRACE_USAGE = ("tfplace trace [tfplace flags] [--json=FILE] [--plot=FILE.png] [--timing] [--memory] [--top=N] script.py [--] "
               "[args ...]")
BOOLEANS = tuple(setting.name for setting in SETTINGS if setting.kind is BOOLEAN)
LAUNCH_USAGE = ("tfplace launch --workers=N [--ps=M] [--chief] [--trace] [--timing] [--memory] [--json=FILE] "
                "[--timeout=S] [--kill_after=S] [--top=N] [tfplace flags] script.py [--] [args ...]")
LAUNCH_VALUED = ("--workers", "--ps", "--json", "--timeout", "--kill_after", "--top")


class _AbslBoolean(argparse.Action):
    """absl's boolean flag: `--name` sets True, `--noname` False; it never takes the next argument."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        setattr(namespace, self.dest, option_string == f"--{self.dest}")


def _add_settings(parser: argparse.ArgumentParser, settings: Sequence[Setting], what: str) -> None:
    """One option per setting, read as `configure()` reads it; booleans written as absl writes them."""
    for setting in settings:
        about = f"{what}: {setting.help} Allowed: {setting.kind.allowed}."
        if setting.kind is BOOLEAN:
            parser.add_argument(f"--{setting.name}", f"--no{setting.name}", dest=setting.name, action=_AbslBoolean,
                                help=about)
        else:
            parser.add_argument(f"--{setting.name}", type=_option(setting), help=about)


def _given(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line, by name."""
    return {name: getattr(args, name) for name in NAMES if getattr(args, name, None) is not None}


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
    _add_settings(parser, SETTINGS, "configure() before the script")
    parser.add_argument("--json", metavar="FILE", help="write every record and copy as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="draw ops per device (needs matplotlib: .[plot]); "
                                                          "the extension picks the format: .png, .svg, .pdf, ...")
    parser.add_argument("--timing", action="store_true",
                        help="run the script under TensorFlow's profiler: busy time per device and op, time shares")
    parser.add_argument("--memory", action="store_true",
                        help="count the tensors and variables the script makes per device: peak, live, top lines")
    parser.add_argument("--top", metavar="N", type=int, default=ROWS, help=f"rows per report section (default {ROWS})")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return parser


def _number(option: str, kind: type, least: float, strict: bool = False) -> Any:
    """An argparse type reading `--<option>` as a `kind` >= `least` (> with `strict`), saying what is allowed."""
    def parse(text: str) -> Any:
        value = kind(text) if re.fullmatch(r"\d+" if kind is int else r"\d*\.?\d+", text.strip()) else None
        if value is None or value < least or (strict and value == least):
            raise argparse.ArgumentTypeError(f"--{option}={text!r} (from option --{option}) is not allowed: expected "
                                             f"{'a whole number' if kind is int else 'seconds'} "
                                             f"{'>' if strict else '>='} {least:g}")
        return value
    return parse


def _add_launch(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "launch", usage=LAUNCH_USAGE, allow_abbrev=False, help="start a cluster on 127.0.0.1 and watch it as one",
        description="Starts a cluster on 127.0.0.1, each task a process with its TF_CONFIG, and prints each line a "
                    "task prints prefixed with its task ([worker 1] ). Workers (and the chief) run script.py; ps tasks "
                    "run tf.distribute.Server, and with --ps so do the workers while the chief coordinates. Exit "
                    "status: 0 when every task running the script exits 0, else the first failing task's; 124 after "
                    "--timeout, 128 + the signal's number after SIGINT, SIGTERM or SIGHUP (every task stopped: SIGTERM "
                    "or the SIGINT, SIGKILL --kill_after s later). tfplace flags reach the tasks as tfplace trace's "
                    "options under --trace, else as TFPLACE_<NAME> variables (read by tfplace.configure(), servers).")
    parser.add_argument("--workers", metavar="N", required=True, type=_number("workers", int, 1), help="worker tasks")
    parser.add_argument("--ps", metavar="M", default=0, type=_number("ps", int, 1),
                        help="ps tasks, each a tf.distribute.Server (ParameterServerStrategy); implies --chief")
    parser.add_argument("--chief", action="store_true", help="a chief task too, running the script (implied by --ps)")
    parser.add_argument("--trace", action="store_true", help="run the script's tasks under tfplace trace, check the "
                        "tasks against each other as they run (a mismatch stops the cluster: exit status 3) and "
                        "print one report for the cluster")
    for option in ("timing", "memory"):
        parser.add_argument(f"--{option}", action="store_true", help=f"with --trace: trace --{option} in each task")
    parser.add_argument("--json", metavar="FILE", help="with --trace: write the merged traces of the tasks as JSON")
    parser.add_argument("--top", metavar="N", type=_number("top", int, 1), default=ROWS,
                        help=f"with --trace: rows per section of the report (default {ROWS})")
    parser.add_argument("--timeout", metavar="S", type=_number("timeout", float, 0, strict=True),
                        help="seconds before every task is stopped (exit status 124); default: none")
    parser.add_argument("--kill_after", metavar="S", type=_number("kill_after", float, 0), default=10.0,
                        help="seconds from SIGTERM (or the SIGINT received) to SIGKILL in stopping tasks (default 10)")
    _add_settings(parser, SETTINGS, "each task's configure()")
    parser.add_argument("script", help="the Python script the worker tasks (or the chief) run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return parser


def _launch(parser: argparse.ArgumentParser, args: argparse.Namespace, passed: list[str]) -> int:
    """Runs `tfplace launch` (`tfplace.cluster._launch.command`): usage errors exit 2 before any task starts."""
    from tfplace.cluster._launch import command
    return command(parser, args, passed, _given(args))


def check_script(parser: argparse.ArgumentParser, args: argparse.Namespace, command: str, own: Sequence[str]) -> None:
    """Usage errors of a command that runs a script: one of its options (`own`, or a tfplace flag) written
    after the script, or a script that is not a file."""
    options = {*own, *(f"--{name}" for name in NAMES), *(f"--no{name}" for name in BOOLEANS)}
    for arg in args.args:
        if arg.split("=", 1)[0] in options:
            parser.error(f"{arg!r} comes after the script {args.script!r} (from the command line): tfplace {command}'s "
                         f"options go before the script, as in: tfplace {command} {arg} {args.script} ...; to pass it "
                         "to the script itself, put it after '--'")
    if not os.path.isfile(args.script):
        parser.error(f"script {args.script!r} (from argument script) is not a file: give the path of a Python script")


def _absl_booleans(parser: argparse.ArgumentParser, argv: Sequence[str], own: Sequence[str] = ()) -> list[str]:
    """A command's arguments, with each `--name=value` of a boolean flag before the script (if any)
    read as `--name` or `--noname`; the script and its own arguments are left as they are. `own`: the
    command's other options that take a value."""
    takes_value = {*own, *(f"--{name}" for name in NAMES if name not in BOOLEANS)}
    read: list[str] = []
    rest = iter(argv)
    for arg in rest:
        if not arg.startswith("-") or arg == "-":  # the script
            return [*read, arg, *rest]
        option, given, text = arg.partition("=")
        if given and option[2:] in BOOLEANS and option.startswith("--"):
            try:
                arg = option if BY_NAME[option[2:]].parse(text, f"option {option}") else f"--no{option[2:]}"
            except ValueError as err:
                parser.error(str(err))
        read.append(arg)
        if arg in takes_value:
            read.extend(itertools.islice(rest, 1))
    return read


def _plot_formats() -> dict[str, str]:
    """The file extensions matplotlib can write, with what each is."""
    from matplotlib.backend_bases import FigureCanvasBase

    return FigureCanvasBase.get_supported_filetypes()


def _output_problem(option: str, path: str, script: str) -> Optional[str]:
    """Why `--<option>=path` cannot be written, found before the script runs; None when it can."""
    if not path:
        return "it is empty; allowed is a file path"
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"{path!r} is a folder; allowed is a file path"
    if not os.path.isdir(folder):
        return f"its folder {os.path.dirname(path)!r} does not exist; allowed is a file in an existing folder"
    if os.path.exists(path) and os.path.samefile(path, script):
        return f"it is the script {script!r}, which it would overwrite"
    if not os.access(folder, os.W_OK):
        return (f"its folder {os.path.dirname(path) or '.'!r} cannot be written (no permission; the file is written "
                "there under a temporary name, then renamed); allowed is a file in a folder you can write")
    if option == "plot":
        formats = _plot_formats()
        extension = os.path.splitext(path)[1][1:].lower()
        if extension not in formats:
            return (f"matplotlib cannot write {'.' + extension if extension else 'a file without an extension'}: "
                    "allowed extensions are " + ", ".join(f".{e}" for e in sorted(formats)))
    return None


def _trace(parser: argparse.ArgumentParser, args: argparse.Namespace, passed: list[str]) -> int:
    """Runs `tfplace trace`; `passed` are the arguments after a `--`, given to the script unchecked.

    Every usage error is found before TensorFlow is imported and before the script runs.
    """
    check_script(parser, args, "trace", ("--json", "--plot", "--top"))
    if args.top < 1:
        parser.error(f"--top={args.top} (from option --top) is not allowed: expected a whole number >= 1")
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        parser.error("--plot needs matplotlib, which is not installed: pip install 'tfplace[plot]' "
                     "(or pip install matplotlib)")
    for option in ("json", "plot"):
        path = getattr(args, option)
        problem = None if path is None else _output_problem(option, path, args.script)
        if problem is not None:
            parser.error(f"--{option}={path!r} (from option --{option}) cannot be written: {problem}")
    outputs = {option: os.path.abspath(getattr(args, option)) for option in ("json", "plot") if getattr(args, option)}
    if len(outputs) == 2 and os.path.realpath(outputs["json"]) == os.path.realpath(outputs["plot"]):
        parser.error(f"--json={args.json!r} and --plot={args.plot!r} (from options --json and --plot) name the same "
                     f"file {os.path.realpath(outputs['json'])}: allowed are two different files, one per output")
    given = _given(args)
    try:
        check_conflicts({name: Sourced(value, f"option --{name}") for name, value in given.items()})
    except ConfigurationError as err:
        parser.error(str(err))
    import tfplace
    from tfplace import _script, _trace

    try:
        tfplace.configure(**given)
    except tfplace.Error as err:
        parser.error(str(err))
    script_args = [*args.args, *passed]
    out = _script.Output()  # standard output now: the report reaches it whatever the script does to sys.stdout
    started = os.getpid()
    with _script.stopping_signals():
        log, status = _trace.run_script(args.script, script_args, timing=args.timing, memory=args.memory)
        if os.getpid() != started:  # a child the script forked, ending with sys.exit(): its parent reports
            return status
        try:
            _outputs(out, log, args, script_args, status, outputs, gpus_visible=tfplace.num_gpus() > 0)
        except KeyboardInterrupt as error:  # a second interrupt: files are whole or absent, the rest is skipped
            _note(f"tfplace trace: interrupted ({error or 'SIGINT'}) while writing its report and files; "
                  "those not yet written were left as they were")
            return _script.interrupt_status(error)
        finally:
            out.close()
    return status


def _diff(args: argparse.Namespace) -> int:
    """Runs `tfplace diff`: 1 when a compute op moved or a transfer appeared, 0 when nothing did, 2 for an
    unreadable trace (one line naming it)."""
    from tfplace import _diff as diffing

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
    from tfplace import _trace

    found = _trace.findings(log, gpus_visible=gpus_visible)
    if not out.write(_trace.report(log, found, top=args.top) + "\n"):
        _note("tfplace trace: the report was not printed: standard output is closed (a pipe whose reader left)")
    if "json" in paths:
        _trace.write_json(paths["json"], _trace.to_json(log, found, script=args.script, args=script_args,
                                                        exit_status=status))
        out.write(f"tfplace trace: wrote {len(log.records)} records and {len(log.copies)} copies to {paths['json']}\n")
    if "plot" in paths:
        _trace.plot(log, paths["plot"], top=args.top,
                    title=f"{'time' if args.timing else 'op executions'} per device: {os.path.basename(args.script)}")
        out.write(f"tfplace trace: drew {'time' if args.timing else 'executions'} per device and bytes per "
                  f"direction in {paths['plot']}\n")


_QUIET = "_TFPLACE_QUIET_START"  # set by `_quietly()` for its child
# A line of TensorFlow's C++ INFO log ("I1124 12:51:13.123456  9212 port.cc:153] ..."; "I0000 00:00:<epoch>"
# before absl's log is initialized), and absl's note that such lines go to stderr before its initialization.
_INFO_LINE = re.compile(r"^I\d{4} \d\d:\d\d:[\d.]+ +\d+ [^ \]]+:\d+\] ")
_ABSL_NOTE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


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
    _add_settings(devices, [setting for setting in SETTINGS if setting.fixed], "preview")
    devices.add_argument("--json", action="store_true", help="print JSON")
    env = commands.add_parser("env", help="versions, build info and placement environment variables")
    env.add_argument("--json", action="store_true", help="print JSON")
    trace = _add_trace(commands)
    launch = _add_launch(commands)
    compare = commands.add_parser(
        "diff", help="what moved between two tfplace trace --json runs (exit 1 if a compute op moved or a transfer "
                     "appeared)", allow_abbrev=False)
    compare.add_argument("a", metavar="A.json", help="the earlier trace (tfplace trace --json=A.json ...), a task of a "
                                                     "merged cluster (c.json:worker:0) or a merged cluster")
    compare.add_argument("b", metavar="B.json", help="the later trace (or task, or cluster)")
    compare.add_argument("--json", action="store_true", help="print JSON")
    compare.add_argument("--top", type=int, default=ROWS, help=f"rows per section (default {ROWS})")
    merging = commands.add_parser(
        "merge", help="one report for a cluster: merge tfplace trace --json files, one per task", allow_abbrev=False,
        description="Merges the traces of a cluster's tasks (one tfplace trace --json file per task) and reports what "
                    "is uneven or costly, time and bytes per task and device, the traffic between tasks, then each "
                    "task's own sections. Exit 2, naming the file, for a file that cannot be read, is not a trace, "
                    "or is a second trace of one task.")
    merging.add_argument("traces", nargs="+", metavar="TRACE.json", help="one tfplace trace --json file per task")
    merging.add_argument("--json", metavar="FILE", help="write the merged cluster JSON (tfplace-cluster/1)")
    merging.add_argument("--top", metavar="N", type=int, default=ROWS, help=f"rows per report section (default {ROWS})")
    argv = list(sys.argv[1:] if argv is None else argv)
    passed: list[str] = []
    if argv[:1] in (["trace"], ["launch"]) and "--" in argv:
        argv, passed = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    if argv[:1] in (["trace"], ["devices"], ["launch"]):
        argv = argv[:1] + (_absl_booleans(trace, argv[1:], ("--json", "--plot", "--top")) if argv[0] == "trace"
                           else _absl_booleans(launch, argv[1:], LAUNCH_VALUED) if argv[0] == "launch"
                           else _absl_booleans(devices, argv[1:]))
    args = parser.parse_args(argv)
    if args.command == "trace":
        return _trace(trace, args, passed)
    if args.command == "launch":
        return _launch(launch, args, passed)
    if args.command == "diff":
        return _diff(args)
    if args.command == "merge":
        if args.top < 1:
            merging.error(f"--top={args.top} (from option --top) is not allowed: expected a whole number >= 1")
        from tfplace.cluster._report import command as merge_command

        return merge_command(args.traces, json_path=args.json, top=args.top)
    environ = dict(os.environ)
    if environ.pop(_QUIET, None) is not None:  # the quiet run's child: report the user's environment
        environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
    elif "TF_CPP_MIN_LOG_LEVEL" not in environ:
        return _quietly(argv)
    import tfplace
    from tfplace import _machine

    try:
        report = _machine.devices(_given(args)) if args.command == "devices" else _machine.environment(environ)
    except tfplace.Error as err:
        print(f"tfplace {args.command}: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(_machine.devices_text(report) if args.command == "devices" else _machine.environment_text(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
