"""What `tfplace doctor` answers: a `Diagnosis` (the verdict, the findings with their fixes, the facts they
rest on) and how it reads as text, JSON and HTML. The rules that make one are in `_verdict`.

Example:
    >>> from tfplace.machine._diagnosis import Diagnosis, Finding
    >>> d = Diagnosis(1, 0, (Finding("cpu-only-tensorflow", "error", "tensorflow-cpu is installed",
    ...                              "pip install 'tensorflow[and-cuda]'", {}),), {})
    >>> d.ok, d.summary
    (False, 'GPUs: 1 reported by the driver, 0 used by TensorFlow: tensorflow-cpu is installed')
"""

from __future__ import annotations

import dataclasses
import html
from typing import Any, Optional

__all__ = ["Finding", "Diagnosis", "SEVERITIES", "FORMAT"]

FORMAT = "tfplace-doctor/1"
SEVERITIES = ("error", "warning", "info")


@dataclasses.dataclass(frozen=True)
class Finding:
    """One cause or observation: `code` (one of the codes docs/guides/doctor.md lists), `severity` (`"error"`: a GPU will not be used;
    `"warning"`: it will, with a cost or risk; `"info"`), a one-line `message`, a `fix` that works when pasted
    (None when there is none to paste), and the `evidence` it rests on."""

    code: str
    severity: str
    message: str
    fix: Optional[str]
    evidence: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    """Why TensorFlow does or does not use this machine's GPUs (`tfplace.doctor()`).

    `ok` is True when TensorFlow will use every GPU the driver reports (no finding is an error); `summary` is
    the verdict's one line; `str()` the whole text (verdict, fixes, findings, evidence)."""

    gpus_reported: int
    gpus_usable: int
    findings: tuple[Finding, ...]
    facts: dict[str, Any]
    needs: dict[str, str] = dataclasses.field(default_factory=dict)  # soname -> what the build needs of it
    support: dict[int, str] = dataclasses.field(default_factory=dict)  # GPU index -> how this build runs on it

    @property
    def ok(self) -> bool:
        return not any(finding.severity == "error" for finding in self.findings)

    @property
    def summary(self) -> str:
        line = f"GPUs: {self.gpus_reported} reported by the driver, {self.gpus_usable} used by TensorFlow"
        cause = next((f for f in self.findings if f.severity == "error"), None)
        if cause is not None:
            return f"{line}: {cause.message}"
        contained = next((f for f in self.findings if f.code == "container-without-gpu"), None)
        if self.gpus_reported == 0 and contained is not None:
            return f"{line}: {contained.message.split(': TensorFlow runs on the CPU')[0]}, TensorFlow runs on the CPU"
        if self.gpus_reported == 0:
            return f"{line}: no NVIDIA GPU here, TensorFlow runs on the CPU"
        warned = [f.code for f in self.findings if f.severity == "warning"]
        return line + (f" (warnings: {', '.join(dict.fromkeys(warned))})" if warned else "")

    @property
    def fixes(self) -> list[str]:
        """Each fix once, errors' first."""
        ordered = sorted(self.findings, key=lambda f: SEVERITIES.index(f.severity))
        return list(dict.fromkeys(f.fix for f in ordered if f.fix))

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "ok": self.ok, "summary": self.summary, "gpus_reported": self.gpus_reported,
                "gpus_usable": self.gpus_usable, "findings": [f.to_json() for f in self.findings],
                "facts": self.facts}

    def __str__(self) -> str:
        lines = [self.summary]
        lines += [f"fix: {fix}" for fix in self.fixes]
        lines += [f"{f.severity}: {f.message} [{f.code}]"
                  for f in sorted(self.findings, key=lambda f: SEVERITIES.index(f.severity))]
        lines.append("evidence:")
        lines += [f"  {label:<17} {text}" for label, text in evidence_rows(self.facts, self.needs, self.support)]
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython's text display: the report
        printer.text(str(self))

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{html.escape(label)}</td><td><code>{html.escape(text)}</code></td></tr>"
                       for label, text in evidence_rows(self.facts, self.needs, self.support))
        findings = "".join(
            f"<tr><td>{f.severity}</td><td>{html.escape(f.message)} <small>[{f.code}]</small></td>"
            f"<td><code>{html.escape(f.fix or '')}</code></td></tr>" for f in self.findings)
        colour = "#1a7f37" if self.ok else "#cf222e"
        return (f"<div><p style='color:{colour}'><b>{html.escape(self.summary)}</b></p>"
                f"<table><tr><th>severity</th><th>finding</th><th>fix</th></tr>{findings}</table>"
                f"<table><tr><th colspan=2>evidence</th></tr>{rows}</table></div>")


