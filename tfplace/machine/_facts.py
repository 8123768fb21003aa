"""A machine's GPU facts (`tfplace-machine/1`, declared in `_records`): what the driver reports, which
TensorFlow is installed and how it was built, which CUDA libraries that build loads and where the loader
finds them, and the environment variables that change it. One getter per fact, read here without importing
TensorFlow and without a CUDA context (libraries are loaded in a child process); saved and loaded as JSON so
that a machine's facts can be explained elsewhere (`tfplace doctor --save` there, `--facts` here).

Example:
    >>> from tfplace.machine import _facts
    >>> facts = _facts.read(libraries=False)
    >>> _facts.check(facts.to_json(), "here") == facts
    True
"""

from __future__ import annotations

import ast
import dataclasses
import glob
import importlib.metadata
import importlib.util
import os
import platform as _platform
import re
import types
from typing import Any, Mapping, Optional, Union

from tfplace.machine import _elf, _gpus, _libraries
from tfplace.machine._records import (FORMAT, BuildInfo, Driver, FactsError, Gpu, Library, MachineFacts, Platform,
                                      TensorFlow, Wheel)

__all__ = ["FORMAT", "FactsError", "MachineFacts", "read", "check", "load", "save", "build_info", "container",
           "tensorflow", "ENVIRONMENT", "TENSORFLOW_DISTRIBUTIONS"]

ENVIRONMENT = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "LD_PRELOAD",
               "CUDA_HOME", "CUDA_PATH", "CUDA_CACHE_MAXSIZE", "CUDA_CACHE_DISABLE", "TF_CPP_MIN_LOG_LEVEL",
               "TF_CPP_MAX_VLOG_LEVEL", "TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR", "TF_ENABLE_ONEDNN_OPTS",
               "TF_XLA_FLAGS", "XLA_FLAGS")
# the distributions that install the `tensorflow` package itself (add-ons such as tensorflow-io do not)
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos",
                            "tensorflow-aarch64", "tensorflow-cpu-aws", "tensorflow-rocm", "intel-tensorflow",
                            "tf-nightly", "tf-nightly-cpu", "tf-nightly-gpu")
# the .so files whose run path TensorFlow's loader searches (it dlopens CUDA from libtensorflow_framework)
_TENSORFLOW_OBJECTS = ("libtensorflow_framework.so.2", "libtensorflow_cc.so.2", "python/_pywrap_tensorflow_internal.so")


def platform() -> Platform:
    """This machine's operating system, whether it is WSL2, its container and its `/dev/nvidia*` files."""
    release = _platform.release()
    return Platform(_platform.system(), release, _platform.machine(),
                    "microsoft" in release.lower() or os.path.exists("/usr/lib/wsl/lib"), container(),
                    tuple(sorted(glob.glob("/dev/nvidia*"))))


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def build_info(text: str) -> dict[str, Any]:
    """TensorFlow's build info from the text of its `python/platform/build_info.py`: the `build_info` dict of
    2.x, or 1.x's module variables (`is_cuda_build`, `cuda_version_number = '10'`, `cudnn_version_number`)
    under 2.x's keys (1.x's CUDA 10 is 10.0)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return {}
    found: dict[str, Any] = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            continue
        value = node.value
        if isinstance(value, ast.Call) and value.args:  # collections.OrderedDict([...])
            value = value.args[0]
        try:
            literal = ast.literal_eval(value)
        except ValueError:
            continue
        if node.targets[0].id == "build_info":
            return dict(literal)
        found[node.targets[0].id] = literal
    old = {"is_cuda_build": found.get("is_cuda_build"), "is_rocm_build": found.get("is_rocm_build")}
    if found.get("cuda_version_number"):
        number = str(found["cuda_version_number"])
        old["cuda_version"] = number if "." in number else f"{number}.0"
    if found.get("cudnn_version_number"):
        old["cudnn_version"] = str(found["cudnn_version_number"])
    return {key: value for key, value in old.items() if value is not None}


def _build_info(package_dir: str) -> dict[str, Any]:
    """TensorFlow's build info, read from its file without importing it (1.15 keeps it in `tensorflow_core`)."""
    for root in (package_dir, os.path.join(os.path.dirname(package_dir), "tensorflow_core")):
        try:
            with open(os.path.join(root, "python", "platform", "build_info.py"), encoding="utf-8") as file:
                return build_info(file.read())
        except (OSError, UnicodeDecodeError):
            continue
    return {}


