"""Every module's docstring examples run, all in one fresh process.

The modules whose examples configure logical CPUs run first (a started runtime
keeps its devices); the others run on top of that configuration.
"""

import subprocess
import sys

from conftest import ROOT

FIRST = ["tfplace.config._configure", "tfplace._replication"]
MODULES = FIRST + sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "tfplace").rglob("*.py")
    if p.name not in ("__main__.py", "_cli.py") and ".".join(p.relative_to(ROOT).with_suffix("").parts) not in FIRST)
RUN = """
import doctest, importlib, sys
failed = sum(doctest.testmod(importlib.import_module(name)).failed for name in sys.argv[1:])
sys.exit(1 if failed else 0)
"""


def test_docstring_examples_run():
    done = subprocess.run([sys.executable, "-c", RUN, *MODULES],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert len(MODULES) >= 20


def test_every_link_in_the_docs_points_into_the_repository():
    import re
    for doc in ("README.md", "BUILD.md", "DEVELOPERS.md", "examples/README.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#]+)\)", text):
            if "://" in target:
                continue
            assert (ROOT / doc).parent.joinpath(target).resolve().is_file(), f"{doc} links {target}, not in a clone"
        assert "../shared" not in text, f"{doc} points outside the repository"


def test_config_repr_is_one_field_per_line(python):
    out = python("""
        import tfplace
        report(repr(tfplace.configure()).splitlines())
    """)
    assert out[0] == "tfplace.Config(" and out[-1] == ")"
    assert all(len(line) <= 100 for line in out), out
    assert any(line.startswith("    soft_placement=") for line in out)
