"""Facts (`tfplace-machine/1`) of real machines, made from what they reported (`tests/fixtures/gpu/`, copied
from the project's shared fixtures) through tfplace's own parsers, and of the same machines as they would
be with another TensorFlow installed."""

from __future__ import annotations

import ast
import copy
import json
import re
from pathlib import Path

from tfplace.machine import _gpus, _libraries, _view

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gpu"
H200 = json.loads((FIXTURES / "h200_cuda13_no_cuda12.json").read_text())
H200_VERSIONS = json.loads((FIXTURES / "h200_cuda13_library_versions.json").read_text())
CPU_LOG = (FIXTURES / "cpu_machine_tensorflow_2.21_cuda_wheel.log").read_text()

# TensorFlow 2.21.0's CUDA wheel, as the wheel declares it (fixtures README): its build info (the log's BUILD
# line), its and-cuda requirements, and the pip folders in the run path of its .so files (readelf -d)
BUILD_2_21 = ast.literal_eval(next(line[len("BUILD "):] for line in CPU_LOG.splitlines() if line.startswith("BUILD ")))
REQUIRES_2_21 = [f'{r}; extra == "and-cuda"' for r in (
    "nvidia-cublas-cu12<13.0,>=12.5.3.2", "nvidia-cuda-cupti-cu12<13.0,>=12.5.82",
    "nvidia-cuda-nvcc-cu12<13.0,>=12.5.82", "nvidia-cuda-nvrtc-cu12<13.0,>=12.5.82",
    "nvidia-cuda-runtime-cu12<13.0,>=12.5.82", "nvidia-cudnn-cu12<10.0,>=9.3.0.75",
    "nvidia-cufft-cu12<12.0,>=11.2.3.61", "nvidia-curand-cu12<11.0,>=10.3.6.82",
    "nvidia-cusolver-cu12<12.0,>=11.6.3.83", "nvidia-cusparse-cu12<13.0,>=12.5.1.3", "nvidia-nccl-cu12<3.0,>=2.27.7",
    "nvidia-nvjitlink-cu12<13.0,>=12.5.82")]
FOLDERS_2_21 = ("nccl", "cuda_cupti", "cublas", "cudnn", "cufft", "cusparse", "cuda_runtime", "nvshmem", "cusolver")
SITE = "/opt/venv/lib/python3.12/site-packages"


def tensorflow(name: str = "tensorflow", version: str = "2.21.0", *, cuda: bool = True) -> dict:
    build = dict(BUILD_2_21) if cuda else {"is_cuda_build": False, "is_rocm_build": False, "is_tensorrt_build": False}
    return {"distributions": {name: version}, "build": build, "requires": list(REQUIRES_2_21),
            "path": f"{SITE}/tensorflow"}


def _h200_library(soname: str) -> dict:
    """What loading `soname` on the H200 machine gave: the file, its version and its CUDA."""
    loaded = H200["dlopen_by_soname"][soname]
    if not loaded["ok"]:
        return {"path": None, "error": loaded["error"], "version": None, "cuda": None}
    calls = H200_VERSIONS.get(loaded["path"], {})
    version, cuda = _libraries.describe(soname, calls)
    return {"path": loaded["path"], "error": None, "version": version,
            "cuda": cuda or _libraries.cuda_of(soname, loaded["path"], version)}


def h200(tf: dict | None = None, **environment) -> dict:
    """The H200 machine's facts: as it is (no TensorFlow), or with `tf` installed and nothing else changed
    (the loader finds what it found there)."""
    gpus = _gpus.parse_nvidia_smi(H200["nvidia_smi_query_index_name_memory_uuid_used"])
    capability = dict(re.findall(r"^(\d+), [^,]+, ([\d.]+),", H200["nvidia_smi_query_caps_csv"], re.M))
    release = re.match(r"Linux-(.+?)-x86_64", H200["platform"]).group(1)
    wanted = _libraries.wanted(tf["requires"], FOLDERS_2_21) if tf and tf["build"].get("is_cuda_build") else []
    variables = {name: H200["environment"].get(name) for name in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH",
                                                                  "NVIDIA_VISIBLE_DEVICES", "CUDA_HOME")}
    variables.update(environment)
    return {
        "format": "tfplace-machine/1",
        "platform": {"system": "Linux", "release": release, "machine": "x86_64", "wsl": False},
        "python": H200["python"].split()[0],
        "driver": {"version": _gpus.parse_proc_version(H200["proc_driver_nvidia_version"]),
                   "cuda": _gpus.parse_driver_cuda(H200["nvidia_smi"])},
        "gpus": [{"index": g.index, "name": g.name, "memory_mib": g.total_mib, "uuid": g.uuid,
                  "compute_capability": capability[str(g.index)]} for g in gpus],
        "tensorflow": copy.deepcopy(tf),
        "libraries": {soname: _h200_library(soname) for soname in ["libcuda.so.1", *(w.soname for w in wanted)]},
        "environment": variables,
        "tensorflow_view": None,
    }


