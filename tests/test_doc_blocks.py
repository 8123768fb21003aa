"""Every code block of the READMEs and of the documentation site runs, and shows what running it shows.

A page's blocks run top to bottom in one fresh working directory (one test per page):

* ```` ```python ````: a program, run with `python` in its own process. When its first line is
  `# NAME.py` it is also saved as NAME.py in the working directory, and when a ```` ```console ````
  block follows, it is only saved: the console block runs it.
* ```` ```ipython ````: a notebook cell (IPython magics included): a page's ipython blocks are the cells of
  one notebook, run in order on a Jupyter kernel of this interpreter; the text block after one is what the
  notebook shows under it (its streams, the text of what it displays, its error), errors allowed only there.
* ```` ```console ````: `$ COMMAND` lines, each run (through bash) in the working directory, with
  what follows up to the next `$` as its expected standard output. A `pip install` or the test
  command is what `.ci/run` runs, and is checked to be there instead (running it here would install
  and test the project inside its own tests).
* Another language whose first line is a comment naming a file (`# pytest.ini`): the file, saved.
* ```` ```text ```` right after a python or ipython block: what the program prints, or when it
  fails, the last line of its traceback (wrapped as the page likes).

Expected output is compared as doctest compares (`...` stands for anything; runs of whitespace are
equal), so that times and addresses can be left out. Environment variables of tfplace and of
TensorFlow's logging are removed, as a user's shell would not have them.
"""

from __future__ import annotations

import doctest
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow  # every program of the documentation, each a whole process

PAGES = [ROOT / "README.md", ROOT / "examples" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
CHECKER = doctest.OutputChecker()
ANSI = re.compile(r"\x1b\[[0-9;]*m")
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


class Block(NamedTuple):
    language: str
    text: str
    line: int
    shown: str | None  # the text block right after it, if any


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks, each with the output block that follows it."""
    text = page.read_text(encoding="utf-8")
    found = [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1, m.start(), m.end())
             for m in FENCE.finditer(text)]
    out: list[Block] = []
    for i, (language, body, line, _, end) in enumerate(found):
        if language == "text" and out and out[-1].shown is None and out[-1].language in ("python", "ipython") \
                and not text[found[i - 1][4]:found[i][3]].strip():
            out[-1] = out[-1]._replace(shown=body)
            continue
        out.append(Block(language, body, line, None))
    return out


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFPLACE_", "TF_CPP"))}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def _matches(expected: str, got: str) -> bool:
    return CHECKER.check_output(expected.strip() + "\n", got.strip() + "\n", FLAGS)


def _file_name(block: Block) -> str | None:
    first = block.text.split("\n", 1)[0]
    named = re.fullmatch(r"(?:#|;|//)\s*([\w./-]+\.\w+)\s*", first)
    return named.group(1) if named else None


def _check_program(done: subprocess.CompletedProcess, block: Block, where: str) -> None:
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
        assert block.shown is not None and _matches(block.shown, last), \
            f"{where}: the program failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    elif block.shown is not None:
        assert _matches(block.shown, done.stdout), \
            f"{where}: the page shows\n{block.shown}\nrunning it printed\n{done.stdout}\n{done.stderr[-3000:]}"


def _notebook(cells: list[Block], workdir: Path, env: dict[str, str]):
    """The page's ipython blocks as one notebook, run on a kernel of this interpreter in `workdir`."""
    import nbformat
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager
    from nbclient import NotebookClient

    kernels = workdir / ".kernels"
    (kernels / "docs-python").mkdir(parents=True)
    (kernels / "docs-python" / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "docs", "language": "python"}), encoding="utf-8")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c.text.rstrip("\n")) for c in cells])
    manager = KernelManager(kernel_name="docs-python",
                            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))
    NotebookClient(notebook, km=manager, timeout=600, allow_errors=True,
                   resources={"metadata": {"path": str(workdir)}}).execute(env=env)
    return notebook


def _check_cell(cell, block: Block, where: str) -> None:
    shown = []
    for output in cell.outputs:
        if output.output_type == "stream":
            shown.append(output.text)
        elif output.output_type in ("display_data", "execute_result"):
            shown.append(output.data.get("text/plain", "") + "\n")
        elif output.output_type == "error":
            shown.append(f"{output.ename}: {output.evalue}\n")
    got = ANSI.sub("", "".join(shown))
    failed = any(o.output_type == "error" for o in cell.outputs)
    if block.shown is None:
        assert not failed and not got.strip(), f"{where}: the cell shows nothing on the page but printed\n{got}"
    else:
        assert _matches(block.shown, got), f"{where}: the page shows\n{block.shown}\nthe notebook showed\n{got}"


