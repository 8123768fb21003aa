"""tfplace's layers, drawn from its imports: each package's parts, top first, each importing only parts below it.

Every `import` and `from ... import` of a tfplace module counts, those inside functions too. A part is a
sub-package or a module of the package drawn; `tfplace`'s own `__init__` (the front module) is the part
`tfplace`. `tests/test_layers.py` checks that the layers hold (no cycle, nothing imported from above) and that
docs/architecture.md shows what this prints.

    python scripts/layers.py            # every package with sub-packages, as docs/architecture.md shows them
"""

from __future__ import annotations

import ast
import collections
import re
import sys
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tfplace"
DRAWN = ("tfplace", "tfplace.placement")  # the packages whose parts are packages and modules of several layers


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package is its `__init__.py`)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _targets(name: str, path: Path, node: ast.AST, known: dict[str, Path]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base_parts = name.split(".")[: len(name.split(".")) - node.level + (path.name == "__init__.py")]
            base = ".".join(base_parts + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        for alias in node.names:
            yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base


def imports(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the tfplace modules it imports (at its top or inside a function)."""
    known = modules(package)
    found: dict[str, set[str]] = {}
    for name, path in known.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _targets(name, path, node, known):
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        found[name] = targets
    return found


def part_of(module: str, package: str) -> str:
    """The part of `package` that holds `module` (`tfplace` itself for the package's own `__init__`)."""
    if module == package:
        return package
    return package + "." + module[len(package) + 1:].split(".")[0]


def edges(package: str, graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Part of `package` -> the other parts of it that its modules import."""
    found: dict[str, set[str]] = collections.defaultdict(set)
    for module, targets in graph.items():
        if not module.startswith(package + ".") and not (module == package == "tfplace"):
            continue  # (a package's own `__init__` is a part only for the front module)
        found[part_of(module, package)]
        for target in targets:
            if target == package or target.startswith(package + "."):
                source, into = part_of(module, package), part_of(target, package)
                if source != into:
                    found[source].add(into)
    return dict(found)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one node (each an import cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                other = stack.pop()
                group.append(other)
                if other == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layers(graph: dict[str, set[str]]) -> list[list[str]]:
    """The parts by layer, bottom first: a part's layer is one above the highest it imports."""
    level: dict[str, int] = {}

    def of(node: str) -> int:
        if node not in level:
            level[node] = 0
            level[node] = 1 + max((of(other) for other in graph.get(node, ())), default=-1)
        return level[node]

    for node in graph:
        of(node)
    rows: list[list[str]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for node in sorted(level):
        rows[level[node]].append(node)
    return rows


def summary(part: str, known: dict[str, Path], width: int = 92) -> str:
    """The first sentence of a part's docstring, cut at a word to `width`, as its line in the drawing."""
    path = known.get(part)
    text = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) if path else None
    first = re.split(r"(?<=\.)\s", " ".join((text or "").split()), maxsplit=1)[0].rstrip(".")
    return first if len(first) <= width else first[:width - 4].rsplit(" ", 1)[0] + " ..."


def drawing() -> str:
    """What docs/architecture.md shows: each drawn package's parts, top layer first, each with its docstring's
    summary."""
    graph, known = imports(), modules()
    lines = []
    for package in DRAWN:
        lines.append(f"{package}: its parts by layer, top first (a part imports only parts of lower layers)")
        rows = layers(edges(package, graph))
        for number, row in reversed(list(enumerate(rows))):
            for part in row:
                name = "(front module)" if part == package == "tfplace" else part.rpartition(".")[2]
                lines.append(f"  {number:>2}  {name:<15} {summary(part, known)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    print(drawing(), end="")
