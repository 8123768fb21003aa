"""The step rules are declared data: the code gives advice only under a declared rule's name, the guide's table is
made from the declarations, and every threshold a declaration names is the one the code judges by."""

import re

from conftest import ROOT


def _named_in(path):
    """The rule names a module gives advice under: `Advice("name", ...)` (or `Advice("a" if x else "b", ...)`) and
    the cluster's `{"rule": "name", ...}`."""
    text = (ROOT / path).read_text(encoding="utf-8")
    firsts = re.findall(r'Advice\(\s*("[a-z-]+"(?: if \w+ else "[a-z-]+")?)', text)
    firsts += re.findall(r'"rule": ("[a-z-]+")', text)
    return {name for first in firsts for name in re.findall(r'"([a-z-]+)"', first)}


def test_every_rule_the_code_gives_is_declared_and_every_declared_rule_is_given():
    from tfplace.placement.steps._thresholds import RULES

    declared = [rule.name for rule in RULES]
    given = (_named_in("tfplace/placement/steps/_rules.py") | _named_in("tfplace/cluster/_steps.py")
             | _named_in("tfplace/placement/steps/_memory_advice.py"))
    assert len(declared) == len(set(declared))
    assert given == set(declared)


def test_the_guide_shows_the_declared_table():
    from tfplace.placement.steps import _thresholds

    guide = (ROOT / "docs" / "guides" / "steps.md").read_text(encoding="utf-8")
    assert "<!-- rules: tfplace.placement.steps._thresholds.RULES -->" in guide and "| rule |" not in guide
    table = _thresholds.table()
    assert all(f"| `{rule.name}` |" in table for rule in _thresholds.RULES)
    assert f"at least {_thresholds.INPUT_BOUND:.0%} of their time" in table and f"{_thresholds.SKEW:g} x" in table


def test_severity_is_one_scale():
    from tfplace.placement.steps._thresholds import SEVERITIES, severity

    assert [severity(share) for share in (0.9, 0.5, 0.3, 0.2, 0.1, 0.0)] == [
        "high", "high", "medium", "medium", "low", "low"] and set(SEVERITIES) == {"high", "medium", "low"}


def test_every_doctor_code_is_declared_and_the_guide_shows_the_declared_table():
    from tfplace.machine import _codes

    verdict, diagnosis = ((ROOT / "tfplace" / "machine" / name).read_text(encoding="utf-8")
                          for name in ("_verdict.py", "_diagnosis.py"))
    given = set(re.findall(r'\.add\(\s*"([a-z0-9-]+)"', verdict)) | set(re.findall(r'cls\("([a-z0-9-]+)"', diagnosis))
    assert given == set(_codes.BY_CODE) and len(_codes.CODES) == len(_codes.BY_CODE)
    guide = (ROOT / "docs" / "guides" / "doctor.md").read_text(encoding="utf-8")
    assert "<!-- codes: tfplace.machine._codes.CODES -->" in guide and "| code |" not in guide
    assert all(f"| `{code.name}` |" in _codes.table() for code in _codes.CODES)


def test_a_finding_under_an_undeclared_code_is_a_defect_that_names_it():
    import pytest

    from tfplace.machine import _verdict

    rules = _verdict._Rules.__new__(_verdict._Rules)
    rules.findings = []
    with pytest.raises(ValueError, match="'made-up-code'"):
        rules.add("made-up-code", "error", "a message")