CI = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
CI_EXTRAS = {extra for group in re.findall(r"-e '\.\[([\w,]+)\]'", CI) for extra in group.split(",")}
TEST_COMMAND = 'python -m pytest -q -n auto --maxprocesses=4 -m "not slow"'


def _runnable(command: str) -> str:
    """The part of a command line to run here: making and entering a virtual environment, installing the
    project (with extras CI installs) and the test command are what CI itself runs (checked here)."""
    kept = []
    for part in (p.strip() for p in command.split("&&")):
        if part in ("python3 -m venv .venv", ". .venv/bin/activate", "source .venv/bin/activate"):
            continue
        if part.startswith("pip install -e "):
            extras = re.fullmatch(r"pip install -e '\.\[([\w,]+)\]'", part)
            assert extras and set(extras.group(1).split(",")) <= CI_EXTRAS, f"{part!r}: .ci/run installs no such extras"
        elif part.startswith("python -m pytest"):
            assert part == TEST_COMMAND and TEST_COMMAND in CI, f"{part!r} is not the test command .ci/run runs"
        else:
            kept.append(part)
    return " && ".join(kept)


def _console(block: Block, workdir: Path, env: dict[str, str], where: str) -> None:
    runs = re.split(r"^\$ ", block.text, flags=re.M)
    assert not runs[0].strip(), f"{where}: a console block starts with a `$ ` command line"
    for run in runs[1:]:
        command, _, expected = run.partition("\n")
        command = _runnable(command)
        if not command:
            continue
        done = subprocess.run(["bash", "-c", command], cwd=workdir, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0 or "Traceback" not in done.stderr, f"{where}: `{command}` crashed:\n{done.stderr}"
        if expected.strip():
            assert _matches(expected, done.stdout), \
                f"{where}: `{command}` shows\n{expected}\nbut printed\n{done.stdout}\n{done.stderr[-3000:]}"


def run_page(page: Path, workdir: Path) -> int:
    """Runs every block of `page` in `workdir`; returns how many ran."""
    env = _environment()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "examples").symlink_to(ROOT / "examples")  # commands of the README run from a clone's root
    found = blocks(page)
    cells: list[Block] = []  # the page's notebook cells checked so far
    notebook = None  # the page's notebook, run at its first cell
    ran = 0
    for i, block in enumerate(found):
        where = f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name}:{block.line}"
        name = _file_name(block)
        if block.language in ("python", "ipython"):
            file = workdir / (name or f"block_{block.line}.py")
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(block.text, encoding="utf-8")
            if block.language == "python" and name and i + 1 < len(found) and found[i + 1].language == "console":
                continue  # the console block runs it
            if block.language == "python":
                done = subprocess.run([sys.executable, file.name], cwd=workdir, env=env, capture_output=True,
                                      text=True, timeout=600)
                _check_program(done, block, where)
            else:
                if notebook is None:
                    notebook = _notebook([b for b in found if b.language == "ipython"], workdir, env)
                _check_cell(notebook.cells[len(cells)], block, where)
                cells.append(block)
        elif block.language == "console":
            _console(block, workdir, env, where)
        else:
            assert name, (f"{where}: a ```{block.language} block that is no program, command or file: name the file "
                          "on its first line (`# pytest.ini`), or show output right after the program that prints it")
            (workdir / name).write_text(block.text, encoding="utf-8")
        ran += 1
    return ran


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_of_the_page_runs_and_shows_what_it_prints(page, tmp_path):
    run_page(page, tmp_path)


def test_output_blocks_follow_the_program_they_show():
    # a ```text block anywhere else would be output nobody checks
    for page in PAGES:
        for block in blocks(page):
            assert block.language != "text", f"{page.relative_to(ROOT)}:{block.line}: output not right after a program"


def test_a_page_showing_what_its_program_does_not_print_fails(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nprint('one  two')\n```\n\n```text\none two\n```\n\n"
                    "```python\nprint('three')\n```\n\n```text\nfour\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match=r"page.md:9: the page shows\s+four\s+running it printed\s+three"):
        run_page(page, tmp_path / "work")
