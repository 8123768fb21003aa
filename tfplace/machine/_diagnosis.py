"""What `tfplace doctor` answers: a `Diagnosis` (the verdict, the findings with their fixes, the facts they
rest on) and how it reads as text, JSON and HTML. The rules that make one are in `_verdict`; the findings
that other code reads by their data are typed (`HiddenGpus`, `ContainerWithoutGpu`).

Example:
    >>> from tfplace.machine._diagnosis import Diagnosis, Finding
    >>> d = Diagnosis(1, 0, (Finding("cpu-only-tensorflow", "error", "tensorflow-cpu is installed",
    ...                              "pip install 'tensorflow[and-cuda]'", {}),))
    >>> d.ok, d.summary
    (False, 'GPUs: 1 reported by the driver, 0 used by TensorFlow: tensorflow-cpu is installed')
"""

from __future__ import annotations

import copy
import dataclasses
import html
import os
from typing import Any, Mapping, Optional, Sequence, Union

from tfplace.machine._records import FactsError, Library, MachineFacts, TensorFlow

__all__ = ["Finding", "HiddenGpus", "ContainerWithoutGpu", "Diagnosis", "SEVERITIES", "FORMAT"]

FORMAT = "tfplace-doctor/1"
SEVERITIES = ("error", "warning", "info")


@dataclasses.dataclass(frozen=True)
class Finding:
    """One cause or observation: `code` (one of the codes docs/guides/doctor.md lists), `severity` (`"error"`: a
    GPU will not be used; `"warning"`: it will, with a cost or risk; `"info"`), a one-line `message`, a `fix`
    that works when pasted (None when there is none to paste), and the `evidence` it rests on."""

    code: str
    severity: str
    message: str
    fix: Optional[str]
    evidence: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity, "message": self.message, "fix": self.fix,
                "evidence": copy.deepcopy(dict(self.evidence))}


@dataclasses.dataclass(frozen=True)
class HiddenGpus(Finding):
    """`cuda-visible-devices-hides`: `CUDA_VISIBLE_DEVICES` (`value`) leaves `visible` of the `total` GPUs.

    Example:
        >>> HiddenGpus.of("", 0, 2).message
        "CUDA_VISIBLE_DEVICES='' leaves 0 of the 2 GPU(s) visible"
    """

    value: str = ""
    visible: int = 0
    total: int = 0

    @classmethod
    def of(cls, value: str, visible: int, total: int) -> HiddenGpus:
        return cls("cuda-visible-devices-hides", "error",
                   f"CUDA_VISIBLE_DEVICES={value!r} leaves {visible} of the {total} GPU(s) visible",
                   "unset CUDA_VISIBLE_DEVICES", {"value": value, "visible": visible}, value, visible, total)


@dataclasses.dataclass(frozen=True)
class ContainerWithoutGpu(Finding):
    """`container-without-gpu`: a `container` (`"docker"`) started without the host's GPUs, or with its
    `/dev/nvidia*` files (`devices`) but not its driver's `libcuda.so.1`.

    Example:
        >>> ContainerWithoutGpu.of("docker", (), "docker run --gpus all ...").cause
        'this docker container was started without GPU access (no /dev/nvidia*, no libcuda.so.1)'
    """

    container: str = ""
    devices: tuple[str, ...] = ()

    @property
    def cause(self) -> str:
        """What the container lacks, as the verdict line says it."""
        if self.devices:
            return f"this {self.container} container has the host's {', '.join(self.devices)} but not its driver's " \
                   "libcuda.so.1"
        return f"this {self.container} container was started without GPU access (no /dev/nvidia*, no libcuda.so.1)"

    @classmethod
    def of(cls, container: str, devices: Sequence[str], fix: str, said: str = "") -> ContainerWithoutGpu:
        """The finding, its message from the container and its devices (`said`: what TensorFlow's log says)."""
        found = cls("container-without-gpu", "warning", "", fix, {"container": container, "dev_nvidia": list(devices)},
                    container, tuple(devices))
        return dataclasses.replace(found, message=f"{found.cause}: TensorFlow runs on the CPU{said}; a container "
                                   "sees the host's GPUs only when started with them")


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    """Why TensorFlow does or does not use this machine's GPUs (`tfplace.doctor()`).

    `ok` is True when TensorFlow will use every GPU the driver reports (no finding is an error); `summary` is
    the verdict's one line; `str()` the whole text (verdict, fixes, findings, evidence); `facts` the facts as
    the format writes them (`machine`: the same, typed); `save(path)` writes them."""

    gpus_reported: int
    gpus_usable: int
    findings: tuple[Finding, ...]
    machine: Optional[MachineFacts] = None
    needs: Mapping[str, str] = dataclasses.field(default_factory=dict)  # soname -> what the build needs of it
    support: Mapping[int, str] = dataclasses.field(default_factory=dict)  # GPU index -> how this build runs on it

    @property
    def ok(self) -> bool:
        return not any(finding.severity == "error" for finding in self.findings)

    @property
    def facts(self) -> dict[str, Any]:
        """The facts (`tfplace-machine/1`) as a dict; `{}` for a diagnosis made without facts."""
        return self.machine.to_json() if self.machine is not None else {}

    @property
    def summary(self) -> str:
        line = f"GPUs: {self.gpus_reported} reported by the driver, {self.gpus_usable} used by TensorFlow"
        cause = next((f for f in self.findings if f.severity == "error"), None)
        if cause is not None:
            return f"{line}: {cause.message}"
        contained = next((f for f in self.findings if isinstance(f, ContainerWithoutGpu)), None)
        if self.gpus_reported == 0 and contained is not None:
            return f"{line}: {contained.cause}, TensorFlow runs on the CPU"
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

    def save(self, path: Union[str, os.PathLike[str]]) -> None:
        """Writes the facts this diagnosis rests on (`tfplace-machine/1`, as `tfplace doctor --save` does) to
        `path`, whole or not at all; `tfplace.doctor(facts=path)` explains them again."""
        if self.machine is None:
            raise FactsError(f"{os.fspath(path)}: this diagnosis was made without facts; there is nothing to save")
        self.machine.save(path)

    def __str__(self) -> str:
        lines = [self.summary]
        lines += [f"fix: {fix}" for fix in self.fixes]
        lines += [f"{f.severity}: {f.message} [{f.code}]"
                  for f in sorted(self.findings, key=lambda f: SEVERITIES.index(f.severity))]
        lines.append("evidence:")
        lines += [f"  {label:<17} {text}" for label, text in evidence_rows(self.machine, self.needs, self.support)]
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython's text display: the report
        printer.text(str(self))

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{html.escape(label)}</td><td><code>{html.escape(text)}</code></td></tr>"
                       for label, text in evidence_rows(self.machine, self.needs, self.support))
        findings = "".join(
            f"<tr><td>{f.severity}</td><td>{html.escape(f.message)} <small>[{f.code}]</small></td>"
            f"<td><code>{html.escape(f.fix or '')}</code></td></tr>" for f in self.findings)
        colour = "#1a7f37" if self.ok else "#cf222e"
        return (f"<div><p style='color:{colour}'><b>{html.escape(self.summary)}</b></p>"
                f"<table><tr><th>severity</th><th>finding</th><th>fix</th></tr>{findings}</table>"
                f"<table><tr><th colspan=2>evidence</th></tr>{rows}</table></div>")