def _tensorflow_row(tensorflow: Optional[dict[str, Any]]) -> str:
    if tensorflow is None:
        return "not installed"
    names = ", ".join(f"{name} {version}" for name, version in tensorflow["distributions"].items()) or "(no distribution)"
    build = tensorflow["build"]
    if not build:
        return f"{names}: build info not found"
    if not build.get("is_cuda_build"):
        return f"{names}: a build without CUDA"
    capabilities = build.get("cuda_compute_capabilities") or []
    code = " ".join(c for c in capabilities if c.startswith("sm_")) or "none"
    ptx = " ".join(c for c in capabilities if c.startswith("compute_")) or "none"
    return (f"{names}: CUDA {build.get('cuda_version')}, cuDNN {build.get('cudnn_version')}, "
            f"machine code {code}, PTX {ptx}")


def _library_row(soname: str, entry: dict[str, Any], needs: dict[str, str]) -> str:
    if entry.get("path") is None:
        found = f"not loaded ({entry.get('error')})"
    else:
        found = entry["path"]
        if entry.get("version"):
            found += f" {entry['version']}"
        if entry.get("cuda"):
            found += f" for CUDA {entry['cuda']}"
        if entry.get("package"):
            found += f" [{entry['package']}]"
    return f"{soname}: {found}" + (f"; needs {needs[soname]}" if soname in needs else "")


def evidence_rows(facts: dict[str, Any], needs: dict[str, str], support: dict[int, str]) -> list[tuple[str, str]]:
    """The evidence as (label, text) rows: platform, TensorFlow and its build, driver, GPUs, libraries,
    environment, TensorFlow's own view."""
    if not facts:
        return []
    system = facts["platform"]
    rows = [("platform", f"{system.get('system')} {system.get('release')} {system.get('machine')}"
             f"{' (WSL)' if system.get('wsl') else ''}, Python {facts['python']}"),
            ("tensorflow", _tensorflow_row(facts["tensorflow"]))]
    driver = facts["driver"]
    rows.append(("driver", "none" if driver is None else f"{driver.get('version')} (CUDA {driver.get('cuda')})"))
    for gpu in facts["gpus"]:
        how = support.get(gpu["index"], "")
        rows.append((f"gpu {gpu['index']}", f"{gpu['name']}, {gpu.get('memory_mib')} MiB, compute capability "
                     f"{gpu.get('compute_capability')}" + (f": {how}" if how else "")))
    if not facts["gpus"] and facts.get("pci_gpus"):
        rows.append(("pci", "NVIDIA display controllers: " + ", ".join(facts["pci_gpus"])))
    rows += [("library", _library_row(soname, entry, needs)) for soname, entry in facts["libraries"].items()]
    rows += [("environment", f"{name}={value}") for name, value in facts["environment"].items() if value is not None]
    if "CUDA_VISIBLE_DEVICES" in facts["environment"] and facts["environment"]["CUDA_VISIBLE_DEVICES"] is None:
        rows.append(("environment", "CUDA_VISIBLE_DEVICES (unset: every GPU visible)"))
    view = facts.get("tensorflow_view")
    if view is None:
        rows.append(("tensorflow's view", "not read"))
    else:
        rows.append(("tensorflow's view", f"lists {len(view['gpus'])} GPU(s)"
                     + (": " + ", ".join(view["gpus"]) if view["gpus"] else "")))
        rows += [("  its log", line) for line in view.get("log", [])]
        for run in view.get("run", []):
            rows.append(("run", f"MatMul on {run['device']}: " + (
                f"error {run['error']}" if run.get("error") else
                f"ran on {run['ran_on']}, first call {run['first_ms']:.1f} ms, next {run['next_ms']:.2f} ms")))
    return rows
