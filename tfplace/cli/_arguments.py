"""How tfplace's commands read their arguments: tfplace flags as `configure()` reads them, absl's booleans,
numbers with their bounds, the script and its options, output paths checked before the script runs.

Pure Python (argparse): `--help` and usage errors never import TensorFlow.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> add_settings(parser, [BY_NAME["soft_placement"]], "configure()")
    >>> given(parser.parse_args(["--nosoft_placement"]))
    {'soft_placement': False}
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
from typing import Any, Optional, Sequence

from tfplace._errors import ConfigurationError
from tfplace.config._settings import BOOLEAN, BY_NAME, NAMES, SETTINGS, Setting, Sourced, check_conflicts

__all__ = ["BOOLEANS", "AbslBoolean", "add_settings", "given", "checked_settings", "number", "check_script",
           "absl_booleans", "output_problem", "check_outputs", "plot_formats"]

BOOLEANS = tuple(setting.name for setting in SETTINGS if setting.kind is BOOLEAN)


def option_type(setting: Setting):
    """An argparse type reading `--<name>` as `configure()` reads that setting."""
    def parse(text: str) -> Any:
        try:
            return setting.parse(text, f"option --{setting.name}")
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return parse


class AbslBoolean(argparse.Action):
    """absl's boolean flag: `--name` sets True, `--noname` False; it never takes the next argument."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        setattr(namespace, self.dest, option_string == f"--{self.dest}")


def add_settings(parser: argparse.ArgumentParser, settings: Sequence[Setting], what: str) -> None:
    """One option per setting, read as `configure()` reads it; booleans written as absl writes them."""
    for setting in settings:
        about = f"{what}: {setting.help} Allowed: {setting.kind.allowed}."
        if setting.kind is BOOLEAN:
            parser.add_argument(f"--{setting.name}", f"--no{setting.name}", dest=setting.name, action=AbslBoolean,
                                help=about)
        else:
            parser.add_argument(f"--{setting.name}", type=option_type(setting), help=about)


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line, by name."""
    return {name: getattr(args, name) for name in NAMES if getattr(args, name, None) is not None}


def checked_settings(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line (`given`), or the parser's error naming two that conflict."""
    settings = given(args)
    try:
        check_conflicts({name: Sourced(value, f"option --{name}") for name, value in settings.items()})
    except ConfigurationError as err:
        parser.error(str(err))
    return settings


def number(option: str, kind: type, least: float, strict: bool = False) -> Any:
    """An argparse type reading `--<option>` as a `kind` >= `least` (> with `strict`), saying what is allowed."""
    def parse(text: str) -> Any:
        value = kind(text) if re.fullmatch(r"\d+" if kind is int else r"\d*\.?\d+", text.strip()) else None
        if value is None or value < least or (strict and value == least):
            raise argparse.ArgumentTypeError(f"--{option}={text!r} (from option --{option}) is not allowed: expected "
                                             f"{'a whole number' if kind is int else 'seconds'} "
                                             f"{'>' if strict else '>='} {least:g}")
        return value
    return parse


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


def absl_booleans(parser: argparse.ArgumentParser, argv: Sequence[str], own: Sequence[str] = ()) -> list[str]:
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


def plot_formats() -> dict[str, str]:
    """The file extensions matplotlib can write, with what each is."""
    from matplotlib.backend_bases import FigureCanvasBase

    return FigureCanvasBase.get_supported_filetypes()


def output_problem(option: str, path: str, script: str) -> Optional[str]:
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
    if option == "perfetto" and not path.endswith((".json", ".json.gz")):
        return f"it ends {os.path.splitext(path)[1] or 'without an extension'}; allowed are .json and .json.gz"
    if option == "plot":
        formats = plot_formats()
        extension = os.path.splitext(path)[1][1:].lower()
        if extension not in formats:
            return (f"matplotlib cannot write {'.' + extension if extension else 'a file without an extension'}: "
                    "allowed extensions are " + ", ".join(f".{e}" for e in sorted(formats)))
    return None


def check_outputs(parser: argparse.ArgumentParser, args: argparse.Namespace, options: Sequence[str]) -> None:
    """The parser's error for the first of `options` (`--json`, `--plot`, `--perfetto`) whose file cannot be
    written (`output_problem`), before the script runs."""
    for option in options:
        path = getattr(args, option)
        if path is not None and (problem := output_problem(option, path, args.script)) is not None:
            parser.error(f"--{option}={path!r} (from option --{option}) cannot be written: {problem}")
