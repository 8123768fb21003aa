"""Build tfplace's table of the GPU kernels that TensorFlow's CUDA build registers.

Why: TensorFlow places an op on a GPU only if a GPU kernel exists for the op *and*
its dtypes (`MatMul` has a float32 GPU kernel, not an int32 one; `StringJoin` has
none). `tensorflow-cpu` registers no CUDA kernels at all, so on a CPU-only machine
tfplace cannot ask the live registry which ops of a program would still fall back
to the CPU on a GPU machine. The `tensorflow` wheel (the CUDA build) registers its
GPU kernels even on a machine with no GPU, so this script installs it into a
throwaway virtual environment, reads its kernel registry there and writes the GPU
kernels, and the DEFAULT-device kernels (which serve every device type, GPUs
included), to `tfplace/data/gpu_kernels-<major.minor>.json.gz`.

Format (gzip-compressed JSON, sorted keys, compact separators, gzip mtime 0, so
the same registry always gives the same bytes):

    {"format": "tfplace-gpu-kernels/1",
     "tensorflow_version": "2.21.0",
     "source": "tensorflow==2.21.0 (CUDA build): kernels.get_all_registered_kernels()",
     "kernels": {"MatMul": [{"device": "GPU",
                             "constraints": {"T": ["bfloat16", "complex128", ...]},
                             "host_memory": [], "label": ""}, ...], ...}}

`constraints` maps each constrained attribute to its sorted allowed values: dtype
names (`tf.dtypes.as_dtype(enum).name`) for type attributes, and the plain values
for the few kernels that constrain a string or int attribute (e.g. a `data_format`
of ["NHWC"]). `host_memory` lists the arguments the kernel keeps in host memory.

tfplace ships one per minor release it accepts (2.16 to 2.21), each from the release's latest patch;
regenerate one (downloads the ~570 MB wheel; a few minutes) into tfplace/data/gpu_kernels-2.21.json.gz:

    python scripts/gpu_kernel_table.py --tensorflow-version 2.21.0

`--keep-venv DIR` installs into DIR and keeps it, so a rerun skips the download.
The hidden `--dump` mode is what runs inside that environment.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import venv
from pathlib import Path
from typing import Any, Collection, Optional, Sequence

FORMAT = "tfplace-gpu-kernels/1"
DEVICE_TYPES = ("GPU", "DEFAULT")
DEFAULT_VERSION = "2.21.0"
DATA = Path(__file__).resolve().parent.parent / "tfplace" / "data"


def default_output(version: str) -> Path:
    """Where tfplace ships the table of `version`'s minor release: tfplace/data/gpu_kernels-2.21.json.gz."""
    return DATA / f"gpu_kernels-{'.'.join(version.split('.')[:2])}.json.gz"
