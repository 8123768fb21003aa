"""Shared helpers: run Python code in a fresh process (device configuration is per process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULT = "TFPLACE-RESULT:"

pytest_plugins = ["pytester"]

# A parent that ignores SIGINT, SIGTERM or SIGHUP (`nohup`, some CI runners) passes that on to every child:
# the tests' programs get the dispositions a terminal gives them, as the signal tests expect.
for _signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    if signal.getsignal(_signum) == signal.SIG_IGN:
        signal.signal(_signum, signal.default_int_handler if _signum == signal.SIGINT else signal.SIG_DFL)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `xdist` run pytest-xdist workers: skipped, saying so, where it is not installed."""
    try:
        import xdist  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        skip = pytest.mark.skip(reason="needs pytest-xdist (pip install -e '.[test]')")
        for item in items:
            if item.get_closest_marker("xdist"):
                item.add_marker(skip)


# x on CPU:0 and y on CPU:1 of two logical CPUs; tests append code indented by 4 spaces.
TWO_CPUS_XY = """
    import tensorflow as tf, tfplace
    tfplace.configure(logical_cpus=2)
    with tf.device("CPU:0"):
        x = tf.ones((2, 2))
    with tf.device("CPU:1"):
        y = tf.ones((2, 2))
"""

PRELUDE = "import json as _json\ndef report(obj):\n    print({!r} + _json.dumps(obj), flush=True)\n".format(RESULT)


def line_of(code: str, marker: str) -> str:
    """`<string>:N`, the source of the line holding `marker` in `code` as `run_python` runs it."""
    lines = (PRELUDE + textwrap.dedent(code)).splitlines()
    return f"<string>:{next(i for i, line in enumerate(lines, 1) if marker in line)}"


def run_python(code: str, *, env: dict | None = None, args: tuple = (),
               timeout: int = 240) -> subprocess.CompletedProcess:
    """Runs `code` in a new interpreter; `report(obj)` in it prints a JSON result line."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("TFPLACE_", "TF_CPP"))}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code), *args],
        capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT)


def result_of(done: subprocess.CompletedProcess):
    """The object the subprocess reported, failing the test with its stderr if it crashed."""
    for line in done.stdout.splitlines():
        # TensorFlow's C++ output into a pipe is block-buffered: its block may end inside a line, before ours
        if RESULT in line:
            return json.JSONDecoder().raw_decode(line[line.index(RESULT) + len(RESULT):])[0]
    pytest.fail(f"subprocess reported nothing (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


@pytest.fixture
def python():
    """`python(code, env=...)` → the object the code reported with `report(...)`."""
    return lambda code, **kwargs: result_of(run_python(code, **kwargs))
