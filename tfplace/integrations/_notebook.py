"""The IPython extension: the `%%placement` cell magic shows where a cell's ops ran, in the cell;
`%tfplace_doctor` why TensorFlow does (not) use the GPUs.

In a notebook, `tf.debugging.set_log_device_placement(True)` prints on the terminal of the
Jupyter server, not in the notebook. `%%placement` runs its cell under
`tfplace.capture_placement()` (and the guards asked for) and shows the log below the cell's
own output and result: ops per device, implicit copies with their lines, failed ops, why ops
ran elsewhere than they asked, and a note when the log is incomplete. The log is kept as
`_placement` for the next cells.

Usage, in IPython or Jupyter:

    %load_ext tfplace

    %%placement [--sources] [--timing] [--memory] [--perfetto=FILE] [--transfer-guard=LEVEL] [--device-guard=DEVICE]
    with tf.device("CPU:1"):
        c = tf.matmul(a, b)
    c

    _placement.assert_placed("MatMul", "CPU:1")    # the last %%placement cell's PlacementLog

Options:

* `--sources`: each record carries the line of the cell that ran it (`In[3]:2`).
* `--timing`: the cell runs under TensorFlow's profiler; the display leads with each
  device's busy time and share.
* `--memory`: the cell's memory is counted per device (`capture_placement(memory=True)`): the
  display shows each device's peak and the node that reached it, what the device held at the
  peak (most bytes first, by the cell's line, with op, dtype and shape), the lines whose bytes
  grow step after step, and what the allocators did not report; an out-of-memory error gets a
  note naming the request that failed and what its device held, largest first, with the cell's
  lines.
* `--perfetto=FILE`: the cell's timeline is written to FILE (`.json` or `.json.gz`) for
  ui.perfetto.dev or chrome://tracing (`PlacementLog.to_perfetto`), with the cell's lines.
* `--transfer-guard=LEVEL`: `tfplace.transfer_guard(LEVEL)` around the cell, LEVEL one of
  disallow (the default of a bare `--transfer-guard`), log, allow. Under disallow the cell
  fails at its first implicit copy with `ImplicitCopyError` naming the cell's line.
* `--device-guard=DEVICE`: `tfplace.device_guard(DEVICE)` around the cell.

`%tfplace_doctor [--run]` (a line magic) shows `tfplace.doctor()`: why TensorFlow does (not) use
the machine's GPUs, with the fixes and the evidence, as a table.

A bad option is one `UsageError` line, and the cell does not run. Lines of notebook cells are
named as IPython names them, `In[3]:4` for line 4 of the cell run as `In [3]` (the magic's
line is line 1), in the records, in the display and in tfplace's errors. Loading the extension
does not import TensorFlow; the first `%%placement` cell does. Top-level `await` is not
supported inside a `%%placement` cell.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import os
import re
import shlex
import tokenize
from typing import TYPE_CHECKING, Any, NoReturn, Optional

if TYPE_CHECKING:
    from tfplace.placement.api._log import PlacementLog

__all__ = ["load_ipython_extension", "USAGE", "parse_options", "LOG_NAME"]

USAGE = ("%%placement [--sources] [--timing] [--memory] [--perfetto=FILE] [--transfer-guard=LEVEL] "
         "[--device-guard=DEVICE]")
LOG_NAME = "_placement"  # where the last cell's log is kept in the user's namespace
_LEVELS = ("disallow", "log", "allow")  # tfplace.placement.api._guards.LEVELS, without importing TensorFlow
_LOCATION = re.compile(r"(?P<file>[^\s:'\"(),]+):(?P<line>\d+)")


class _BadOption(Exception):
    """An option of the magic's line that cannot be used."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _BadOption(message)


def _parser() -> _Parser:
    parser = _Parser(prog="%%placement", add_help=False, allow_abbrev=False)
    parser.add_argument("--sources", action="store_true")
    parser.add_argument("--timing", action="store_true")
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--perfetto", default=None, metavar="FILE")
    parser.add_argument("--transfer-guard", nargs="?", const="disallow", default=None, metavar="LEVEL")
    parser.add_argument("--device-guard", default=None, metavar="DEVICE")
    return parser


