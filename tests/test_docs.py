"""Every module's docstring examples run, all in one fresh process.

The modules whose examples configure logical CPUs run first (a started runtime
keeps its devices); the others run on top of that configuration.
"""

import subprocess
import sys

from conftest import ROOT

FIRST = ["configure.py", "replication.py"]
MODULES = FIRST + sorted(p.name for p in (ROOT / "tfplace").glob("*.py")
                         if p.name not in ("__main__.py", "cli.py", *FIRST))


def test_docstring_examples_run():
    done = subprocess.run([sys.executable, "-m", "doctest", *(f"tfplace/{name}" for name in MODULES)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-5000:]
    assert len(MODULES) >= 20
