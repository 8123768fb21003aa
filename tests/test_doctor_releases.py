"""The doctor on every TensorFlow release users run: from what each release's wheel declares
(`tests/fixtures/releases/`, taken by `tools/release_declarations.py`) the libraries, versions and fix it
derives; its table of releases against those declarations; and machines users described in public TensorFlow
issues, each with the cause its thread found and a fix that works when pasted."""

from __future__ import annotations

import re

import pytest

import machines
from tfplace.machine import _releases
from tfplace.machine._facts import TENSORFLOW_DISTRIBUTIONS
from tfplace.machine._libraries import from_build, satisfies, wanted
from tfplace.machine._verdict import _METAPACKAGES, diagnose

FIXTURES = sorted(p.name for p in machines.RELEASES.iterdir() if p.is_dir())
CUDA_BUILDS = [name for name in FIXTURES if machines.release(name)["build"].get("is_cuda_build")]


def _pythons(name: str) -> list[str]:
    text = (machines.RELEASES / name / "wheel.txt").read_text()
    return re.search(r"^pythons: (.+)$", text, re.M)[1].split()


def _version(name: str) -> str:
    return name.rpartition("-")[2]


def codes(diagnosis, severity=None):
    return [f.code for f in diagnosis.findings if severity is None or f.severity == severity]


def finding(diagnosis, code):
    return next(f for f in diagnosis.findings if f.code == code)


@pytest.mark.parametrize("name", CUDA_BUILDS)
def test_the_release_table_says_what_each_wheel_declares(name):
    tf = machines.release(name)
    release = _releases.release_of(_version(name))
    assert release is not None, f"{name} is missing from tfplace.machine._releases.RELEASES"
    assert tf["build"]["cuda_version"].startswith(release.cuda) or release.cuda.startswith(tf["build"]["cuda_version"])
    assert release.cudnn.split(".")[0] == tf["build"]["cudnn_version"].split(".")[0]
    assert all(release.pythons[0] <= int(p.split(".")[1]) <= release.pythons[1] for p in _pythons(name))
    pinned = [w for w in wanted(tf["requires"]) if w.base == "libcudnn"]
    if pinned:  # the cuDNN the and-cuda extra installs is the one the table names
        assert pinned[0].minimum.startswith(release.cudnn + ".")


def test_the_last_release_for_an_old_architecture_is_the_last_with_its_machine_code():
    def codes_of(name):
        return machines.release(name)["build"]["cuda_compute_capabilities"]

    assert "sm_35" in codes_of("tensorflow-2.14.1")
    assert not any(c.startswith("sm_3") for c in codes_of("tensorflow-2.15.1"))
    assert "sm_50" in codes_of("tensorflow-2.16.2")
    assert not any(c.startswith("sm_5") for c in codes_of("tensorflow-2.17.1"))
    assert _releases.LAST_RELEASE_FOR == {3: "2.14", 5: "2.16"}


def test_the_metapackages_are_those_the_wheels_declare():
    declared = set()
    for name in FIXTURES:
        for line in (machines.RELEASES / name / "requires.txt").read_text().splitlines():
            found = re.match(r"(tensorflow-[a-z-]+)\b.*; (.*)$", line)
            if found and "extra" not in found[2] and found[1] in TENSORFLOW_DISTRIBUTIONS:
                declared.add(("Windows", found[1]) if "Windows" in found[2] else ("Linux-aarch64", found[1]))
    assert declared <= _METAPACKAGES and declared  # (Linux-arm64 is the same wheel under another machine name)


# release -> (the runtime and cuDNN it loads, what cuDNN it accepts, the fix where its libraries do not load)
def _conda(cuda: str, cudnn: str) -> str:
    """The fix TensorFlow's install guide of 2.13 and older gives: CUDA and cuDNN from conda-forge."""
    return (f"conda install -y -c conda-forge cudatoolkit={cuda} cudnn={cudnn} && "
            "export LD_LIBRARY_PATH=$CONDA_PREFIX/lib:$LD_LIBRARY_PATH")


