"""The reference pages, made while MkDocs builds: the Python API from `tfplace.__all__` (each name
through mkdocstrings, from its own docstring) and the command line from its own `--help`.

A page holds a marker line; the build replaces it:

* `<!-- api: tfplace.__all__ -->`: one `::: tfplace.NAME` section per exported name, in `__all__`'s order;
* `<!-- cli: tfplace --help -->`: `tfplace --help`, then each subcommand's `--help`, as run now;
* `<!-- rules: tfplace.placement.steps._thresholds.RULES -->`: the step rules' table, from their declarations;
* `<!-- codes: tfplace.machine._codes.CODES -->`: the doctor's codes' table, from theirs.
"""

from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
API = "<!-- api: tfplace.__all__ -->"
CLI = "<!-- cli: tfplace --help -->"
RULES = "<!-- rules: tfplace.placement.steps._thresholds.RULES -->"
CODES = "<!-- codes: tfplace.machine._codes.CODES -->"


def exported() -> list[str]:
    """`tfplace.__all__`, read from the source (importing tfplace is not needed to document it)."""
    tree = ast.parse((ROOT / "tfplace" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise RuntimeError(f"{ROOT / 'tfplace' / '__init__.py'} has no `__all__ = [...]`: the API page lists its names")


def _help(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "tfplace", *args, "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env={"COLUMNS": "100", "PATH": "", "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        raise RuntimeError(f"`tfplace {' '.join(args)} --help` exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def command_line() -> str:
    """The command line's reference: the top-level help, then one section per subcommand."""
    top = _help()
    commands = re.search(r"\{([a-z,-]+)\}", top)
    if commands is None:
        raise RuntimeError(f"`tfplace --help` lists no subcommands in braces: {top[:500]}")
    parts = ["```text", f"$ tfplace --help\n{top.rstrip()}", "```"]
    for command in commands.group(1).split(","):
        parts += [f"\n## tfplace {command}\n", "```text", f"$ tfplace {command} --help\n{_help(command).rstrip()}",
                  "```"]
    return "\n".join(parts)


def api() -> str:
    return "\n\n".join(f"::: tfplace.{name}" for name in exported())


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if API in markdown:
        markdown = markdown.replace(API, api())
    if CLI in markdown:
        markdown = markdown.replace(CLI, command_line())
    if RULES in markdown:
        from tfplace.placement.steps._thresholds import table  # declared data only: no TensorFlow

        markdown = markdown.replace(RULES, table())
    if CODES in markdown:
        from tfplace.machine import _codes

        markdown = markdown.replace(CODES, _codes.table())
    return markdown