def container() -> Optional[str]:
    """The container this process runs in ("docker", "podman", "kubernetes", "containerd", "lxc"), None on a
    machine of its own, as the files and variables container runtimes leave say."""
    if os.path.exists("/.dockerenv"):
        return "docker"
    if os.path.exists("/run/.containerenv"):
        return "podman"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    try:
        with open("/proc/1/cgroup", encoding="utf-8") as file:
            cgroup = file.read()
    except OSError:
        cgroup = ""
    for word, name in (("kubepods", "kubernetes"), ("docker", "docker"), ("containerd", "containerd"),
                       ("lxc", "lxc"), ("libpod", "podman")):
        if word in cgroup:
            return name
    return os.environ.get("container") or None  # systemd's convention (podman, systemd-nspawn)


def nvidia_wheels() -> Mapping[str, Wheel]:
    """pip's nvidia-* distributions: version and the folder of their shared libraries."""
    found: dict[str, Wheel] = {}
    for dist in importlib.metadata.distributions():
        name = _normalized(dist.name or "")
        if not name.startswith("nvidia-") or name in found:
            continue
        lib = next((os.path.dirname(str(dist.locate_file(f))) for f in dist.files or ()
                    if ".so" in str(f).rsplit("/", 1)[-1]), None)
        found[name] = Wheel(dist.version, lib)
    return types.MappingProxyType(dict(sorted(found.items())))


def tensorflow() -> Optional[TensorFlow]:
    """The installed TensorFlow: its distributions, build info and `and-cuda` requirements; None without one."""
    distributions: dict[str, str] = {}
    requires: list[str] = []
    for dist in importlib.metadata.distributions():
        name = _normalized(dist.name or "")
        if name in TENSORFLOW_DISTRIBUTIONS and name not in distributions:
            distributions[name] = dist.version
            extra = [r for r in dist.requires or () if re.search(r"extra\s*==\s*['\"]and-cuda['\"]", r)]
            if extra and (not requires or name == "tensorflow"):
                requires = extra
    try:
        spec = importlib.util.find_spec("tensorflow")
    except (ImportError, ValueError):
        spec = None
    package_dir = list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else None
    if package_dir is None and not distributions:
        return None
    return TensorFlow(types.MappingProxyType(distributions),
                      BuildInfo(types.MappingProxyType(_build_info(package_dir) if package_dir else {})),
                      tuple(requires), package_dir)


def environment(environ: Mapping[str, str]) -> Mapping[str, Optional[str]]:
    """The variables of `ENVIRONMENT` in `environ` (None where unset)."""
    return types.MappingProxyType({name: environ.get(name) for name in ENVIRONMENT})


def _search(tensorflow_dir: Optional[str], environ: Mapping[str, Optional[str]]) -> list[str]:
    """Where TensorFlow's loader looks before the loader's cache: LD_LIBRARY_PATH, then the run path of its .so
    files."""
    search = [d for d in (environ.get("LD_LIBRARY_PATH") or "").split(":") if d]
    if tensorflow_dir:
        search += _elf.run_path([os.path.join(tensorflow_dir, name) for name in _TENSORFLOW_OBJECTS])
    return list(dict.fromkeys(search))