DERIVED = {
    "tensorflow-gpu-1.15.5": ("libcudart.so.10.0", "libcudnn.so.7", "", _conda("10.0", "7.4")),
    "tensorflow-2.3.4": ("libcudart.so.10.1", "libcudnn.so.7", "", _conda("10.1", "7.6")),
    "tensorflow-2.10.1": ("libcudart.so.11.0", "libcudnn.so.8", "", _conda("11.2", "8.1")),
    "tensorflow-gpu-2.10.1": ("libcudart.so.11.0", "libcudnn.so.8", "", _conda("11.2", "8.1")),
    "tensorflow-2.11.1": ("libcudart.so.11.0", "libcudnn.so.8", "", _conda("11.2", "8.1")),
    "tensorflow-2.12.1": ("libcudart.so.11.0", "libcudnn.so.8", "", _conda("11.8", "8.6")),
    "tensorflow-2.13.1": ("libcudart.so.11.0", "libcudnn.so.8", "", _conda("11.8", "8.6")),
    "tensorflow-2.14.1": ("libcudart.so.11.0", "libcudnn.so.8", "==8.7.0.84",
                          "pip install 'tensorflow[and-cuda]==2.14.1'"),
    "tensorflow-2.15.1": ("libcudart.so.12", "libcudnn.so.8", "==8.9.4.25",
                          "pip install 'tensorflow[and-cuda]==2.15.1'"),
    "tensorflow-2.16.1": ("libcudart.so.12", "libcudnn.so.8", "==8.9.7.29",
                          "pip install 'tensorflow[and-cuda]==2.16.1'"),
    "tensorflow-2.16.2": ("libcudart.so.12", "libcudnn.so.8", "==8.9.7.29",
                          "pip install 'tensorflow[and-cuda]==2.16.2'"),
    "tensorflow-2.17.1": ("libcudart.so.12", "libcudnn.so.8", "==8.9.7.29",
                          "pip install 'tensorflow[and-cuda]==2.17.1'"),
    "tensorflow-2.18.1": ("libcudart.so.12", "libcudnn.so.9", "==9.3.0.75",
                          "pip install 'tensorflow[and-cuda]==2.18.1'"),
    "tensorflow-2.19.1": ("libcudart.so.12", "libcudnn.so.9", "==9.3.0.75",
                          "pip install 'tensorflow[and-cuda]==2.19.1'"),
    "tensorflow-2.20.0": ("libcudart.so.12", "libcudnn.so.9", "<10.0,>=9.3.0.75",
                          "pip install 'tensorflow[and-cuda]==2.20.0'"),
    "tensorflow-2.21.0": ("libcudart.so.12", "libcudnn.so.9", "<10.0,>=9.3.0.75",
                          "pip install 'tensorflow[and-cuda]==2.21.0'"),
}


def test_every_cuda_build_among_the_fixtures_has_its_expectation():
    assert sorted(DERIVED) == sorted(CUDA_BUILDS)


@pytest.mark.parametrize("name", sorted(DERIVED))
def test_each_release_gives_its_libraries_versions_and_the_fix_for_them(name):
    runtime, cudnn, accepts, fix = DERIVED[name]
    tf = machines.release(name)
    wants = wanted(tf["requires"]) or from_build(tf["build"])
    by_soname = {w.soname: w for w in wants}
    assert runtime in by_soname and cudnn in by_soname and by_soname[cudnn].specifier == accepts
    assert {w.base for w in wants} >= {"libcudart", "libcublas", "libcufft", "libcusolver", "libcusparse", "libcudnn"}
    python = _pythons(name)[-1] + ".4"
    broken = machines.machine(tf, python=python, gpus=(("Tesla V100-SXM2-16GB", "7.0"),), loaded={runtime: None})
    diagnosis = diagnose(broken)
    missing = finding(diagnosis, "cuda-libraries-missing")
    assert missing.severity == "error" and runtime in missing.message and missing.fix == fix
    assert "tensorflow-view-differs" not in codes(diagnosis) and diagnosis.gpus_usable == 0
    assert diagnose(machines.machine(tf, python=python, gpus=(("Tesla V100-SXM2-16GB", "7.0"),))).ok  # as it asks


def test_a_cpu_build_of_each_release_is_fixed_by_that_releases_gpu_build():
    cpu_115 = machines.release("tensorflow-1.15.5")
    diagnosis = diagnose(machines.machine(cpu_115, python="3.7.12"))
    fix = finding(diagnosis, "cpu-only-tensorflow").fix
    assert fix.startswith("pip uninstall -y tensorflow && pip install 'tensorflow-gpu==1.15.5'")
    assert "[and-cuda]" not in fix
    cpu_216 = dict(machines.release("tensorflow-2.16.2"), distributions={"tensorflow-cpu": "2.16.2"},
                   build={"is_cuda_build": False})
    fix = finding(diagnose(machines.machine(cpu_216, python="3.12.3")), "cpu-only-tensorflow").fix
    assert fix == "pip uninstall -y tensorflow-cpu && pip install 'tensorflow[and-cuda]==2.16.2'"


