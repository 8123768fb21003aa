"""The rules of `tfplace doctor`: from a machine's facts (`_facts`) to a `Diagnosis`: how many GPUs the
driver reports, how many TensorFlow will use, each cause with its fix. Pure: any machine's facts can be
explained anywhere. What a build needs comes from the facts of the installed TensorFlow (its build info,
its `and-cuda` requirements), not from a table per release.

Example:
    >>> from tfplace.machine._verdict import diagnose
    >>> facts = {"format": "tfplace-machine/1", "platform": {"system": "Linux", "release": "6.8",
    ...          "machine": "x86_64", "wsl": False}, "python": "3.12.3", "driver": None, "gpus": [],
    ...          "tensorflow": None, "libraries": {}, "environment": {}, "tensorflow_view": None}
    >>> diagnose(facts).summary
    'GPUs: 0 reported by the driver, 0 used by TensorFlow: no NVIDIA GPU here, TensorFlow runs on the CPU'
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Optional, Union

from tfplace.machine import _releases
from tfplace.machine._cuda import version_tuple
from tfplace.machine._diagnosis import ContainerWithoutGpu, Diagnosis, Finding, HiddenGpus
from tfplace.machine._gpus import GpuInfo, map_cuda_visible
from tfplace.machine._libraries import Wanted, from_build, satisfies, wanted
from tfplace.machine._records import BuildInfo, Library, MachineFacts, TensorFlow
from tfplace.machine._codes import BY_CODE, SEVERITIES

__all__ = ["diagnose", "classify"]

# TensorFlow's metapackages: on these platforms `tensorflow` installs the other distribution (nothing conflicts)
_METAPACKAGES = {("Windows", "tensorflow-intel"), ("Linux-aarch64", "tensorflow-cpu-aws"),
                 ("Linux-arm64", "tensorflow-cpu-aws")}
_RUNS = {"docker": "docker run --gpus all ...  # the host needs the NVIDIA Container Toolkit: https://docs.nvidia.com/"
                   "datacenter/cloud-native/container-toolkit/latest/install-guide.html",
         "podman": "podman run --device nvidia.com/gpu=all ...  # the host needs the NVIDIA Container Toolkit's "
                   "CDI spec",
         "kubernetes": "resources: {limits: {nvidia.com/gpu: 1}}  # in the pod's container spec, with NVIDIA's "
                       "device plugin on the cluster"}


def _capability(text: Optional[str]) -> Optional[tuple[int, int]]:
    match = re.fullmatch(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def _code(entry: str) -> Optional[tuple[str, tuple[int, int]]]:
    match = re.fullmatch(r"(sm|compute)_(\d+)(\d)[a-z]?", entry.strip())
    return (match.group(1), (int(match.group(2)), int(match.group(3)))) if match else None


def classify(capability: str, build: Union[BuildInfo, Mapping[str, Any]]) -> tuple[str, str]:
    """How a CUDA build runs on a GPU of `capability`: (`"native"`, `"ptx"`, `"too-old"`, `"too-new"` or
    `"unknown"`, the words for it). Machine code `sm_XY` runs on X.Y and newer minors of X; PTX `compute_XY`
    is compiled by the driver for X.Y and newer, as far as the build's CUDA knows the GPU."""
    build = build if isinstance(build, BuildInfo) else BuildInfo.from_json(dict(build), "build info")
    have = _capability(capability)
    codes = [c for c in map(_code, build.capabilities) if c]
    if have is None or not codes:
        return "unknown", "compute capability or the build's code unknown"
    native = [cc for kind, cc in codes if kind == "sm" and cc[0] == have[0] and cc[1] <= have[1]]
    if native:
        return "native", f"machine code sm_{max(native)[0]}{max(native)[1]}"
    oldest = min(cc for _, cc in codes)
    if have < oldest:
        return "too-old", f"older than the build's oldest code ({oldest[0]}.{oldest[1]})"
    newest = _releases.newest_capability(str(build.cuda_version))
    if newest is not None and have > (_capability(newest) or have):
        ptx = [cc for kind, cc in codes if kind == "compute"]
        cannot = f"; its PTX compute_{max(ptx)[0]}{max(ptx)[1]} cannot serve it" if ptx else ""
        return "too-new", f"newer than the build's CUDA {build.cuda_version} knows (up to {newest}){cannot}"
    ptx = [cc for kind, cc in codes if kind == "compute" and cc <= have]
    if ptx:
        return "ptx", f"no machine code for {capability}: PTX compute_{max(ptx)[0]}{max(ptx)[1]} compiled at start"
    return "too-new", f"no machine code for {capability} and no PTX it can compile"


