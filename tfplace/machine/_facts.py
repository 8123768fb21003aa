"""A machine's GPU facts (`tfplace-machine/1`): what the driver reports, which TensorFlow is installed and
how it was built, which CUDA libraries that build loads and where the loader finds them, and the
environment variables that change it. Read here without importing TensorFlow and without a CUDA
context (libraries are loaded in a child process); saved and loaded as JSON so that a machine's facts can
be explained elsewhere (`tfplace doctor --save` there, `--facts` here).

Example:
    >>> from tfplace.machine import _facts
    >>> facts = _facts.read(libraries=False)
    >>> _facts.check(facts, "here")["format"]
    'tfplace-machine/1'
"""

from __future__ import annotations

import ast
import glob
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
from typing import Any, Optional, Union

from tfplace._errors import Error
from tfplace.machine import _gpus, _libraries, _elf

__all__ = ["FORMAT", "FactsError", "read", "check", "load", "save", "build_info", "container", "ENVIRONMENT",
           "TENSORFLOW_DISTRIBUTIONS"]

FORMAT = "tfplace-machine/1"
ENVIRONMENT = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "LD_PRELOAD",
               "CUDA_HOME", "CUDA_PATH", "CUDA_CACHE_MAXSIZE", "CUDA_CACHE_DISABLE", "TF_CPP_MIN_LOG_LEVEL",
               "TF_CPP_MAX_VLOG_LEVEL", "TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR", "TF_ENABLE_ONEDNN_OPTS",
               "TF_XLA_FLAGS", "XLA_FLAGS")
# the distributions that install the `tensorflow` package itself (add-ons such as tensorflow-io do not)
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos",
                            "tensorflow-aarch64", "tensorflow-cpu-aws", "tensorflow-rocm", "intel-tensorflow",
                            "tf-nightly", "tf-nightly-cpu", "tf-nightly-gpu")
_KEYS: dict[str, Any] = {"format": str, "platform": dict, "python": str, "driver": (dict, type(None)), "gpus": list,
         "tensorflow": (dict, type(None)), "libraries": dict, "environment": dict}
# the .so files whose run path TensorFlow's loader searches (it dlopens CUDA from libtensorflow_framework)
_TENSORFLOW_OBJECTS = ("libtensorflow_framework.so.2", "libtensorflow_cc.so.2", "python/_pywrap_tensorflow_internal.so")


class FactsError(Error, ValueError):
    """A facts file that cannot be read, is not JSON, has another format or lacks a key."""


def _platform() -> dict[str, Any]:
    release = platform.release()
    return {"system": platform.system(), "release": release, "machine": platform.machine(),
            "wsl": "microsoft" in release.lower() or os.path.exists("/usr/lib/wsl/lib"),
            "container": container(), "dev_nvidia": sorted(glob.glob("/dev/nvidia*"))}


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


def _nvidia_wheels() -> dict[str, dict[str, Any]]:
    """pip's nvidia-* distributions: version and the folder of their shared libraries."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = _normalized(dist.name or "")
        if not name.startswith("nvidia-") or name in found:
            continue
        lib = next((os.path.dirname(str(dist.locate_file(f))) for f in dist.files or ()
                    if ".so" in str(f).rsplit("/", 1)[-1]), None)
        found[name] = {"version": dist.version, "lib": lib}
    return dict(sorted(found.items()))


def tensorflow() -> Optional[dict[str, Any]]:
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
    if spec is None or not spec.submodule_search_locations:
        return {"distributions": distributions, "build": {}, "requires": requires, "path": None} if distributions else None
    package_dir = list(spec.submodule_search_locations)[0]
    return {"distributions": distributions, "build": _build_info(package_dir), "requires": requires,
            "path": package_dir}


def _search(tensorflow_dir: Optional[str], environ: dict[str, Optional[str]]) -> list[str]:
    """Where TensorFlow's loader looks before the loader's cache: LD_LIBRARY_PATH, then the run path of its .so files."""
    search = [d for d in (environ.get("LD_LIBRARY_PATH") or "").split(":") if d]
    if tensorflow_dir:
        search += _elf.run_path([os.path.join(tensorflow_dir, name) for name in _TENSORFLOW_OBJECTS])
    return list(dict.fromkeys(search))


def _packages(libraries: dict[str, dict[str, Any]]) -> None:
    """Adds `"package"` (the pip distribution and version) to each library that one of pip's nvidia wheels installed."""
    paths = {os.path.realpath(entry["path"]): entry for entry in libraries.values() if entry.get("path")}
    if not any("/nvidia/" in path for path in paths):
        return
    for dist in importlib.metadata.distributions():
        name = dist.name or ""
        if not _normalized(name).startswith("nvidia-"):
            continue
        for file in dist.files or ():
            if str(file).endswith((".so",)) or ".so." in str(file):
                entry = paths.get(os.path.realpath(str(dist.locate_file(file))))
                if entry is not None:
                    entry["package"] = f"{_normalized(name)} {dist.version}"


