"""The facts format `tfplace-machine/1` as declared records: what the doctor wrote on a real H200 loads and is
written back unchanged, bad keys are named with their file, nothing the caller passes is changed, files are
whole or absent, and the rules read findings by their type."""

from __future__ import annotations

import copy
import dataclasses
import json
import os

import pytest

import machines
import tfplace
from tfplace.machine import _cuda, _facts, _records
from tfplace.machine._diagnosis import ContainerWithoutGpu, Diagnosis, Finding, HiddenGpus
from tfplace.machine._records import FactsError, MachineFacts
from tfplace.machine._verdict import diagnose

H200_SAVED = machines.FIXTURES / "h200_doctor_facts.json"


def test_the_facts_the_doctor_saved_on_an_h200_load_and_are_written_back_as_they_were(tmp_path):
    facts = _facts.load(H200_SAVED)
    assert facts.driver == _records.Driver("580.159.04", "13.0") and facts.platform.container == "docker"
    assert [(g.name, g.memory_mib, g.compute_capability) for g in facts.gpus] == [("NVIDIA H200", 143771, "9.0")]
    assert facts.libraries["libcuda.so.1"].cuda == "13.0" and facts.tensorflow is None
    assert facts.nvidia_wheels["nvidia-cudnn-cu13"].version == "9.19.0.56"
    written = tmp_path / "again.json"
    facts.save(written)
    assert written.read_text() == H200_SAVED.read_text()  # the same keys, in the same order, the same bytes


def test_the_h200_facts_give_the_diagnosis_they_gave_when_saved():
    diagnosis = tfplace.doctor(facts=os.fspath(H200_SAVED))
    assert (diagnosis.ok, diagnosis.gpus_reported, diagnosis.gpus_usable) == (False, 1, 0)
    assert diagnosis.summary == ("GPUs: 1 reported by the driver, 0 used by TensorFlow: TensorFlow is not installed "
                                 "in this Python")
    assert [f.code for f in diagnosis.findings] == ["tensorflow-missing"]
    assert diagnosis.facts == json.loads(H200_SAVED.read_text())


def test_optional_keys_stay_out_when_they_were_not_there():
    given = machines.h200()  # no pci_gpus, probe_errors, nvidia_wheels; platform without container
    assert diagnose(given).facts == given
    assert set(MachineFacts.from_json(given).to_json()) == set(given)


def test_check_and_diagnose_leave_the_callers_facts_as_they_were():
    given = machines.with_and_cuda(machines.h200(machines.tensorflow()))
    del given["tensorflow_view"]  # an optional key: read as None, not added to the caller's dict
    before = copy.deepcopy(given)
    facts = _facts.check(given, "given.json")
    diagnosis = diagnose(given)
    assert given == before and "tensorflow_view" not in given
    assert facts.tensorflow_view is None and diagnosis.machine == facts
    exported = diagnosis.facts
    exported["gpus"].clear()  # the dict handed out is a copy: the diagnosis keeps its facts
    assert len(diagnosis.machine.gpus) == 1 and diagnosis.facts["gpus"]


def test_records_are_frozen_and_their_mappings_read_only():
    facts = _facts.check(machines.h200(machines.tensorflow()), "here")
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.python = "3.13"  # type: ignore[misc]
    with pytest.raises(TypeError):
        facts.libraries["libcuda.so.1"] = None  # type: ignore[index]
    with pytest.raises(TypeError):
        facts.tensorflow.build.info["is_cuda_build"] = False  # type: ignore[index, union-attr]


@pytest.mark.parametrize("change, key, received, allowed", [
    (lambda f: f["gpus"][0].update(memory_mib="143771"), "gpus[0].memory_mib", "a str ('143771')", "an int or null"),
    (lambda f: f.update(python=3.12), "python", "a number (3.12)", "a str"),
    (lambda f: f["platform"].update(wsl="no"), "platform.wsl", "a str ('no')", "a bool"),
    (lambda f: f["libraries"]["libcuda.so.1"].update(path=1), "libraries['libcuda.so.1'].path", "an int (1)",
     "a str or null"),
    (lambda f: f.update(gpus={}), "gpus", "an object ({})", "a list of objects"),
    (lambda f: f["environment"].update(CUDA_VISIBLE_DEVICES=0), "environment['CUDA_VISIBLE_DEVICES']", "an int (0)",
     "a str or null"),
    (lambda f: f["tensorflow"]["build"].update(is_cuda_build="yes"), "tensorflow.build.is_cuda_build",
     "a str ('yes')", "a bool or null")])
def test_a_key_of_the_wrong_type_is_named_with_the_file_what_it_holds_and_what_is_allowed(
        tmp_path, change, key, received, allowed):
    facts = machines.h200(machines.tensorflow())
    change(facts)
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    with pytest.raises(FactsError) as raised:
        _facts.load(path)
    assert str(raised.value) == f"{path}: {key!r} is {received}; tfplace-machine/1 allows {allowed} there"


