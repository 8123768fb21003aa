"""The README's tour runs as written."""

import re

from conftest import ROOT, result_of, run_python


def test_readme_tour_runs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    tour = re.search(r"## A short tour\n\n```python\n(.*?)```", text, re.S).group(1)
    done = run_python(tour + "report([str(total.numpy().tolist()), type(strategy).__name__, log.complete])\n")
    assert result_of(done) == ["[[6.0, 6.0], [6.0, 6.0]]", "MirroredStrategy", True]
    assert "logical_cpus     = 2  [argument logical_cpus]" in done.stdout