def _install(facts: MachineFacts, version: Optional[str] = None) -> Optional[str]:
    """The command that installs the GPU build of `version` (else the installed release) on the machine of
    `facts`: its platform and the distributions there now (None where none exists)."""
    tensorflow = facts.tensorflow
    version = version or (tensorflow.version if tensorflow else None) or ""
    return _releases.gpu_install(version, facts.platform.system, facts.platform.machine,
                                 list(tensorflow.distributions) if tensorflow else [])


class _Rules:
    """The findings of one machine's facts, in the order a user must act on them."""

    def __init__(self, facts: MachineFacts) -> None:
        self.facts = facts
        self.findings: list[Finding] = []
        self.needs: dict[str, str] = {}
        self.support: dict[int, str] = {}
        self.blocked = False  # TensorFlow will list no GPU
        self.broken = False  # it lists them, but they fail (a library built for another CUDA)
        self.windows = False  # native Windows, where TensorFlow after 2.10 has no GPU build
        self.old_driver = False  # the driver's CUDA is older than the build's major
        self.tensorflow: Optional[TensorFlow] = facts.tensorflow
        self.build = facts.tensorflow.build if facts.tensorflow else BuildInfo()
        self.cuda_build = self.build.is_cuda_build
        self.reported = len(facts.gpus)

    def add(self, code: str, severity: str, message: str, fix: Optional[str] = None, **evidence: Any) -> None:
        if code not in BY_CODE or severity not in SEVERITIES:  # the codes are declared data (the guide's table)
            raise ValueError(f"tfplace's doctor made a finding {code!r} ({severity!r}); allowed are the codes of "
                             f"tfplace.machine._codes.CODES and the severities {SEVERITIES}")
        self.findings.append(Finding(code, severity, message, fix, evidence))

    def platform(self) -> None:
        system, tensorflow = self.facts.platform, self.tensorflow
        version = version_tuple(tensorflow.version) if tensorflow else ()
        if system.system == "Windows" and version[:2] > (2, 10):
            self.blocked = self.windows = True
            self.add("platform-without-gpu", "error", "TensorFlow after 2.10 uses no GPU on native Windows",
                     "wsl --install  # then, inside WSL2: pip install 'tensorflow[and-cuda]'",
                     platform=system.to_json())
        elif system.system == "Darwin":
            self.add("platform-without-gpu", "info", "TensorFlow uses no NVIDIA GPU on macOS; an Apple GPU only "
                     "through tensorflow-metal", "pip install tensorflow-metal", platform=system.to_json())
        libcuda = self.facts.libraries.get("libcuda.so.1")
        if system.wsl and libcuda is not None and libcuda.path is None:
            self.blocked = True
            self.add("wsl-libcuda-missing", "error", "WSL2 without its libcuda.so.1 (the Windows NVIDIA driver "
                     "provides /usr/lib/wsl/lib/libcuda.so.1)",
                     "export LD_LIBRARY_PATH=/usr/lib/wsl/lib:$LD_LIBRARY_PATH  # after installing the Windows "
                     "NVIDIA driver", error=libcuda.error)

    def driver(self) -> None:
        problems = list(self.facts.probe_errors)
        if problems and not self.facts.gpus:
            present = self.facts.driver is not None or bool(self.facts.pci_gpus)
            self.blocked = self.blocked or present
            silent = any("communicate with the NVIDIA driver" in p for p in problems)
            self.add("driver-not-answering", "error" if present else "warning",
                     f"the NVIDIA driver does not answer: {problems[0]}",
                     "sudo reboot  # its kernel module and its libraries differ (after a driver upgrade), or "
                     "reinstall the driver" if silent else None, problems=problems)
            return
        if self.facts.driver is not None or self.facts.gpus:
            return
        pci = list(self.facts.pci_gpus)
        if pci:
            self.blocked = True
            self.add("no-driver", "error", f"{len(pci)} NVIDIA GPU(s) on the PCI bus but no NVIDIA driver runs",
                     "sudo ubuntu-drivers install && sudo reboot  # or your distribution's NVIDIA driver package",
                     pci=pci)
            return
        said = (" (TensorFlow's 'Could not find cuda drivers on your machine, GPU will not be used' says this)"
                if self.cuda_build else "")
        container = self.facts.platform.container
        if container:
            self.findings.append(ContainerWithoutGpu.of(container, self.facts.platform.dev_nvidia,
                                                        _RUNS.get(container, _RUNS["docker"]), said))
            return
        self.add("no-driver", "info", "no NVIDIA driver (no libcuda.so.1, NVML or /proc/driver/nvidia/version): "
                 f"TensorFlow runs on the CPU{said}")

    def tensorflow_build(self) -> None:
        tensorflow = self.tensorflow
        severity = "error" if self.reported else "info"
        if tensorflow is None:
            self.blocked = True
            self.add("tensorflow-missing", severity, "TensorFlow is not installed in this Python",
                     "pip install 'tensorflow[and-cuda]'" if self.reported else "pip install tensorflow")
            return
        system = self.facts.platform
        where = {system.system, f"{system.system}-{system.machine}"}
        names = [n for n in tensorflow.distributions  # a metapackage's own distribution is no conflict
                 if not ("tensorflow" in tensorflow.distributions and any((w, n) in _METAPACKAGES for w in where))]
        if len(names) > 1:
            self.add("conflicting-tensorflow", "warning", f"{len(names)} TensorFlow distributions installed "
                     f"({', '.join(names)}): the last installed overwrote the others' files", _install(self.facts),
                     distributions=dict(tensorflow.distributions))
        if not self.cuda_build:
            self.blocked = True
            installed = ", ".join(f"{n} {v}" for n, v in tensorflow.distributions.items()) or "TensorFlow"
            fix = _install(self.facts) if self.reported else None
            windows = "; TensorFlow after 2.10 has no GPU build for native Windows" if self.windows else ""
            self.add("cpu-only-tensorflow", severity, f"{installed} is a build without CUDA{windows}",
                     None if windows else fix, build=self.build.to_json())

    def driver_version(self) -> None:
        driver = self.facts.driver
        if not (self.cuda_build and driver and driver.cuda):
            return
        have, need = version_tuple(driver.cuda)[:2], version_tuple(self.build.cuda_version)[:2]
        if have and need and have[0] < need[0]:
            self.blocked = self.old_driver = True
            self.add("driver-too-old", "error", f"the driver {driver.version} supports CUDA {driver.cuda}; "
                     f"this TensorFlow needs CUDA {need[0]}.x", _driver_fix(str(self.build.cuda_version)),
                     driver=driver.to_json(), needs=self.build.cuda_version)

    def libraries(self) -> None:
        if not self.cuda_build or self.tensorflow is None:
            return
        libraries = self.facts.libraries
        wants = [w for w in wanted(self.tensorflow.requires) or from_build(self.build) if w.soname in libraries]
        cuda_major = version_tuple(self.build.cuda_version)[:1]
        for want in wants:
            self.needs[want.soname] = (f"{want.specifier} ({want.package})" if want.specifier else want.package or
                                       f"CUDA {self.build.cuda_version}, cuDNN {self.build.cudnn_version}")
        missing = [w for w in wants if libraries[w.soname].path is None]
        if missing:
            required = [w for w in missing if w.required]
            self.blocked = self.blocked or bool(required)
            later = ", ".join(w.soname for w in missing if not w.required)
            message = (f"CUDA libraries this TensorFlow needs do not load: {', '.join(w.soname for w in required)}"
                       + (f" (nor, loaded when first needed, {later})" if later else "") if required else
                       f"CUDA libraries TensorFlow loads when first needed do not load: {later}")
            fix, installed = self._missing_fix(missing, self.tensorflow)
            self.add("cuda-libraries-missing", "error" if required else "warning",
                     message + (f"; pip installed them ({installed}), where TensorFlow's loader does not look"
                                if installed else ""), fix, missing=[w.soname for w in missing],
                     errors={w.soname: libraries[w.soname].error for w in missing})
        for want in wants:
            self._version(want, libraries[want.soname], cuda_major)

    def _missing_fix(self, missing: list[Wanted], tensorflow: TensorFlow) -> tuple[Optional[str], str]:
        """The fix for libraries that do not load, and where pip put them when it did: wheels that are installed
        in folders the loader does not search, want those folders in `LD_LIBRARY_PATH` (TensorFlow 2.16.1's own run
        path misses them: installing them again changes nothing), after installing the versions the build wants
        of those missing or at another version; else the release's way to get them."""
        wheels = self.facts.nvidia_wheels
        there = {w.package: wheels[w.package] for w in missing if w.package in wheels and wheels[w.package].lib}
        if there:  # installing them again changes nothing (tensorflow#63362): the loader must be shown them
            folders = list(dict.fromkeys(str(wheel.lib) for wheel in there.values()))
            export = f"export LD_LIBRARY_PATH={':'.join(folders)}:$LD_LIBRARY_PATH"
            wrong = list(dict.fromkeys(w.requirement for w in missing if w.requirement and (
                w.package not in there or not satisfies(there[w.package].version, w.specifier))))
            fix = f"pip install {' '.join(repr(r) for r in wrong)} && {export}" if wrong else export
            return fix, ", ".join(f"{name} {wheel.version}" for name, wheel in there.items())
        release = _releases.release_of(tensorflow.version)
        if not tensorflow.requires and release is not None and self.facts.platform.system == "Linux":
            return _releases.cuda_install(release), ""  # 2.13 and older: no CUDA wheel of its own
        return _install(self.facts), ""

    def _version(self, want: Wanted, found: Library, cuda_major: tuple[int, ...]) -> None:
        if found.path is None:
            return
        version = found.version or (found.package or " ").split(" ")[-1] or None
        required = want.specifier or want.minimum
        low = bool(version and want.specifier and not satisfies(version, want.specifier))
        other_cuda = bool(found.cuda and cuda_major and version_tuple(found.cuda)[:1] != cuda_major)
        if not (low or other_cuda):
            return
        if want.required:
            self.broken = True
        what = (f"{want.soname} {version} from {found.path} is not the {required} this TensorFlow needs"
                if low else f"{want.soname} from {found.path} is built for CUDA {found.cuda}, this TensorFlow "
                f"for CUDA {self.build.cuda_version}")
        directory = found.path.rsplit("/", 1)[0]
        in_path = [d for d in (self.facts.environment.get("LD_LIBRARY_PATH") or "").split(":") if d]
        # a file from pip's wheel at the wrong version wants that wheel; any other gives way to the wheel, which
        # TensorFlow's run path finds first
        fix = f"pip install '{want.requirement}'" if found.package and want.requirement else _install(self.facts)
        if directory in in_path:
            fix = ("export LD_LIBRARY_PATH=" + ":".join(d for d in in_path if d != directory)
                   + f"  # it puts {directory} first; then: {fix}")
        self.add("library-version-mismatch", "error" if want.required else "warning", what, fix,
                 library=want.soname, found={"path": found.path, "version": version, "cuda": found.cuda},
                 required={"version": want.minimum, "specifier": want.specifier, "cuda": self.build.cuda_version,
                           "package": want.requirement})

    def visible(self) -> list[GpuInfo]:
        gpus = [GpuInfo(g.index, g.name, g.memory_mib, g.uuid or "", None, g.compute_capability)
                for g in self.facts.gpus]
        variable = self.facts.environment.get("CUDA_VISIBLE_DEVICES")
        visible = map_cuda_visible(gpus, variable)
        if variable is not None and len(visible) < len(gpus):
            self.findings.append(HiddenGpus.of(variable, len(visible), len(gpus)))
        by_uuid = {g.uuid: g for g in gpus}
        return [by_uuid.get(g.uuid, g) if g.uuid else g for g in visible]

    def capabilities(self, visible: list[GpuInfo]) -> tuple[int, int]:
        """(GPUs TensorFlow lists, of them those it cannot run on) among `visible`."""
        listed, failing = 0, 0
        driver, cuda = self.facts.driver, str(self.build.cuda_version)
        for gpu in visible:
            kind, words = classify(gpu.compute_capability or "", self.build)
            self.support[gpu.index] = words
            label = f"GPU {gpu.index} ({gpu.name}, compute capability {gpu.compute_capability})"
            listed += kind != "too-old"
            if kind == "too-old":
                major = (_capability(gpu.compute_capability) or (0, 0))[0]
                release = _releases.LAST_RELEASE_FOR.get(major)
                self.add("compute-capability-unsupported", "error", f"{label} is {words}: TensorFlow ignores it",
                         _install(self.facts, f"{release}.*") if release else None,
                         gpu=gpu.index, compute_capability=gpu.compute_capability)
            elif kind == "too-new":
                failing += 1
                code = (gpu.compute_capability or "").replace(".", "")
                newer = _releases.newest_for(gpu.compute_capability or "", self.facts.python)
                mine = _releases.release_of(self.tensorflow.version if self.tensorflow else None)
                later = (newer is not None and mine is not None
                         and _releases.RELEASES.index(newer) > _releases.RELEASES.index(mine))
                fix = (_install(self.facts, f"{newer.version}.*") if later and newer is not None else
                       f"build TensorFlow from source with HERMETIC_CUDA_COMPUTE_CAPABILITIES=compute_{code} "
                       "(https://www.tensorflow.org/install/source)")
                self.add("compute-capability-unsupported", "error", f"{label} is {words}", fix, gpu=gpu.index,
                         compute_capability=gpu.compute_capability)
            elif kind == "ptx":
                have, need = version_tuple(driver.cuda if driver else None)[:2], version_tuple(cuda)[:2]
                if have and need and have < need and driver is not None and not self.old_driver:
                    failing += 1
                    self.old_driver = True
                    self.add("driver-too-old", "error", f"{label} runs this build's PTX, which the driver's CUDA "
                             f"{driver.cuda} cannot compile (it comes from CUDA {cuda})", _driver_fix(cuda),
                             gpu=gpu.index, driver=driver.to_json())
                elif not (have and need and have[:1] < need[:1]):
                    self.add("ptx-jit", "warning", f"{label}: {words}, which can take minutes on first use",
                             "export CUDA_CACHE_MAXSIZE=4294967296  # keep the compiled kernels between runs",
                             gpu=gpu.index, compute_capability=gpu.compute_capability)
        return listed, failing

    def view(self, predicted: int) -> int:
        """TensorFlow's own count when it was read (else `predicted`); a finding when they differ."""
        view = self.facts.tensorflow_view
        if view is None:
            return predicted
        listed = len(view.gpus)
        if listed != predicted:
            lines = [line for line in view.log if re.match(r"[WEF]", line)] or list(view.log)
            self.add("tensorflow-view-differs", "error" if listed < self.reported else "warning",
                     f"TensorFlow itself lists {listed} GPU(s) where the facts predict {predicted}"
                     + (f"; its log: {lines[0]}" if lines else ""), None, gpus=list(view.gpus), log=list(view.log))
        for run in view.run or ():
            if run.error or (run.device.startswith("/GPU") and "GPU" not in (run.ran_on or "")):
                self.add("gpu-run-failed", "error", f"a MatMul on {run.device} did not run there: "
                         f"{run.error or run.ran_on}", None, run=run.to_json())
        return listed


