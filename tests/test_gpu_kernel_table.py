"""scripts/gpu_kernel_table.py and the tables it wrote, tfplace/data/gpu_kernels-<release>.json.gz (2.16-2.21)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_kernel_table.py"
SHIPPED = ROOT / "tfplace" / "data" / "gpu_kernels-2.21.json.gz"
RELEASES = {"2.16": "2.16.2", "2.17": "2.17.1", "2.18": "2.18.1", "2.19": "2.19.1", "2.20": "2.20.0", "2.21": "2.21.0"}


def _load_script():
    spec = importlib.util.spec_from_file_location("gpu_kernel_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = _load_script()


def _registered(*ops: str):
    """A KernelList of the live (tensorflow-cpu) registry's kernels for `ops`."""
    from tensorflow.core.framework import kernel_def_pb2
    from tensorflow.python.framework import kernels

    return kernel_def_pb2.KernelList(kernel=[k for op in ops for k in kernels.get_registered_kernels_for_op(op).kernel])


def _shipped() -> dict:
    with gzip.open(SHIPPED, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def _entries(table: dict, op: str, device: str) -> list[dict]:
    return [entry for entry in table["kernels"].get(op, []) if entry["device"] == device]


# (a) the table from a KernelList -------------------------------------------------


def test_table_of_cpu_kernels_has_the_documented_format():
    table = script.table_from_kernel_list(_registered("Fill", "MatMul", "StringJoin"), "2.21.0", device_types=("CPU",))
    assert set(table) == {"format", "tensorflow_version", "source", "kernels"}
    assert table["format"] == "tfplace-gpu-kernels/1"
    assert table["tensorflow_version"] == "2.21.0"
    assert table["source"] == "tensorflow==2.21.0 (CUDA build): kernels.get_all_registered_kernels()"
    assert list(table["kernels"]) == ["Fill", "MatMul", "StringJoin"]
    # Fill's int32 CPU kernels keep `dims` in host memory; one per index_type.
    fill_int32 = [e for e in table["kernels"]["Fill"] if e["constraints"]["T"] == ["int32"]]
    assert fill_int32 == [
        {"device": "CPU", "constraints": {"T": ["int32"], "index_type": ["int32"]}, "host_memory": ["dims"],
         "label": ""},
        {"device": "CPU", "constraints": {"T": ["int32"], "index_type": ["int64"]}, "host_memory": ["dims"],
         "label": ""},
    ]
    string_join = table["kernels"]["StringJoin"]
    assert [e["device"] for e in string_join] == ["CPU"] and string_join[0]["host_memory"] == []
    matmul_types = {t for e in table["kernels"]["MatMul"] for t in e["constraints"]["T"]}
    assert {"float32", "int32", "bfloat16"} <= matmul_types and all(isinstance(t, str) for t in matmul_types)


def test_default_device_kernels_are_kept_and_other_devices_dropped():
    table = script.table_from_kernel_list(_registered("Fill", "StringJoin"), "2.21.0")
    # tensorflow-cpu registers a DEFAULT int32 Fill kernel with everything in host memory.
    assert table["kernels"] == {"Fill": [
        {"device": "DEFAULT", "constraints": {"T": ["int32"], "index_type": ["int32"]},
         "host_memory": ["dims", "output", "value"], "label": ""},
    ]}


def test_non_type_constraints_keep_their_plain_values():
    table = script.table_from_kernel_list(_registered("DepthToSpace"), "2.21.0", device_types=("CPU",))
    assert {json.dumps(e["constraints"].get("data_format")) for e in table["kernels"]["DepthToSpace"]} == {'["NHWC"]'}


def test_same_kernels_in_any_order_give_the_same_bytes():
    from tensorflow.core.framework import kernel_def_pb2

    kernels = list(_registered("Fill", "MatMul", "Cast", "DataFormatVecPermute").kernel)
    forward = script.encode_table(script.table_from_kernel_list(kernel_def_pb2.KernelList(kernel=kernels), "2.21.0",
                                                                device_types=("CPU", "DEFAULT")))
    backward = script.encode_table(script.table_from_kernel_list(kernel_def_pb2.KernelList(kernel=kernels[::-1]),
                                                                 "2.21.0", device_types=("CPU", "DEFAULT")))
    assert forward == backward
    assert forward[4:8] == b"\0\0\0\0"  # gzip mtime 0
    text = gzip.decompress(forward).decode()
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def test_constraint_values_of_an_unsupported_kind_are_refused():
    from tensorflow.core.framework import kernel_def_pb2

    kernel = kernel_def_pb2.KernelDef(op="Fake", device_type="GPU")
    constraint = kernel.constraint.add(name="shape")
    constraint.allowed_values.list.shape.add()
    with pytest.raises(script.TableError,
                       match=r"kernel 'Fake' on 'GPU', attribute 'shape': allowed values of kinds \['shape'\]"):
        script.table_from_kernel_list(kernel_def_pb2.KernelList(kernel=[kernel]), "2.21.0")


def test_dump_refuses_a_version_it_did_not_import(tmp_path):
    import tensorflow as tf

    with pytest.raises(script.TableError, match=rf"imports tensorflow {tf.__version__} .*; asked for 9\.9\.9"):
        script.dump("9.9.9", tmp_path / "out.json.gz")
    assert not (tmp_path / "out.json.gz").exists()


def test_dump_refuses_the_cpu_only_build(tmp_path):
    import tensorflow as tf

    with pytest.raises(script.TableError, match="registers no GPU MatMul kernel: a CPU-only build"):
        script.dump(tf.__version__.replace("-", ""), tmp_path / "out.json.gz")
    assert not (tmp_path / "out.json.gz").exists()


def test_a_failing_step_names_its_command_and_exit_status():
    command = [sys.executable, "-c", "raise SystemExit(3)"]
    with pytest.raises(script.TableError) as error:
        script.run_step("pip install", command)
    assert str(error.value) == f"pip install failed with exit status 3: {' '.join(command)}"


# (b) the shipped table -------------------------------------------------------------


def test_shipped_table_is_the_cuda_build_of_2_21_0():
    table = _shipped()
    assert table["format"] == "tfplace-gpu-kernels/1"
    assert table["tensorflow_version"] == "2.21.0"
    assert table["source"] == "tensorflow==2.21.0 (CUDA build): kernels.get_all_registered_kernels()"
    entries = [e for op_entries in table["kernels"].values() for e in op_entries]
    assert {e["device"] for e in entries} == {"GPU", "DEFAULT"}
    assert sum(e["device"] == "GPU" for e in entries) > 4000


def test_shipped_matmul_runs_float32_but_not_int32_on_gpu():
    table = _shipped()
    gpu_types = {t for e in _entries(table, "MatMul", "GPU") for t in e["constraints"]["T"]}
    assert "float32" in gpu_types and "int32" not in gpu_types
    assert _entries(table, "MatMul", "DEFAULT") == []


def test_shipped_table_has_no_kernel_for_string_join():
    table = _shipped()
    assert "StringJoin" not in table["kernels"]
    assert "StringJoin" not in json.dumps(table)


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_a_table_is_shipped_per_release_from_its_latest_patch_in_the_scripts_bytes(release):
    path = ROOT / "tfplace" / "data" / f"gpu_kernels-{release}.json.gz"
    assert path == script.default_output(RELEASES[release])
    table = script.load_table(path)
    assert table["tensorflow_version"] == RELEASES[release]
    assert table["source"] == f"tensorflow=={RELEASES[release]} (CUDA build): kernels.get_all_registered_kernels()"
    assert sum(e["device"] == "GPU" for entries in table["kernels"].values() for e in entries) > 4000
    assert script.encode_table(table) == path.read_bytes()  # the same bytes on every Python (OS byte 255)
    assert path.read_bytes()[9] == 0xFF


def test_the_table_of_the_running_release_is_read_without_a_warning():
    import warnings

    import tensorflow as tf
    from tfplace.placement.ops import _kernel_table

    release = ".".join(tf.__version__.split(".")[:2])
    assert _kernel_table.table_path().endswith(f"gpu_kernels-{release}.json.gz")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = _kernel_table.gpu_table()
    assert table.mismatch == "" and table.version == RELEASES[release]


def test_a_release_without_a_table_gets_the_newest_with_a_warning_naming_the_command(monkeypatch):
    from tfplace.placement.ops import _kernel_table

    assert _kernel_table.table_path("2.99.0") == _kernel_table.table_path("2.21.0")
    assert _kernel_table.table_path("2.17.0").endswith("gpu_kernels-2.17.json.gz")
    monkeypatch.setattr(_kernel_table, "_running_version", lambda: "2.99.0")
    table = _kernel_table.shipped.__wrapped__(_kernel_table.table_path())
    assert table.version == "2.21.0"
    assert "but this is TensorFlow 2.99.0: GPU kernels may differ" in table.mismatch
    assert table.mismatch.endswith("python scripts/gpu_kernel_table.py --tensorflow-version 2.99.0")


# (c) the command line ----------------------------------------------------------------


def _run_script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """The script in a fresh interpreter whose `import tensorflow` fails, with TMPDIR in tmp_path."""
    poison = tmp_path / "poison" / "tensorflow"
    poison.mkdir(parents=True)
    (poison / "__init__.py").write_text("raise ImportError('the script imported tensorflow')\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(poison.parent), "TMPDIR": str(scratch)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def test_help_runs_without_tensorflow(tmp_path):
    done = _run_script(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    assert "--tensorflow-version" in done.stdout and "--keep-venv DIR" in done.stdout
    assert "--dump" not in done.stdout


def _refused(done: subprocess.CompletedProcess, version: str) -> bool:
    return done.returncode == 2 and "imported tensorflow" not in done.stderr and (
        f"argument --tensorflow-version: {version!r} is not a release version: expected MAJOR.MINOR.PATCH "
        "with an optional a/b/rc and .post suffix, e.g. 2.21.0, 2.22.0rc1 or 2.15.0.post1") in done.stderr


@pytest.mark.parametrize("version", ["latest", "2.21", "v2.21.0", "2.21.0.dev1", "2.21.0; rm -rf /"])
def test_bad_version_is_refused_before_any_venv(tmp_path, version):
    done = _run_script(tmp_path, "--tensorflow-version", version, "--output", str(tmp_path / "out.json.gz"))
    assert _refused(done, version), done.stderr
    assert list((tmp_path / "tmp").iterdir()) == []  # no temporary venv
    assert not (tmp_path / "out.json.gz").exists()


def test_bad_version_is_refused_before_the_kept_venv_is_made(tmp_path):
    done = _run_script(tmp_path, "--keep-venv", str(tmp_path / "venv"), "--tensorflow-version", "latest")
    assert _refused(done, "latest"), done.stderr
    assert not (tmp_path / "venv").exists()


def test_release_versions_are_accepted():
    versions = ["2.21.0", "2.22.0rc1", "2.15.0.post1", "10.0.12"]
    assert [script.parse_version(v) for v in versions] == versions
    assert script.same_version("2.16.0-rc0", "2.16.0rc0") and script.same_version("2.15.0", "2.15.0.post1")
    assert not script.same_version("2.21.0", "2.21.1") and not script.same_version("2.16.0-rc0", "2.16.0")