def test_satisfies_reads_each_form_of_bound_on_the_parts_a_library_reports():
    assert satisfies("8.9.7", "==8.9.7.29") and not satisfies("8.8.0", "==8.9.4.25")
    assert satisfies("9.3.0", "<10.0,>=9.3.0.75") and not satisfies("10.1.0", "<10.0,>=9.3.0.75")
    assert not satisfies("9.1.0", "<10.0,>=9.3.0.75")
    assert satisfies("2.2.1", "~=2.2.0") and not satisfies("2.3", "~=2.2.0")
    assert satisfies("12.5", "<12.5.1") and not satisfies("12.6", "<12.5.1") and satisfies("", "==1.0")


# Machines users described in public TensorFlow issues, rebuilt from what each thread shows and what the
# named release's wheel declares, with the cause and the fix the thread confirmed.

def test_tf_2_16_1_with_its_cuda_wheels_installed_where_its_run_path_does_not_look():
    """TensorFlow 2.16.1 with `[and-cuda]`: the wheels are installed, TensorFlow lists no GPU; the thread's
    fix puts the wheels' folders in LD_LIBRARY_PATH (2.16.1's own run path misses them)."""
    tf = machines.release("tensorflow-2.16.1")
    wants = wanted(tf["requires"])
    wheels = {w.package: {"version": w.minimum,
                          "lib": f"{machines.SITE}/nvidia/{w.package[7:-5].replace('-', '_')}/lib"} for w in wants}
    facts = machines.machine(tf, python="3.11.8", driver=("550.54.14", "12.4"), loaded={w.soname: None for w in wants},
                             wheels=wheels)
    facts["tensorflow_view"] = {"gpus": [], "log": ["W0000 ... Cannot dlopen some GPU libraries."]}
    diagnosis = diagnose(facts)
    missing = finding(diagnosis, "cuda-libraries-missing")
    assert "pip installed them" in missing.message and "nvidia-cudnn-cu12 8.9.7.29" in missing.message
    folders = re.fullmatch(r"export LD_LIBRARY_PATH=(\S+):\$LD_LIBRARY_PATH", missing.fix)[1].split(":")
    assert set(folders) == {entry["lib"] for entry in wheels.values()}
    assert "tensorflow-view-differs" not in codes(diagnosis) and diagnosis.gpus_usable == 0


def test_tf_2_16_1_with_some_cuda_wheels_at_other_versions_or_absent_still_points_the_loader_at_them():
    """The same machine where pip put one wheel at another version and left one out: the fix installs those two
    as the release pins them and puts every wheel's folder in LD_LIBRARY_PATH, never only the reinstall of
    `tensorflow[and-cuda]==2.16.1` that the user already ran."""
    tf = machines.release("tensorflow-2.16.1")
    wants = wanted(tf["requires"])
    folder = {w.package: f"{machines.SITE}/nvidia/{w.package[7:-5].replace('-', '_')}/lib" for w in wants}
    wheels = {w.package: {"version": "9.0.0.312" if w.package == "nvidia-cudnn-cu12" else w.minimum,
                          "lib": folder[w.package]} for w in wants if w.package != "nvidia-nccl-cu12"}
    facts = machines.machine(tf, python="3.11.8", driver=("550.54.14", "12.4"), loaded={w.soname: None for w in wants},
                             wheels=wheels)
    missing = finding(diagnose(facts), "cuda-libraries-missing")
    install, _, export = missing.fix.partition(" && ")
    pinned = {w.package: w.requirement for w in wants}
    assert install == f"pip install '{pinned['nvidia-cudnn-cu12']}' '{pinned['nvidia-nccl-cu12']}'"
    assert set(re.fullmatch(r"export LD_LIBRARY_PATH=(\S+):\$LD_LIBRARY_PATH", export)[1].split(":")) == \
        {entry["lib"] for entry in wheels.values()}
    assert "tensorflow[and-cuda]" not in missing.fix


def test_tf_2_15_beside_a_system_cudnn_older_than_its_pin():
    """TensorFlow 2.15 logs `Loaded runtime CuDNN library: 8.8.0 but source was compiled with: 8.9.4`: a
    system cuDNN 8.8 put first by LD_LIBRARY_PATH."""
    tf = machines.release("tensorflow-2.15.1")
    facts = machines.machine(tf, python="3.10.12",
                             loaded={"libcudnn.so.8": ("/usr/local/cuda/lib64/libcudnn.so.8", "8.8.0")},
                             LD_LIBRARY_PATH="/usr/local/cuda/lib64")
    diagnosis = diagnose(facts)
    mismatch = finding(diagnosis, "library-version-mismatch")
    assert not diagnosis.ok and mismatch.severity == "error"
    assert "8.8.0" in mismatch.message and "==8.9.4.25" in mismatch.message
    assert mismatch.fix == ("export LD_LIBRARY_PATH=  # it puts /usr/local/cuda/lib64 first; then: "
                            "pip install 'tensorflow[and-cuda]==2.15.1'")