def _usage_error(line: str, what: str) -> Exception:
    from IPython.core.error import UsageError

    return UsageError(f"%%placement received {line.strip()!r}: {what}; allowed: {USAGE}, "
                      f"LEVEL one of {', '.join(_LEVELS)}, DEVICE an existing device such as CPU:0 or GPU:1")


def parse_options(line: str) -> argparse.Namespace:
    """The options of a `%%placement` line, or `UsageError` (one line, no traceback) saying what is wrong."""
    try:
        options = _parser().parse_args(shlex.split(line))
    except (_BadOption, ValueError) as err:
        raise _usage_error(line, str(err)) from None
    if options.transfer_guard is not None and options.transfer_guard not in _LEVELS:
        raise _usage_error(line, f"--transfer-guard={options.transfer_guard} is not a level")
    if options.perfetto is not None and not options.perfetto.endswith((".json", ".json.gz")):
        raise _usage_error(line, f"--perfetto={options.perfetto} does not end .json or .json.gz")
    if options.device_guard is not None and not options.device_guard.strip():
        raise _usage_error(line, "--device-guard needs a device")
    return options


def _leading_blank_lines(code: str) -> int:
    count = 0
    for text in code.splitlines():
        if text.strip():
            break
        count += 1
    return count


def _ends_with_semicolon(code: str) -> bool:
    """True if the code's last token is `;` (IPython then shows no result)."""
    skipped = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type not in skipped]
    except (tokenize.TokenError, SyntaxError):
        return False
    return bool(tokens) and tokens[-1].string == ";"


def _cell_number(shell: Any) -> int:
    """The number of the running cell, `In [N]` (IPython 9 counts the next cell while one runs)."""
    running = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    number = getattr(running, "execution_count", None)
    return number if isinstance(number, int) else shell.execution_count


def _compile(shell: Any, line: str, cell: str) -> list[Any]:
    """The cell's code objects, compiled as IPython compiles a cell: the last one, when the cell
    ends with an expression, hands its value to the display hook (`Out[N]`).

    The code is compiled under a name IPython knows (tracebacks say `Cell In[3], line 4`) and
    with the lines the user sees: the magic's line is line 1.

    Raises:
      SyntaxError: before anything runs.
    """
    __tracebackhide__ = True
    body = shell.transform_cell(cell)
    pad = 1 + _leading_blank_lines(cell) - _leading_blank_lines(body)
    shown = f"%%placement {line.strip()}".rstrip() + "\n" * pad + body
    name = shell.compile.cache(shown, _cell_number(shell))
    tree = shell.transform_ast(shell.compile.ast_parse("\n" * pad + body, filename=name))
    nodes = list(tree.body)
    last = nodes.pop() if nodes and isinstance(nodes[-1], ast.Expr) and not _ends_with_semicolon(body) else None
    codes = [shell.compile(ast.Module(body=nodes, type_ignores=[]), name, "exec")] if nodes else []
    if last is not None:
        codes.append(shell.compile(ast.Interactive(body=[last]), name, "single"))
    return codes


def _execute(shell: Any, codes: list[Any]) -> None:
    """Runs the cell's code objects in the user's namespace, as IPython runs a cell."""
    __tracebackhide__ = True
    for code in codes:
        exec(code, shell.user_global_ns, shell.user_ns)  # pylint: disable=exec-used


def _cell_names(shell: Any, text: str) -> str:
    """`text` with each `file:LINE` of a notebook cell written as IPython names it, `In[3]:4`."""
    formatter = getattr(shell.compile, "format_code_name", None)
    if formatter is None or not text:
        return text

    def name(match: re.Match) -> str:
        filename = match.group("file")
        for candidate in dict.fromkeys((filename, os.path.abspath(filename))):
            label = formatter(candidate)
            if label:
                return f"{label[1]}:{match.group('line')}"
        return match.group(0)

    return _LOCATION.sub(name, text)