_VERSION = re.compile(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?(?:\.post\d+)?")


class TableError(RuntimeError):
    """A step of building the table failed; the message says which and why."""


# --- the table (runs wherever tensorflow is importable) ----------------------------


def source_for(version: str) -> str:
    """The `source` field of a table built from tensorflow==`version` (a pip version)."""
    return f"tensorflow=={version} (CUDA build): kernels.get_all_registered_kernels()"


def _constraint_values(kernel: Any, constraint: Any) -> list:
    """The sorted allowed values of one `KernelDef.AttrConstraint`: dtype names for a
    type list, else the plain strings, ints, floats or bools."""
    from tensorflow.python.framework import dtypes

    where = f"kernel {kernel.op!r} on {kernel.device_type!r}, attribute {constraint.name!r}"
    kind = constraint.allowed_values.WhichOneof("value")
    if kind != "list":
        raise TableError(f"{where}: allowed_values holds {kind!r}; only a 'list' is supported")
    lists = constraint.allowed_values.list
    filled = [field.name for field, _ in lists.ListFields()]
    if len(filled) != 1 or filled[0] not in ("type", "s", "i", "f", "b"):
        raise TableError(f"{where}: allowed values of kinds {filled}; expected exactly one of type, s, i, f, b")
    if filled[0] == "type":
        return sorted(dtypes.as_dtype(enum).name for enum in lists.type)
    if filled[0] == "s":
        return sorted(value.decode("utf-8") for value in lists.s)
    return sorted(getattr(lists, filled[0]))


def kernel_entry(kernel: Any) -> dict:
    """One `KernelDef` as a table entry."""
    constraints: dict[str, list] = {}
    for constraint in kernel.constraint:
        if constraint.name in constraints:
            raise TableError(f"kernel {kernel.op!r} on {kernel.device_type!r} constrains {constraint.name!r} twice")
        constraints[constraint.name] = _constraint_values(kernel, constraint)
    return {
        "device": kernel.device_type,
        "constraints": constraints,
        "host_memory": sorted(kernel.host_memory_arg),
        "label": kernel.label,
    }


def _entry_key(entry: dict) -> str:
    return json.dumps(entry, sort_keys=True, separators=(",", ":"))


def table_from_kernel_list(
    kernel_list: Any,
    version: str,
    *,
    device_types: Collection[str] = DEVICE_TYPES,
    source: Optional[str] = None,
) -> dict:
    """The table of the kernels in `kernel_list` (a `KernelList` proto) whose device
    type is in `device_types` (GPU and DEFAULT unless told), each op's kernels sorted."""
    kernels: dict[str, list[dict]] = {}
    for kernel in kernel_list.kernel:
        if kernel.device_type in device_types:
            kernels.setdefault(kernel.op, []).append(kernel_entry(kernel))
    return {
        "format": FORMAT,
        "tensorflow_version": version,
        "source": source if source is not None else source_for(version),
        "kernels": {op: sorted(entries, key=_entry_key) for op, entries in sorted(kernels.items())},
    }


def encode_table(table: dict) -> bytes:
    """The table as deterministic gzip-compressed JSON (the header's OS byte 255, "unknown", as Python 3.10-3.12
    write it: 3.13 writes the system's)."""
    text = json.dumps(table, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    data = gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)
    return data[:9] + b"\xff" + data[10:]


def load_table(path: Path) -> dict:
    """A table written by this script."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        table = json.load(handle)
    if table.get("format") != FORMAT:
        raise TableError(f"{path}: format {table.get('format')!r}; expected {FORMAT!r}")
    return table


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def summary(table: dict, path: Path) -> str:
    """One line: kernel counts, op types, version, path and compressed size."""
    entries = [entry for op_entries in table["kernels"].values() for entry in op_entries]
    gpu = sum(entry["device"] == "GPU" for entry in entries)
    return (
        f"{len(entries):,} kernels ({gpu:,} GPU, {len(entries) - gpu:,} DEFAULT) for "
        f"{len(table['kernels']):,} op types from tensorflow {table['tensorflow_version']} "
        f"-> {path} ({path.stat().st_size:,} bytes gzip)"
    )


# --- the dump (runs inside the venv that has the CUDA build) -----------------------


def same_version(installed: str, asked: str) -> bool:
    """True if tf.__version__ `installed` is pip version `asked`: "2.16.0-rc0" is "2.16.0rc0",
    and a post release (2.15.0.post1, a repackaging) reports its base version."""
    return installed.replace("-", "") == re.sub(r"\.post\d+$", "", asked)


def dump(version: str, output: Path) -> None:
    """Import tensorflow here, check it is release `version`, write the table of its GPU kernels
    (`tensorflow_version` is its `tf.__version__`, `source` the pip requirement)."""
    try:
        import tensorflow as tf
        from tensorflow.python.framework import kernels
    except Exception as error:  # an import failure of any kind, reported as one
        raise TableError(f"importing tensorflow with {sys.executable} failed: "
                         f"{type(error).__name__}: {error}") from error
    if not same_version(tf.__version__, version):
        raise TableError(
            f"{sys.executable} imports tensorflow {tf.__version__} from {Path(tf.__file__).parent}; "
            f"asked for {version}"
        )
    table = table_from_kernel_list(kernels.get_all_registered_kernels(), tf.__version__, source=source_for(version))
    # tensorflow-cpu registers a few hundred GPU kernels too (iterators, collectives,
    # Identity...), but only a CUDA build has a GPU MatMul.
    if not any(entry["device"] == "GPU" for entry in table["kernels"].get("MatMul", [])):
        raise TableError(
            f"tensorflow {tf.__version__} at {Path(tf.__file__).parent} registers no GPU MatMul kernel: "
            "a CPU-only build (tensorflow-cpu, or a platform without CUDA wheels), not the CUDA one"
        )
    write_atomically(output, encode_table(table))


# --- the driver (runs in any Python; never imports tensorflow) ---------------------


def parse_version(text: str) -> str:
    """An argparse type: a release version such as 2.21.0, 2.22.0rc1 or 2.15.0.post1."""
    if not _VERSION.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a release version: expected MAJOR.MINOR.PATCH with an optional "
            "a/b/rc and .post suffix, e.g. 2.21.0, 2.22.0rc1 or 2.15.0.post1"
        )
    return text


def venv_python(directory: Path) -> Path:
    """The Python interpreter of the virtual environment in `directory`."""
    return directory / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def run_step(what: str, command: Sequence[str], env: Optional[dict] = None) -> None:
    """Run `command`, raising TableError with the command and exit status if it fails."""
    print(f"[gpu_kernel_table] {what}: {' '.join(command)}", file=sys.stderr, flush=True)
    status = subprocess.run(list(command), env=env, stdout=2).returncode  # fd 2: stdout is the summary only
    if status != 0:
        raise TableError(f"{what} failed with exit status {status}: {' '.join(command)}")


def build_in(directory: Path, version: str, output: Path) -> None:
    """Create (or reuse) a venv in `directory`, install tensorflow==`version`, dump there."""
    python = venv_python(directory)
    if not python.exists():
        print(f"[gpu_kernel_table] creating a virtual environment in {directory}", file=sys.stderr, flush=True)
        venv.EnvBuilder(with_pip=True).create(directory)
    run_step("pip install",
             [str(python), "-m", "pip", "install", "--disable-pip-version-check", f"tensorflow=={version}"])
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONPATH", None)
    command = [str(python), str(Path(__file__).resolve()), "--dump", "--tensorflow-version", version,
               "--output", str(output)]
    run_step("dumping the kernel registry", command, env=env)


def generate(version: str, output: Path, keep_venv: Optional[Path]) -> dict:
    """Build the table for tensorflow==`version` into `output`; the table written."""
    output = output.resolve()
    if keep_venv is not None:
        build_in(keep_venv.resolve(), version, output)
    else:
        with tempfile.TemporaryDirectory(prefix="tfplace-gpu-kernels-") as scratch:
            build_in(Path(scratch) / "venv", version, output)
    table = load_table(output)
    if not same_version(table["tensorflow_version"], version):
        raise TableError(f"{output} says tensorflow {table['tensorflow_version']}; asked for {version}")
    return table


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(
        description="Write tfplace's table of the GPU kernels registered by TensorFlow's CUDA build "
        "(installed into a throwaway virtual environment).",
    )
    result.add_argument("--tensorflow-version", type=parse_version, default=DEFAULT_VERSION,
                        help=f"the `tensorflow` release to read (default {DEFAULT_VERSION})")
    result.add_argument("--output", type=Path,
                        help="where to write the gzip JSON table (default: "
                             "tfplace/data/gpu_kernels-MAJOR.MINOR.json.gz "
                             "in this checkout, the release's table tfplace ships)")
    result.add_argument("--keep-venv", type=Path, metavar="DIR",
                        help="install into DIR (reused if it holds a venv) and keep it, instead of a temporary one")
    result.add_argument("--dump", action="store_true", help=argparse.SUPPRESS)
    return result


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    args.output = args.output or default_output(args.tensorflow_version)
    try:
        if args.dump:
            dump(args.tensorflow_version, args.output)
            return 0
        table = generate(args.tensorflow_version, args.output, args.keep_venv)
        print(summary(table, args.output.resolve()))
    except TableError as error:
        print(f"gpu_kernel_table: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