def test_tf_2_3_on_an_rtx_3090_is_too_new_for_its_cuda_10_1():
    """TensorFlow 2.3 (CUDA 10.1) on an RTX 3090 (8.6) failed with `device kernel image is invalid`; the fix
    was a release built with CUDA 11.1 or newer."""
    tf = machines.release("tensorflow-2.3.4")
    diagnosis = diagnose(machines.machine(tf, python="3.8.10", driver=("455.23.05", "11.1")))
    unsupported = finding(diagnosis, "compute-capability-unsupported")
    assert not diagnosis.ok and "ptx-jit" not in codes(diagnosis)
    assert ("newer than the build's CUDA 10.1 knows (up to 7.5); its PTX compute_70 cannot serve it"
            in unsupported.message)
    assert unsupported.fix.startswith("pip install 'tensorflow==2.13.*'  # then CUDA 11.8 and cuDNN 8.6: conda install")


def test_native_windows_after_2_10_gets_wsl2_and_no_cpu_reinstall():
    """`tensorflow` 2.12 on native Windows (a metapackage that installs `tensorflow-intel`, a CPU build)."""
    tf = {"distributions": {"tensorflow": "2.12.0", "tensorflow-intel": "2.12.0"}, "build": {"is_cuda_build": False},
          "requires": [], "path": "C:\\Python310\\Lib\\site-packages\\tensorflow"}
    diagnosis = diagnose(machines.machine(tf, python="3.10.11", system="Windows", arch="AMD64"))
    assert "conflicting-tensorflow" not in codes(diagnosis)
    assert finding(diagnosis, "platform-without-gpu").fix.startswith("wsl --install")
    assert all("[and-cuda]==2.12" not in (f.fix or "") and "uninstall -y tensorflow-intel" not in (f.fix or "")
               for f in diagnosis.findings)


def test_native_windows_2_10_gets_its_own_gpu_build_with_cuda_11_2():
    tf = {"distributions": {"tensorflow-cpu": "2.10.1"}, "build": {"is_cuda_build": False}, "requires": [],
          "path": "C:\\Python310\\Lib\\site-packages\\tensorflow"}
    diagnosis = diagnose(machines.machine(tf, python="3.10.11", system="Windows", arch="AMD64"))
    fix = finding(diagnosis, "cpu-only-tensorflow").fix
    assert fix.startswith("pip uninstall -y tensorflow-cpu && pip install 'tensorflow==2.10.1'  # then CUDA 11.2 and "
                          "cuDNN 8.1")


def test_tf_2_13_without_its_cuda_11_runtime():
    """`Could not load dynamic library 'libcudart.so.11.0'` under TensorFlow 2.13, which ships no CUDA."""
    tf = machines.release("tensorflow-2.13.1")
    diagnosis = diagnose(machines.machine(tf, python="3.11.4", loaded={"libcudart.so.11.0": None}))
    missing = finding(diagnosis, "cuda-libraries-missing")
    assert missing.message.startswith("CUDA libraries this TensorFlow needs do not load: libcudart.so.11.0")
    assert missing.fix.startswith("conda install -y -c conda-forge cudatoolkit=11.8 cudnn=8.6")


def test_tf_1_15_gpu_on_an_old_driver_names_the_minimum_driver():
    tf = machines.release("tensorflow-gpu-1.15.5")
    diagnosis = diagnose(machines.machine(tf, python="3.7.12", gpus=(("Tesla K80", "3.7"),), driver=("396.44", "9.2")))
    too_old = finding(diagnosis, "driver-too-old")
    assert "410.48" in too_old.fix and not diagnosis.ok


@pytest.mark.parametrize("container, run", [("docker", "docker run --gpus all"), ("podman", "podman run --device"),
                                            ("kubernetes", "resources: {limits: {nvidia.com/gpu: 1}}")])
def test_a_container_started_without_gpu_access_says_so_and_how_to_start_it(container, run):
    facts = machines.machine(machines.release("tensorflow-2.21.0"), python="3.12.3", driver=None, container=container)
    diagnosis = diagnose(facts)
    found = finding(diagnosis, "container-without-gpu")
    assert found.severity == "warning" and f"this {container} container was started without GPU access" in found.message
    assert found.fix.startswith(run) and "no-driver" not in codes(diagnosis)
    half = machines.machine(machines.release("tensorflow-2.21.0"), driver=None, container="docker",
                            dev_nvidia=("/dev/nvidia0", "/dev/nvidiactl"))
    assert "has the host's /dev/nvidia0, /dev/nvidiactl but not its driver's libcuda.so.1" in \
        finding(diagnose(half), "container-without-gpu").message
