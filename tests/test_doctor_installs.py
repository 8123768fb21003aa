"""`tfplace doctor` on real installs of TensorFlow's CUDA wheel on this machine (no driver, no GPU): with its
`nvidia-*-cu12` wheels (`pip install 'tensorflow[and-cuda]'`), and alone beside a cuDNN wheel older than its pin.
The installs take gigabytes: `.ci/run` makes them and names their Pythons in `DOCTOR_CUDA_PYTHON` and
`DOCTOR_CUDA_WHEEL_PYTHON`; elsewhere these tests are skipped, saying so."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import ROOT

pytestmark = pytest.mark.installs


def python_of(variable: str) -> str:
    python = os.environ.get(variable)
    if not python:
        pytest.skip(f"{variable} names no Python (.ci/run makes the install: see its 'doctor on real installs' phase)")
    return python


def doctor(python: str, *args: str) -> tuple[int, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CPP", "LD_LIBRARY_PATH"))}
    done = subprocess.run([python, "-m", "tfplace", "doctor", "--json", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.stdout.startswith("{"), done.stderr
    return done.returncode, json.loads(done.stdout)


def no_driver(document: dict) -> str:
    """The code of "no driver here": in a container (CI machines may be one), the container's own."""
    return "container-without-gpu" if document["facts"]["platform"].get("container") else "no-driver"


def test_the_cuda_wheel_with_its_nvidia_wheels_finds_and_reads_every_library(tmp_path):
    python = python_of("DOCTOR_CUDA_PYTHON")
    status, document = doctor(python, "--run", f"--save={tmp_path / 'facts.json'}")
    facts = document["facts"]
    assert status == 0 and document["ok"] and document["gpus_reported"] == 0
    assert facts["tensorflow"]["build"]["is_cuda_build"] is True
    assert any("and-cuda" in r for r in facts["tensorflow"]["requires"])
    libraries = {soname: entry for soname, entry in facts["libraries"].items() if soname != "libcuda.so.1"}
    assert set(libraries) >= {"libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12", "libcufft.so.11",
                              "libcusolver.so.11", "libcusparse.so.12", "libcudnn.so.9", "libnccl.so.2"}
    for soname, entry in libraries.items():
        assert "/site-packages/nvidia/" in entry["path"] and entry["error"] is None, (soname, entry)
        assert entry["package"].startswith("nvidia-") and entry["package"].split()[0].endswith("-cu12"), entry
        if soname != "libcupti.so.12":  # CUPTI reports only its API version
            assert entry["version"] and entry["package"].split()[1].startswith(entry["version"].rsplit(".", 1)[0])
    assert libraries["libcudnn.so.9"]["cuda"].startswith("12.")  # cudnnGetCudartVersion
    assert [f["code"] for f in document["findings"]] == [no_driver(document)]
    assert any("cuInit" in line for line in facts["tensorflow_view"]["log"])
    assert [run["device"] for run in facts["tensorflow_view"]["run"]] == ["/CPU:0"]
    saved = json.loads((tmp_path / "facts.json").read_text())
    assert saved["format"] == "tfplace-machine/1" and saved["libraries"] == facts["libraries"]


def test_the_cuda_wheel_alone_with_an_old_cudnn_names_the_missing_libraries_and_the_old_one():
    python = python_of("DOCTOR_CUDA_WHEEL_PYTHON")
    status, document = doctor(python)
    assert status == 0 and document["gpus_reported"] == 0  # no GPU here: what would stop one are warnings
    findings = {f["code"]: f for f in document["findings"]}
    assert set(findings) == {no_driver(document), "cuda-libraries-missing", "library-version-mismatch"}
    missing = set(findings["cuda-libraries-missing"]["evidence"]["missing"])
    assert {"libcudart.so.12", "libcublas.so.12", "libcufft.so.11"} <= missing
    old = findings["library-version-mismatch"]["evidence"]
    assert old["library"] == "libcudnn.so.9" and old["found"]["version"].startswith("9.1.")
    assert old["required"]["version"].startswith("9.3")
    assert findings["library-version-mismatch"]["fix"].startswith("pip install 'nvidia-cudnn-cu12")
    # TensorFlow's own line, explained
    assert any("Could not find cuda drivers" in line for line in document["facts"]["tensorflow_view"]["log"])
    assert "Could not find cuda drivers" in findings[no_driver(document)]["message"]