def _tensorflow_row(tensorflow: Optional[TensorFlow]) -> str:
    if tensorflow is None:
        return "not installed"
    names = ", ".join(f"{name} {version}" for name, version in tensorflow.distributions.items()) or "(no distribution)"
    build = tensorflow.build
    if not build.info:
        return f"{names}: build info not found"
    if not build.is_cuda_build:
        return f"{names}: a build without CUDA"
    code = " ".join(c for c in build.capabilities if c.startswith("sm_")) or "none"
    ptx = " ".join(c for c in build.capabilities if c.startswith("compute_")) or "none"
    return f"{names}: CUDA {build.cuda_version}, cuDNN {build.cudnn_version}, machine code {code}, PTX {ptx}"


def _library_row(soname: str, entry: Library, needs: Mapping[str, str]) -> str:
    if entry.path is None:
        found = f"not loaded ({entry.error})"
    else:
        found = entry.path
        if entry.version:
            found += f" {entry.version}"
        if entry.cuda:
            found += f" for CUDA {entry.cuda}"
        if entry.package:
            found += f" [{entry.package}]"
    return f"{soname}: {found}" + (f"; needs {needs[soname]}" if soname in needs else "")


def evidence_rows(facts: Optional[MachineFacts], needs: Mapping[str, str],
                  support: Mapping[int, str]) -> list[tuple[str, str]]:
    """The evidence as (label, text) rows: platform, TensorFlow and its build, driver, GPUs, libraries,
    environment, TensorFlow's own view."""
    if facts is None:
        return []
    system = facts.platform
    rows = [("platform", f"{system.system} {system.release} {system.machine}{' (WSL)' if system.wsl else ''}, "
                         f"Python {facts.python}"),
            ("tensorflow", _tensorflow_row(facts.tensorflow))]
    driver = facts.driver
    rows.append(("driver", "none" if driver is None else f"{driver.version} (CUDA {driver.cuda})"))
    for gpu in facts.gpus:
        how = support.get(gpu.index, "")
        rows.append((f"gpu {gpu.index}", f"{gpu.name}, {gpu.memory_mib} MiB, compute capability "
                     f"{gpu.compute_capability}" + (f": {how}" if how else "")))
    if not facts.gpus and facts.pci_gpus:
        rows.append(("pci", "NVIDIA display controllers: " + ", ".join(facts.pci_gpus)))
    rows += [("library", _library_row(soname, entry, needs)) for soname, entry in facts.libraries.items()]
    rows += [("environment", f"{name}={value}") for name, value in facts.environment.items() if value is not None]
    if "CUDA_VISIBLE_DEVICES" in facts.environment and facts.environment["CUDA_VISIBLE_DEVICES"] is None:
        rows.append(("environment", "CUDA_VISIBLE_DEVICES (unset: every GPU visible)"))
    view = facts.tensorflow_view
    if view is None:
        rows.append(("tensorflow's view", "not read"))
        return rows
    listed = ": " + ", ".join(view.gpus) if view.gpus else ""
    rows.append(("tensorflow's view", f"lists {len(view.gpus)} GPU(s){listed}"))
    rows += [("  its log", line) for line in view.log]
    for run in view.run or ():
        rows.append(("run", f"MatMul on {run.device}: " + (
            f"error {run.error}" if run.error else
            f"ran on {run.ran_on}, first call {run.first_ms or 0.0:.1f} ms, next {run.next_ms or 0.0:.2f} ms")))
    return rows
