"""A Griffe extension: the doctest examples of tfplace's docstrings shown as Python sessions.

A docstring's `>>>` lines and the output after them (up to a blank line) become a `pycon` code
block, so that the API reference shows them as code, as `python -m doctest` reads them.
"""

from __future__ import annotations

from typing import Any

import griffe


def fenced(text: str) -> str:
    """`text` with each run of doctest lines (`>>>` and `...` lines, then their output) fenced."""
    out: list[str] = []
    session: list[str] = []
    indent = ""
    for line in text.splitlines() + [""]:
        stripped = line.strip()
        if stripped.startswith(">>>") and not session:
            indent = line[: len(line) - len(line.lstrip())]
            session = [line[len(indent):]]
        elif session and stripped:
            session.append(line[len(indent):] if line.startswith(indent) else stripped)
        else:
            if session:
                out += [indent + "```pycon", *(indent + s for s in session), indent + "```"]
                session = []
            out.append(line)
    return "\n".join(out[:-1])


class DoctestFences(griffe.Extension):
    """Fences the doctest examples of every docstring Griffe loads."""

    def on_instance(self, *, obj: Any, **_: Any) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fenced(obj.docstring.value)
