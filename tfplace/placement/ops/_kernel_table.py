"""Which dtypes an op has a kernel for on a device type: from TensorFlow's kernel registry, or
from tfplace's table of the GPU kernels of TensorFlow's CUDA build.

`tensorflow-cpu` registers no GPU kernels; the CUDA build (`pip install tensorflow`)
registers them even on a machine without a GPU. `gpu_table()` reads this process's
registry when it has GPU kernels, else the table shipped for the running TensorFlow's minor release,
`tfplace/data/gpu_kernels-<major.minor>.json.gz` (2.16 to 2.21, each made by `scripts/gpu_kernel_table.py`
from the CUDA build of the TensorFlow version it names).
A `DEFAULT`-device kernel serves every device type.

Example:
    >>> from tfplace.placement.ops import _kernel_table
    >>> table = _kernel_table.gpu_table()
    >>> table.supports("MatMul", "GPU", (("T", "float32"),)), table.supports("MatMul", "GPU", (("T", "int32"),))
    (True, False)
    >>> "int32" in dict(table.supported_dtypes("MatMul", "GPU"))["T"]
    False
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import warnings
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

from tfplace.placement.session import _session
from tfplace.placement.session._sources import user_stacklevel

__all__ = ["Kernel", "KernelTable", "live", "shipped", "gpu_table", "table_path", "TABLE_FORMAT"]

_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "data")
TABLE_FORMAT = "tfplace-gpu-kernels/1"
_REGENERATE = "python scripts/gpu_kernel_table.py --tensorflow-version {version}"


class Kernel(NamedTuple):
    """One registered kernel.

    Attributes:
      device: its device type, e.g. "GPU", "CPU" or "DEFAULT" (any device type).
      constraints: (type attribute, allowed dtype names) pairs, e.g. `(("T", ("float32", "half")),)`;
        an attribute not named is unconstrained.
      host_memory: the arguments it keeps in host memory.
      label: its kernel label ("" for the kernel TensorFlow picks by default).
    """

    device: str
    constraints: tuple[tuple[str, tuple[str, ...]], ...] = ()
    host_memory: tuple[str, ...] = ()
    label: str = ""

    def accepts(self, dtypes: Mapping[str, str]) -> bool:
        """True if every constrained attribute that `dtypes` names has an allowed dtype."""
        return all(dtypes[name] in allowed for name, allowed in self.constraints if name in dtypes)


class KernelTable:
    """The kernels of each op type, as a registry (live or shipped) says.

    Attributes:
      version: the TensorFlow version the kernels come from.
      source: where they come from, for messages.
      mismatch: "" when `version` is the running TensorFlow's, else a sentence saying it is not.
    """

    def __init__(self, lookup: Callable[[str], Sequence[Kernel]], *, version: str, source: str,
                 mismatch: str = "") -> None:
        self._lookup = functools.lru_cache(maxsize=4096)(lookup)
        self.version = version
        self.source = source
        self.mismatch = mismatch

    def kernels(self, op: str, device_type: str) -> tuple[Kernel, ...]:
        """The unlabelled kernels of `op` that serve `device_type` (its own and DEFAULT ones)."""
        return tuple(k for k in self._lookup(op) if k.device in (device_type, "DEFAULT") and not k.label)

    def supports(self, op: str, device_type: str, dtypes: Sequence[tuple[str, str]]) -> bool:
        """True if a kernel of `op` on `device_type` accepts these type attributes."""
        values = dict(dtypes)
        return any(k.accepts(values) for k in self.kernels(op, device_type))

    def supported_dtypes(self, op: str, device_type: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Per type attribute, the dtypes some kernel of `op` on `device_type` allows, e.g.
        `(("T", ("bfloat16", "float32", ...)),)`; attributes a kernel leaves free are left out;
        `()` when there is no kernel at all."""
        kernels = self.kernels(op, device_type)
        names = {name for k in kernels for name, _ in k.constraints}
        found = []
        for name in sorted(names):
            allowed = [dict(k.constraints).get(name) for k in kernels]
            if all(a is not None for a in allowed):
                found.append((name, tuple(sorted({d for a in allowed for d in a}))))  # type: ignore[union-attr]
        return tuple(found)

    def __repr__(self) -> str:
        return f"<KernelTable from {self.source}>"