def _cell_log(shell: Any, log: "PlacementLog") -> "PlacementLog":
    """`log` with the sources of its records and copies named as IPython names cells."""
    records = [r._replace(source=_cell_names(shell, r.source)) if r.source else r for r in log.records]
    copies = [c._replace(source=_cell_names(shell, c.source)) if c.source else c for c in log.copies]
    if records == log.records and copies == log.copies and not log.memory().devices:
        return log
    return log.replaced(records, copies, rename=lambda source: _cell_names(shell, source))


def _show(log: "PlacementLog") -> None:
    from IPython.display import display

    from tfplace.placement.shown import _display as view

    explanations = log.explain()
    display({"text/plain": view.text(log, explanations), "text/html": view.html(log, explanations)}, raw=True)


def run(shell: Any, line: str, cell: str) -> None:
    """The `%%placement` magic: runs `cell` under a capture and the guards `line` asks for,
    then shows the log (not returned: the cell's own result is shown as usual) and keeps it as
    `_placement` in the user's namespace.

    Raises:
      UsageError: a bad option (the cell does not run).
      SyntaxError: the cell's code does not compile (nothing runs, nothing is shown).
      Whatever the cell raises, after the log of what ran is shown; tfplace's errors name the
      cell's line as `In[3]:4`.
    """
    __tracebackhide__ = True
    options = parse_options(line)
    codes = _compile(shell, line, cell)
    from tfplace import _errors
    from tfplace.placement.api import _capture, _guards

    error: Optional[BaseException] = None
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(_capture.capture_placement(sources=options.sources, timing=options.timing,
                                                             memory=options.memory))
        try:
            if options.transfer_guard is not None:
                stack.enter_context(_guards.transfer_guard(options.transfer_guard))
            if options.device_guard is not None:
                stack.enter_context(_guards.device_guard(options.device_guard))
        except (_errors.Error, ValueError) as err:
            raise _usage_error(line, str(err)) from None
        try:
            _execute(shell, codes)
        except BaseException as err:  # shown after the log; KeyboardInterrupt too  # pylint: disable=broad-except
            error = err
    if error is not None and options.memory:
        note = log.memory_note(error)  # an out-of-memory error: what the device held, with the cell's lines
        if note:
            _errors.add_note(error, _cell_names(shell, note))
    log = _cell_log(shell, log)
    shell.user_ns[LOG_NAME] = log
    _show(log)
    if options.perfetto is not None:
        log.to_perfetto(options.perfetto)
        print(f"tfplace: wrote the cell's timeline to {options.perfetto} (open it in ui.perfetto.dev or chrome://tracing)")
    if error is not None:
        if isinstance(error, _errors.Error) and error.args and isinstance(error.args[0], str):
            error.args = (_cell_names(shell, error.args[0]),) + error.args[1:]
        raise error


def load_ipython_extension(ipython: Any) -> None:
    """Registers the `%%placement` cell magic (`%load_ext tfplace` calls it)."""

    def placement(line: str, cell: str) -> None:
        __tracebackhide__ = True
        run(ipython, line, cell)

    def tfplace_doctor(line: str) -> Any:
        """`%tfplace_doctor [--run]`: why TensorFlow does (not) use this machine's GPUs, as a table."""
        from IPython.core.error import UsageError

        from tfplace.machine import _doctor

        options = line.split()
        if any(option != "--run" for option in options):
            raise UsageError(f"%tfplace_doctor {line}: the only option is --run (also run a MatMul on each GPU)")
        return _doctor.doctor(run="--run" in options)

    placement.__doc__ = __doc__
    ipython.register_magic_function(placement, magic_kind="cell", magic_name="placement")
    ipython.register_magic_function(tfplace_doctor, magic_kind="line", magic_name="tfplace_doctor")
