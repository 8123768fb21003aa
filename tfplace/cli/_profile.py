"""`tfplace profile PATH [--json=FILE]`: a profile already on disk (`tfplace.read_profile`) shown as `tfplace
trace --timing` shows a run's: the steps and their phases, per GPU its kernels, copies and time without a kernel,
and each allocator's peak.

Example:
    >>> import argparse
    >>> commands = argparse.ArgumentParser(prog="tfplace").add_subparsers(dest="command")
    >>> parser = add_profile(commands)
    >>> parser.parse_args(["run/plugins/profile", "--json=p.json"]).json
    'p.json'
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

__all__ = ["add_profile", "run_profile", "text"]


def add_profile(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "profile", help="a kept profile (tfplace trace --profile_dir, TensorBoard's profile_batch, "
                        "tf.profiler.experimental.start, jax.profiler.trace) read as steps, GPU time and memory",
        allow_abbrev=False)
    parser.add_argument("path", metavar="PATH", help="a *.xplane.pb file, or a folder holding "
                                                     "plugins/profile/<run>/ (the latest run is read)")
    parser.add_argument("--json", metavar="FILE", help="also write {\"steps\": ..., \"memory\": ...} to FILE")
    return parser


def text(profile: Any) -> list[str]:
    """The report: the files read, the steps line and what follows it, then memory per allocator."""
    from tfplace.placement.shown import _steps_view

    steps = profile.steps()
    lines = [f"tfplace profile: {', '.join(profile.paths)}"]
    lines += [line for line in _steps_view.text(steps, ()) if not line.startswith("advice")]
    if steps.count:
        lines.append("  advice: the rules need the user's lines (placement records): tfplace trace --timing")
    lines.append("memory:")
    lines += profile.memory().lines()
    return lines


def run_profile(args: argparse.Namespace) -> int:
    """Reads the profile at `args.path`, prints the report, writes `--json`; exit 2 when there is no profile."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow reads the profile's schema: no INFO lines
    import tfplace
    from tfplace import _files

    try:
        profile = tfplace.read_profile(args.path)
    except tfplace.Error as error:
        print(f"tfplace profile: error: {error}", file=sys.stderr)
        return 2
    print("\n".join(text(profile)), flush=True)
    if args.json:
        _files.write_json(os.path.abspath(args.json), profile.to_json())
    return 0