def with_and_cuda(facts: dict) -> dict:
    """`facts` after `pip install 'tensorflow[and-cuda]'`: each library TensorFlow loads from its pip wheel,
    at the version the requirement asks for (built for CUDA 12)."""
    facts = copy.deepcopy(facts)
    for want in _libraries.wanted(facts["tensorflow"]["requires"], FOLDERS_2_21):
        folder = want.package[len("nvidia-"):-len("-cu12")].replace("-", "_")
        version = ".".join(want.minimum.split(".")[:3])
        facts["libraries"][want.soname] = {
            "path": f"{SITE}/nvidia/{folder}/lib/{want.soname}", "error": None, "version": version,
            "cuda": "12.5" if want.base == "libcudnn" else None, "package": f"{want.package} {want.minimum}"}
    return facts


def cpu_machine() -> dict:
    """The machine without a driver that wrote the CPU log, with TensorFlow 2.21's CUDA wheel and its view."""
    return {
        "format": "tfplace-machine/1",
        "platform": {"system": "Linux", "release": "6.8.0", "machine": "x86_64", "wsl": False},
        "python": "3.11.7", "driver": None, "gpus": [], "tensorflow": tensorflow(),
        "libraries": {"libcuda.so.1": {
            "path": None, "version": None, "cuda": None,
            "error": "libcuda.so.1: cannot open shared object file: No such file or directory"}},
        "environment": {"CUDA_VISIBLE_DEVICES": None},
        "tensorflow_view": {"gpus": [],
                            "log": list(dict.fromkeys(filter(None, map(_view.diagnostic, CPU_LOG.splitlines()))))},
    }


RELEASES = Path(__file__).resolve().parent / "fixtures" / "releases"


def release(name: str) -> dict:
    """The `"tensorflow"` facts of a release's wheel (`tests/fixtures/releases/<name>/`), as `_facts.tensorflow()`
    reads them from an install: its build info and its `and-cuda` requirement lines."""
    from tfplace.machine._facts import build_info

    folder = RELEASES / name
    distribution, _, version = name.rpartition("-")
    requires = [line for line in (folder / "requires.txt").read_text().splitlines()
                if re.search(r"extra\s*==\s*['\"]and-cuda['\"]", line)]
    return {"distributions": {distribution: version}, "build": build_info((folder / "build_info.py").read_text()),
            "requires": requires, "path": f"{SITE}/tensorflow"}


def machine(tf: dict | None, *, gpus: tuple = (("NVIDIA GeForce RTX 3090", "8.6"),),
            driver: tuple | None = ("535.183.01", "12.2"),
            python: str = "3.10.12", system: str = "Linux", arch: str = "x86_64", loaded: dict | None = None,
            wheels: dict | None = None, container: str | None = None, dev_nvidia: tuple = (), **environment) -> dict:
    """Facts of a machine as a user describes it: its GPUs (name, compute capability), driver (version, CUDA),
    Python, platform, the TensorFlow installed (`release()`), what its libraries load as (`loaded`: soname ->
    (path, version) or None for one that does not load; every library the build wants loads from the system
    at the version it asks for unless named), pip's nvidia wheels, a container."""
    from tfplace.machine._libraries import from_build, wanted

    wants = (wanted(tf["requires"]) or from_build(tf["build"])) if tf and tf["build"].get("is_cuda_build") else []
    libraries = {"libcuda.so.1": {"path": "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "error": None,
                                  "version": driver[1], "cuda": driver[1]} if driver else
                 {"path": None, "error": "libcuda.so.1: cannot open shared object file: No such file or directory",
                  "version": None, "cuda": None}}
    for want in wants:
        found = (loaded or {}).get(want.soname, ("/usr/lib/x86_64-linux-gnu/" + want.soname,
                                                  ".".join((want.minimum or "").split(".")[:3]) or None))
        libraries[want.soname] = (
            {"path": None, "version": None, "cuda": None,
             "error": f"{want.soname}: cannot open shared object file: No such file or directory"}
            if found is None else {"path": found[0], "error": None, "version": found[1], "cuda": None})
    return {
        "format": "tfplace-machine/1",
        "platform": {"system": system, "release": "5.15.0", "machine": arch, "wsl": False, "container": container,
                     "dev_nvidia": list(dev_nvidia)},
        "python": python,
        "driver": {"version": driver[0], "cuda": driver[1]} if driver else None,
        "gpus": [{"index": i, "name": name, "memory_mib": 24576, "uuid": f"GPU-{i}", "compute_capability": cc}
                 for i, (name, cc) in enumerate(gpus)] if driver else [],
        "tensorflow": copy.deepcopy(tf),
        "libraries": libraries if system == "Linux" else {},
        "nvidia_wheels": wheels or {},
        "environment": {"CUDA_VISIBLE_DEVICES": None, "LD_LIBRARY_PATH": None, **environment},
        "tensorflow_view": None,
    }