def read(*, libraries: bool = True, environ: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """This machine's facts, without TensorFlow's own view (`_view` adds it). `libraries=False` skips loading
    the CUDA libraries (the part that runs a child process)."""
    environ = dict(os.environ if environ is None else environ)
    variables: dict[str, Optional[str]] = {name: environ.get(name) for name in ENVIRONMENT}
    installed = tensorflow()
    problems: list[str] = []
    gpus = _gpus.driver_gpus(problems)
    search = _search(installed["path"] if installed else None, variables)
    folders = [os.path.basename(os.path.dirname(d)) for d in search if os.sep + "nvidia" + os.sep in d]
    wanted = ((_libraries.wanted(installed["requires"], folders) or _libraries.from_build(installed["build"]))
              if installed and installed["build"].get("is_cuda_build") else [])
    sonames = (["libcuda.so.1"] if platform.system() == "Linux" else []) + [w.soname for w in wanted]
    found = _libraries.probe(sonames, search) if libraries and sonames else {}
    _packages(found)
    version = _gpus.driver_version()
    cuda = _gpus.driver_cuda() if version else None
    if cuda is None and (found.get("libcuda.so.1") or {}).get("version"):
        cuda = found["libcuda.so.1"]["version"]
    driver = {"version": version, "cuda": cuda} if version or cuda else None
    return {
        "format": FORMAT,
        "platform": _platform(),
        "python": platform.python_version(),
        "driver": driver,
        "gpus": [{"index": g.index, "name": g.name, "memory_mib": g.total_mib, "uuid": g.uuid,
                  "compute_capability": g.compute_capability} for g in gpus],
        "pci_gpus": _gpus.pci_gpus(),
        "probe_errors": problems,
        "tensorflow": installed,
        "libraries": found,
        "nvidia_wheels": _nvidia_wheels(),
        "environment": variables,
        "tensorflow_view": None,
    }


def check(facts: Any, where: str) -> dict[str, Any]:
    """`facts` if it is in the facts format, else a `FactsError` naming `where` and what is wrong."""
    if not isinstance(facts, dict):
        raise FactsError(f"{where}: expected a JSON object in the {FORMAT} format, got {type(facts).__name__}")
    if facts.get("format") != FORMAT:
        raise FactsError(f"{where}: format {facts.get('format')!r} is not {FORMAT!r} "
                         "(write one with tfplace doctor --save=FILE)")
    for key, kind in _KEYS.items():
        if key not in facts:
            raise FactsError(f"{where}: the key {key!r} is missing ({FORMAT} needs {', '.join(_KEYS)})")
        if not isinstance(facts[key], kind):
            raise FactsError(f"{where}: {key!r} is a {type(facts[key]).__name__}, not what {FORMAT} holds there")
    for gpu in facts["gpus"]:
        if not isinstance(gpu, dict) or "index" not in gpu or "name" not in gpu:
            raise FactsError(f"{where}: a GPU entry {gpu!r} lacks 'index' or 'name'")
    if facts["tensorflow"] is not None and not {"distributions", "build", "requires"} <= set(facts["tensorflow"]):
        raise FactsError(f"{where}: 'tensorflow' needs 'distributions', 'build' and 'requires'")
    for soname, entry in facts["libraries"].items():
        if not isinstance(entry, dict) or not {"path", "error", "version"} <= set(entry):
            raise FactsError(f"{where}: the library {soname!r} needs 'path', 'error' and 'version'")
    facts.setdefault("tensorflow_view", None)
    facts.setdefault("nvidia_wheels", {})
    return facts


def load(source: Union[str, os.PathLike, dict]) -> dict[str, Any]:
    """Facts from a file path or a dict, checked (`FactsError` when they are not facts)."""
    if isinstance(source, dict):
        return check(source, "facts")
    where = os.fspath(source)
    try:
        with open(where, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as err:
        raise FactsError(f"{where}: cannot be read ({err.__class__.__name__}: {err})") from None
    try:
        facts = json.loads(text)
    except ValueError as err:
        raise FactsError(f"{where}: not JSON ({err})") from None
    return check(facts, where)


def save(facts: dict[str, Any], path: Union[str, os.PathLike]) -> None:
    """Writes `facts` as JSON to `path`."""
    with open(path, "w", encoding="utf-8") as file:
        json.dump(facts, file, indent=2)
        file.write("\n")