def _driver_fix(cuda: str) -> str:
    minimum = _releases.driver_for(cuda)
    need = ".".join(map(str, version_tuple(cuda)[:2]))
    return (f"sudo ubuntu-drivers install  # or any NVIDIA driver {minimum} or newer (CUDA {need}): "
            "https://www.nvidia.com/drivers" if minimum else
            f"install an NVIDIA driver for CUDA {need} or newer (https://www.nvidia.com/drivers)")


def diagnose(facts: Union[MachineFacts, Mapping[str, Any]]) -> Diagnosis:
    """The `Diagnosis` of a machine's facts (`MachineFacts`, or their JSON: checked first, `FactsError` when
    they are not facts)."""
    if not isinstance(facts, MachineFacts):
        facts = MachineFacts.from_json(dict(facts), "facts")
    rules = _Rules(facts)
    rules.platform()
    rules.driver()
    rules.tensorflow_build()
    rules.driver_version()
    rules.libraries()
    visible = rules.visible()
    listed, failing = rules.capabilities(visible) if rules.cuda_build else (0, 0)
    predicted = 0 if rules.blocked else listed
    listed = rules.view(predicted)
    usable = 0 if rules.broken else max(0, min(listed, listed - failing))
    if rules.reported == 0 and not facts.pci_gpus:  # no GPU to lose: what would stop one is worth knowing only
        rules.findings = [dataclasses.replace(f, severity="warning") if f.severity == "error" else f
                          for f in rules.findings]
    if usable < rules.reported and not any(f.severity == "error" for f in rules.findings):
        rules.add("tensorflow-view-differs", "error", f"TensorFlow will use {usable} of the {rules.reported} GPU(s) "
                  "and the facts name no cause", None)
    return Diagnosis(rules.reported, usable, tuple(rules.findings), facts, rules.needs, rules.support)