def _packages(libraries: Mapping[str, Library]) -> dict[str, Library]:
    """`libraries`, each that one of pip's nvidia wheels installed with its `package` (distribution and version)."""
    paths = {os.path.realpath(entry.path): soname for soname, entry in libraries.items() if entry.path}
    found = dict(libraries)
    if not any("/nvidia/" in path for path in paths):
        return found
    for dist in importlib.metadata.distributions():
        name = dist.name or ""
        if not _normalized(name).startswith("nvidia-"):
            continue
        for file in dist.files or ():
            if str(file).endswith((".so",)) or ".so." in str(file):
                soname = paths.get(os.path.realpath(str(dist.locate_file(file))))
                if soname is not None:
                    found[soname] = dataclasses.replace(found[soname], package=f"{_normalized(name)} {dist.version}")
    return found


def cuda_libraries(installed: Optional[TensorFlow], variables: Mapping[str, Optional[str]]) -> dict[str, Library]:
    """Each library the installed build loads (and `libcuda.so.1`), loaded in a child process as TensorFlow's
    loader would load it."""
    search = _search(installed.path if installed else None, variables)
    folders = [os.path.basename(os.path.dirname(d)) for d in search if os.sep + "nvidia" + os.sep in d]
    wanted = ((_libraries.wanted(installed.requires, folders) or _libraries.from_build(installed.build))
              if installed and installed.build.is_cuda_build else [])
    sonames = (["libcuda.so.1"] if _platform.system() == "Linux" else []) + [w.soname for w in wanted]
    probed = _libraries.probe(sonames, search) if sonames else {}
    return _packages({soname: Library.from_json(entry, "the loading child") for soname, entry in probed.items()})


def driver(found: Mapping[str, Library]) -> Optional[Driver]:
    """The driver's version and the newest CUDA it runs (from NVML, nvidia-smi, else `libcuda.so.1` in `found`)."""
    version = _gpus.driver_version()
    cuda = _gpus.driver_cuda() if version else None
    libcuda = found.get("libcuda.so.1")
    if cuda is None and libcuda is not None and libcuda.version:
        cuda = libcuda.version
    return Driver(version, cuda) if version or cuda else None


def gpus(problems: list[str]) -> tuple[Gpu, ...]:
    """Every GPU the driver reports, in its order; what failed on the way is added to `problems`."""
    return tuple(Gpu(g.index, g.name, g.total_mib, g.uuid, g.compute_capability)
                 for g in _gpus.driver_gpus(problems))


def read(*, libraries: bool = True, environ: Optional[Mapping[str, str]] = None) -> MachineFacts:
    """This machine's facts, without TensorFlow's own view (`_view` reads it). `libraries=False` skips loading
    the CUDA libraries (the part that runs a child process)."""
    variables = environment(os.environ if environ is None else environ)
    installed = tensorflow()
    problems: list[str] = []
    found = cuda_libraries(installed, variables) if libraries else {}
    return MachineFacts(platform=platform(), python=_platform.python_version(), driver=driver(found),
                        gpus=gpus(problems), pci_gpus=tuple(_gpus.pci_gpus()), probe_errors=tuple(problems),
                        tensorflow=installed, libraries=types.MappingProxyType(found), nvidia_wheels=nvidia_wheels(),
                        environment=variables, tensorflow_view=None)


def check(facts: object, where: str) -> MachineFacts:
    """`facts` (JSON) as `MachineFacts`, else a `FactsError` naming `where`, the key, what it holds and what the
    format allows there. `facts` itself is left as it is."""
    return MachineFacts.from_json(facts, where)


def load(source: Union[str, os.PathLike[str], Mapping[str, Any], MachineFacts]) -> MachineFacts:
    """Facts from a file path or a dict, checked (`FactsError` when they are not facts)."""
    if isinstance(source, MachineFacts):
        return source
    if isinstance(source, Mapping):
        return check(dict(source), "facts")
    return MachineFacts.load(source)


def save(facts: Union[MachineFacts, Mapping[str, Any]], path: Union[str, os.PathLike[str]]) -> None:
    """Writes `facts` as JSON to `path`, whole or not at all (`MachineFacts.save`); a dict is checked first."""
    load(facts).save(path)