def test_every_key_the_format_requires_is_named_when_one_is_missing():
    facts = machines.h200()
    del facts["environment"]
    with pytest.raises(FactsError, match=r"^h\.json: the key 'environment' is missing \(tfplace-machine/1 needs "
                                         r"platform, python, driver, gpus, tensorflow, libraries, environment\)$"):
        _facts.check(facts, "h.json")
    facts = machines.h200()
    del facts["gpus"][0]["name"]
    with pytest.raises(FactsError, match=r"the key 'gpus\[0\]\.name' is missing"):
        _facts.check(facts, "h.json")


def failing_dump(*args, **kwargs):
    args[1].write('{"format": "tfpl')  # a part written, then the writing stops
    raise KeyboardInterrupt


def test_save_is_whole_or_absent_a_failed_write_leaves_no_file(tmp_path, monkeypatch):
    facts = _facts.check(machines.h200(), "here")
    path = tmp_path / "facts.json"
    monkeypatch.setattr(_records.json, "dump", failing_dump)
    with pytest.raises(KeyboardInterrupt):
        facts.save(path)
    assert os.listdir(tmp_path) == []  # neither the file nor a temporary one


def test_save_is_whole_or_absent_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "facts.json"
    _facts.save(machines.h200(), path)
    old = path.read_text()
    monkeypatch.setattr(_records.json, "dump", failing_dump)
    with pytest.raises(KeyboardInterrupt):
        _facts.save(machines.cpu_machine(), path)
    assert path.read_text() == old and os.listdir(tmp_path) == ["facts.json"]


def test_save_checks_a_dict_before_writing_anything(tmp_path):
    path = tmp_path / "facts.json"
    with pytest.raises(FactsError, match="'python' is missing"):
        _facts.save({"format": "tfplace-machine/1", "platform": {}}, path)
    assert not path.exists()


def test_a_diagnosis_saves_its_facts_and_they_give_the_same_diagnosis(tmp_path):
    diagnosis = diagnose(machines.h200(machines.tensorflow()))
    path = tmp_path / "h200.json"
    diagnosis.save(path)
    assert json.loads(path.read_text()) == diagnosis.facts
    again = tfplace.doctor(facts=path)
    assert again == diagnosis and str(again) == str(diagnosis) and again.to_json() == diagnosis.to_json()


def test_a_diagnosis_without_facts_has_nothing_to_save(tmp_path):
    with pytest.raises(FactsError, match="nothing to save"):
        Diagnosis(0, 0, ()).save(tmp_path / "none.json")
    assert not (tmp_path / "none.json").exists()


def test_findings_other_code_reads_are_typed_and_the_verdict_comes_from_their_data():
    hidden = diagnose(machines.with_and_cuda(machines.h200(machines.tensorflow(), CUDA_VISIBLE_DEVICES="")))
    found = next(f for f in hidden.findings if isinstance(f, HiddenGpus))
    assert (found.code, found.value, found.visible, found.total) == ("cuda-visible-devices-hides", "", 0, 1)
    assert found.to_json() == {"code": "cuda-visible-devices-hides", "severity": "error", "message": found.message,
                               "fix": "unset CUDA_VISIBLE_DEVICES", "evidence": {"value": "", "visible": 0}}
    container = ContainerWithoutGpu.of("podman", ("/dev/nvidia0",), "podman run --device nvidia.com/gpu=all ...")
    reworded = dataclasses.replace(container, message="(any words)")
    assert Diagnosis(0, 0, (reworded,)).summary == (
        "GPUs: 0 reported by the driver, 0 used by TensorFlow: this podman container has the host's /dev/nvidia0 "
        "but not its driver's libcuda.so.1, TensorFlow runs on the CPU")
    assert Diagnosis(0, 0, (Finding("no-driver", "info", "no NVIDIA driver", None, {}),)).summary.endswith(
        "no NVIDIA GPU here, TensorFlow runs on the CPU")


@pytest.mark.parametrize("number, version", [(12050, "12.5"), (13010, "13.1"), (11080, "11.8"), (10010, "10.1")])
def test_cuda_versions_decode_in_one_place(number, version):
    assert _cuda.cuda_version(number) == version


@pytest.mark.parametrize("base, package_version, soname", [
    ("libcudart", "11.8.89", "libcudart.so.11.0"), ("libcupti", "11.8.87", "libcupti.so.11.8"),
    ("libnvrtc", "11.8.89", "libnvrtc.so.11.2"), ("libcudnn", "9.3.0.75", "libcudnn.so.9"),
    ("libcublasLt", "12.5.3.2", "libcublasLt.so.12")])
def test_sonames_are_derived_and_read_in_one_place(base, package_version, soname):
    assert _cuda.soname(base, package_version) == soname and _cuda.soname_base(soname) == base