def _live_kernels(op: str) -> tuple[Kernel, ...]:
    import tensorflow as tf

    from tfplace import _tensorflow

    return tuple(
        Kernel(k.device_type,
               tuple((c.name, tuple(sorted(tf.dtypes.as_dtype(t).name for t in c.allowed_values.list.type)))
                     for c in k.constraint if c.allowed_values.list.type),
               tuple(k.host_memory_arg), k.label)
        for k in _tensorflow.registered_kernels(op))


def _running_version() -> str:
    import tensorflow as tf

    return str(tf.__version__)


@functools.lru_cache(maxsize=1)
def live() -> KernelTable:
    """This process's kernel registry."""
    version = _running_version()
    return KernelTable(_live_kernels, version=version, source=f"TensorFlow {version}'s kernel registry (this process)")


def _dtype_constraints(constraints: Mapping[str, Sequence[Any]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The constraints on type attributes (others, such as GatherNd's `bad_indices_policy`, left out)."""
    return tuple((name, tuple(allowed)) for name, allowed in sorted(constraints.items())
                 if allowed and all(isinstance(value, str) and _is_dtype_name(value) for value in allowed))


@functools.lru_cache(maxsize=256)
def _is_dtype_name(value: str) -> bool:
    import tensorflow as tf

    try:
        return tf.dtypes.as_dtype(value).name == value
    except TypeError:
        return False


def _kernels_from_json(kernels: Sequence[Mapping[str, Any]]) -> tuple[Kernel, ...]:
    return tuple(Kernel(k["device"], _dtype_constraints(k["constraints"]), tuple(k["host_memory"]), k["label"])
                 for k in kernels)


def _release(version: str) -> tuple[int, ...]:
    """The (major, minor) release of a version string ("2.21.0" -> (2, 21))."""
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit())


def table_path(version: Optional[str] = None) -> str:
    """The shipped table of TensorFlow `version`'s minor release (the running TensorFlow's by default), or,
    for a release tfplace ships none for, the newest shipped.

    >>> os.path.basename(table_path("2.16.2")), os.path.basename(table_path("2.21.0"))
    ('gpu_kernels-2.16.json.gz', 'gpu_kernels-2.21.json.gz')
    """
    release = _release(version or _running_version())
    tables = {_release(name[len("gpu_kernels-"):-len(".json.gz")]): os.path.join(_DATA, name)
              for name in os.listdir(_DATA) if name.startswith("gpu_kernels-") and name.endswith(".json.gz")}
    return tables.get(release) or tables[max(tables)]


@functools.lru_cache(maxsize=4)
def shipped(path: Optional[str] = None) -> KernelTable:
    """The table of the CUDA build's GPU (and DEFAULT) kernels at `path`.

    Raises:
      ValueError: the file is not such a table (naming the file and the format expected).
    """
    path = path or table_path()
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as error:
        raise ValueError(f"tfplace's GPU kernel table {path} could not be read ({error}): expected gzip-compressed "
                         f"JSON of format {TABLE_FORMAT!r}; regenerate it with "
                         + _REGENERATE.format(version=_running_version())) from None
    if not isinstance(data, dict) or data.get("format") != TABLE_FORMAT or not isinstance(data.get("kernels"), dict):
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"tfplace's GPU kernel table {path} has format {found!r}: expected {TABLE_FORMAT!r}")
    kernels = data["kernels"]  # converted per op type when asked (the table's lookups are cached)
    version = str(data.get("tensorflow_version", "unknown"))
    running = _running_version()
    mismatch = "" if _release(version) == _release(running) else (
        f"tfplace's GPU kernel table was made from TensorFlow {version}'s CUDA build, but this is TensorFlow "
        f"{running}: GPU kernels may differ; make this release's table with {_REGENERATE.format(version=running)}")
    return KernelTable(lambda op: _kernels_from_json(kernels.get(op, ())), version=version, mismatch=mismatch,
                       source=f"tfplace's table of TensorFlow {version}'s CUDA build")


def gpu_table(path: Optional[str] = None) -> KernelTable:
    """The GPU kernels TensorFlow's CUDA build has: this process's registry when it has GPU
    kernels, else the shipped table of its minor release (warning once when none is shipped for it)."""
    if path is None and live().supports("MatMul", "GPU", ()):  # a CUDA (or ROCm) build
        return live()
    table = shipped(path)
    warned = _session.runtime().warned
    if table.mismatch and table.mismatch not in warned:
        warned.add(table.mismatch)
        warnings.warn(f"tfplace: {table.mismatch}", RuntimeWarning, stacklevel=user_stacklevel())
    return table


