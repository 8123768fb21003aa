"""Every module's docstring examples run (each module in a fresh process)."""

import subprocess
import sys

import pytest

from conftest import ROOT

MODULES = sorted(p for p in (ROOT / "tfplace").glob("*.py") if p.name not in ("__main__.py", "cli.py"))


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_docstring_examples_run(path):
    done = subprocess.run([sys.executable, "-m", "doctest", str(path)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:]
