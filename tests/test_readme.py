"""The README's tour and its "Find where placement goes wrong" programs run as written."""

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, result_of, run_python

pytestmark = pytest.mark.slow  # slow tier: the README's programs, each a whole program

README = (ROOT / "README.md").read_text(encoding="utf-8")
# A program (```python, first line "# name.py") followed by what running it shows (```).
SHOWN = re.compile(r"```python\n# (\w+\.py)\n(.*?)```\n```\n(.*?)```", re.S)
SECTION = README[README.index("## Find where placement goes wrong"):]


def test_readme_tour_runs():
    tour = re.search(r"## A short tour\n\n```python\n(.*?)```", README, re.S).group(1)
    done = run_python(tour + "report([str(total.numpy().tolist()), type(strategy).__name__, log.complete])\n")
    assert result_of(done) == ["[[6.0, 6.0], [6.0, 6.0]]", "MirroredStrategy", True]
    assert "logical_cpus     = 2  [argument logical_cpus]" in done.stdout


@pytest.mark.parametrize("name, program, shown", SHOWN.findall(SECTION), ids=lambda v: v if v.endswith(".py") else "")
def test_find_where_placement_goes_wrong_shows_what_running_it_shows(tmp_path, name, program, shown):
    (tmp_path / name).write_text(f"# {name}\n{program}", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFPLACE_", "TF_CPP"))}
    bin_dir = os.path.dirname(sys.executable)
    if shown.startswith("$ "):  # a command line, then its standard output
        command, expected = shown[2:].split("\n", 1)
        argv = [os.path.join(bin_dir, command.split()[0]), *command.split()[1:]]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
        assert done.stdout == expected, done.stderr[-3000:]
    else:  # the last line of the traceback, wrapped in the README
        done = subprocess.run([sys.executable, name], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=240)
        assert done.stderr.splitlines()[-1] == " ".join(shown.split()), done.stderr[-3000:]


def test_find_where_placement_goes_wrong_has_its_five_programs():
    assert [name for name, _, _ in SHOWN.findall(SECTION)] == ["train.py", "guard.py", "dguard.py", "fguard.py",
                                                               "why.py"]
