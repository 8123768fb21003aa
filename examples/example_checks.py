"""Up-front checks shared by the examples.

A wrong flag, environment variable or output path ends an example with one
line on stderr (what was received, what is allowed, where it came from) and a
non-zero status, before TensorFlow does any work: no traceback, and no flag
help (absl prints the help for `app.UsageError`, which buries the one line
that matters).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

USAGE = 2  # a flag, an environment variable or a path is wrong: fix it and run again
FAILURE = 1  # something outside the program failed: a download, a peer that never answered


def fail(message: str, status: int = USAGE) -> NoReturn:
    """Prints `<script>: error: <message>` on stderr and exits with `status`."""
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(status)


def output_folder(flag: str, folder: str) -> Path:
    """`folder`, the value of `--flag`, as a Path, after checking that this user can write files there."""
    path = Path(folder)
    allowed = "allowed is an existing folder this user can write to"
    if not path.exists():
        fail(f"--{flag}={folder} (flag): {folder} does not exist; {allowed} (create it first)")
    if not path.is_dir():
        fail(f"--{flag}={folder} (flag): {folder} is not a folder; {allowed}")
    if not os.access(path, os.W_OK | os.X_OK):
        fail(f"--{flag}={folder} (flag): this user cannot write to {folder}; {allowed}")
    return path


def output_file(flag: str, file: str) -> Path:
    """`file`, the value of `--flag`, as a Path, after checking that it can be written."""
    path = Path(file)
    if path.is_dir():
        fail(f"--{flag}={file} (flag): {file} is a folder; allowed is a file name in an existing, writable folder")
    parent = str(path.parent)
    allowed = "allowed is a file name in an existing folder this user can write to"
    if not path.parent.is_dir():
        fail(f"--{flag}={file} (flag): the folder {parent} does not exist; {allowed} (create it first)")
    if not os.access(path.parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        fail(f"--{flag}={file} (flag): this user cannot write {file}; {allowed}")
    return path
