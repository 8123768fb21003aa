"""The package's layers hold: no import cycle at any level, no import from a lower layer up, no module over
400 lines, each package's `__init__` saying what it may import (and its modules importing just that), and
docs/architecture.md's drawing of the layers being what `scripts/layers.py` draws from the code today."""

from __future__ import annotations

import ast
import re
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import layers  # scripts/layers.py

GRAPH = layers.imports()
MODULES = layers.modules()
PACKAGES = sorted(name for name, path in MODULES.items() if path.name == "__init__.py")


def test_no_module_takes_part_in_an_import_cycle():
    assert layers.cycles(GRAPH) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_the_parts_of_each_package_import_one_another_without_a_cycle(package):
    """A cycle between two parts of a package (sub-packages or modules) means one of them imports from a layer
    above its own."""
    assert layers.cycles(layers.edges(package, GRAPH)) == []


def test_no_module_is_over_400_lines():
    long = {name: n for name, path in MODULES.items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 400}
    assert long == {}


def _declared(package: str) -> set[str]:
    text = ast.get_docstring(ast.parse(MODULES[package].read_text(encoding="utf-8"))) or ""
    match = re.search(r"^Imports: (.*?)(?:\n\n|\Z)", text, re.M | re.S)
    assert match, f"{package}'s __init__ docstring has no 'Imports:' paragraph"
    return set(re.findall(r"`(tfplace[\w.]*)`", match[1]))


@pytest.mark.parametrize("package", [p for p in PACKAGES if p != "tfplace"])
def test_each_package_imports_what_its_init_says_it_may_and_nothing_else(package):
    parent = package.rpartition(".")[0]
    imported = set()
    for module, targets in GRAPH.items():
        if module == package or module.startswith(package + "."):
            for target in targets:
                if target == package or target.startswith(package + "."):
                    continue
                inside = parent != "tfplace" and target.startswith(parent + ".")
                imported.add(layers.part_of(target, parent if inside else "tfplace"))
    assert imported == _declared(package)


def test_a_cycle_and_an_upward_import_are_found(tmp_path):
    """The checks above can fail: a package whose two modules import each other, lazily, is a cycle."""
    package = tmp_path / "tfplace"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text('"""Low.\n\nImports: nothing of tfplace.\n"""\n')
    (package / "low" / "_a.py").write_text("def f():\n    from tfplace import _top\n")
    (package / "_top.py").write_text("from tfplace.low import _a\n")
    graph = layers.imports(package)
    assert graph["tfplace.low._a"] == {"tfplace._top"}
    assert layers.cycles(graph) == [["tfplace._top", "tfplace.low._a"]]
    assert layers.cycles(layers.edges("tfplace", graph)) == [["tfplace._top", "tfplace.low"]]


def test_build_md_shows_the_layers_as_the_code_draws_them():
    build = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert layers.drawing() in build, (
        "docs/architecture.md's layers are not what `python scripts/layers.py` prints: paste its output")
