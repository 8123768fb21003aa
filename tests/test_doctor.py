"""`tfplace doctor`: the verdicts real machines need (their facts in tests/fixtures/gpu), the rules, bad input,
misbehaving probes, and the verdict where users already are (configure, try_gpu, requires_gpu, env)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import machines
from conftest import ROOT, result_of, run_python
from tfplace.machine import _facts, _libraries
from tfplace.machine._verdict import classify, diagnose

# what tfplace.doctor() must answer; no test here imports TensorFlow in this process


def codes(diagnosis, severity=None):
    return [f.code for f in diagnosis.findings if severity is None or f.severity == severity]


def finding(diagnosis, code):
    return next(f for f in diagnosis.findings if f.code == code)


# --- the H200 machine (CUDA 13, no CUDA 12 library), as it is and as it would be -------------------------------

def test_h200_as_it_is_has_no_tensorflow():
    diagnosis = diagnose(machines.h200())
    assert not diagnosis.ok and (diagnosis.gpus_reported, diagnosis.gpus_usable) == (1, 0)
    assert diagnosis.summary == ("GPUs: 1 reported by the driver, 0 used by TensorFlow: TensorFlow is not installed "
                                 "in this Python")
    assert diagnosis.fixes == ["pip install 'tensorflow[and-cuda]'"]
    text = str(diagnosis)
    assert "NVIDIA H200, 143771 MiB, compute capability 9.0" in text and "580.159.04 (CUDA 13.0)" in text


def test_h200_with_the_cuda_wheel_alone_names_each_missing_library_and_the_cuda_13_ones_it_would_take():
    diagnosis = diagnose(machines.h200(machines.tensorflow()))
    assert not diagnosis.ok and diagnosis.gpus_usable == 0
    missing = finding(diagnosis, "cuda-libraries-missing")
    # what the H200 machine's loader reported: these five do not load; libcusparse.so.12 and libcudnn.so.9 do
    assert missing.evidence["missing"] == ["libcudart.so.12", "libcublasLt.so.12", "libcublas.so.12", "libcufft.so.11",
                                           "libcusolver.so.11", "libcupti.so.12"]
    assert diagnosis.summary.startswith("GPUs: 1 reported by the driver, 0 used by TensorFlow: CUDA libraries this "
                                        "TensorFlow needs do not load: libcudart.so.12, ")
    mismatched = {f.evidence["library"]: f.evidence for f in diagnosis.findings if f.code == "library-version-mismatch"}
    assert mismatched["libcudnn.so.9"]["found"] == {"path": "/usr/lib/x86_64-linux-gnu/libcudnn.so.9.14.0",
                                                    "version": "9.14.0", "cuda": "13.0"}  # cudnnGetCudartVersion
    assert mismatched["libcusparse.so.12"]["found"]["cuda"] == "13"  # CUDA 13's cuSPARSE keeps the soname .so.12
    assert diagnosis.fixes[0] == "pip install 'tensorflow[and-cuda]==2.21.0'"
    assert "ptx-jit" in codes(diagnosis, "warning")


def test_h200_with_tensorflow_and_cuda_uses_its_gpu_and_warns_of_ptx_compiled_at_start():
    diagnosis = diagnose(machines.with_and_cuda(machines.h200(machines.tensorflow())))
    assert diagnosis.ok and (diagnosis.gpus_reported, diagnosis.gpus_usable) == (1, 1)
    assert codes(diagnosis) == ["ptx-jit"]
    assert diagnosis.summary == "GPUs: 1 reported by the driver, 1 used by TensorFlow (warnings: ptx-jit)"
    assert "PTX compute_90" in finding(diagnosis, "ptx-jit").message
    assert diagnosis.fixes == ["export CUDA_CACHE_MAXSIZE=4294967296  # keep the compiled kernels between runs"]


def test_h200_with_tensorflow_cpu():
    diagnosis = diagnose(machines.h200(machines.tensorflow("tensorflow-cpu", cuda=False)))
    assert not diagnosis.ok and codes(diagnosis, "error") == ["cpu-only-tensorflow"]
    assert diagnosis.fixes == ["pip uninstall -y tensorflow-cpu && pip install 'tensorflow[and-cuda]==2.21.0'"]


def test_h200_with_cuda_visible_devices_empty():
    diagnosis = diagnose(machines.with_and_cuda(machines.h200(machines.tensorflow(), CUDA_VISIBLE_DEVICES="")))
    assert not diagnosis.ok and diagnosis.gpus_usable == 0
    assert codes(diagnosis, "error") == ["cuda-visible-devices-hides"]
    assert diagnosis.summary.endswith("CUDA_VISIBLE_DEVICES='' leaves 0 of the 1 GPU(s) visible")
    assert diagnosis.fixes[0] == "unset CUDA_VISIBLE_DEVICES"


def test_h200_by_uuid_in_cuda_visible_devices_is_the_gpu():
    facts = machines.with_and_cuda(machines.h200(machines.tensorflow(), CUDA_VISIBLE_DEVICES="GPU-55d37422"))
    assert diagnose(facts).ok


def test_cpu_machine_with_the_cuda_wheel_explains_tensorflows_own_line():
    diagnosis = diagnose(machines.cpu_machine())
    assert diagnosis.ok and (diagnosis.gpus_reported, diagnosis.gpus_usable) == (0, 0)
    assert "Could not find cuda drivers" in finding(diagnosis, "no-driver").message
    text = str(diagnosis)
    assert "I cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used." in text
    assert "cpu_feature_guard" not in text  # TensorFlow's other start-up lines are not evidence


def test_tensorflows_log_lines_are_read_in_the_prefix_of_each_version():
    """Lines of TensorFlow 2.16.2's CUDA wheel on this CPU machine (a date, the source's path) and of 2.21's (a
    thread, the file alone) read alike; start-up notices and the cloud file system's lines are left out."""
    from tfplace.machine._view import diagnostic

    lines = [
        "2026-11-27 09:22:42.580602: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on.",
        "2026-11-27 09:22:42.581502: I external/local_tsl/tsl/cuda/cudart_stub.cc:32] Could not find cuda drivers "
        "on your machine, GPU will not be used.",
        "2026-11-27 09:22:42.581553: I external/local_tsl/tsl/platform/cloud/gcs_file_system.cc:855] GCS cache max "
        "size = 0 ; block size = 67108864 ; max staleness = 0",
        "2026-11-27 09:22:42.593628: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:479] Unable to "
        "register cuFFT factory: Attempting to register factory for plugin cuFFT when one has already been registered",
        "2026-11-27 09:22:43.512000: I external/local_xla/xla/stream_executor/cuda/cuda_driver.cc:280] failed call "
        "to cuInit: UNKNOWN ERROR (303)",
        "I0000 00:00:1795710172.767201   24423 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU "
        "will not be used.",
    ]
    assert [diagnostic(line) for line in lines] == [
        None,
        "I cudart_stub.cc:32] Could not find cuda drivers on your machine, GPU will not be used.",
        None,
        "E cuda_fft.cc:479] Unable to register cuFFT factory: Attempting to register factory for plugin cuFFT when "
        "one has already been registered",
        "I cuda_driver.cc:280] failed call to cuInit: UNKNOWN ERROR (303)",
        "I cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.",
    ]


def test_the_view_that_differs_from_the_facts_is_an_error_with_tensorflows_line():
    facts = machines.with_and_cuda(machines.h200(machines.tensorflow()))
    facts["tensorflow_view"] = {"gpus": [], "log": ["I gpu_device.cc:2431] Ignoring visible gpu device",
                                                    "W gpu_device.cc:2342] Cannot dlopen some GPU libraries."]}
    diagnosis = diagnose(facts)
    assert not diagnosis.ok and diagnosis.gpus_usable == 0
    assert finding(diagnosis, "tensorflow-view-differs").message == (
        "TensorFlow itself lists 0 GPU(s) where the facts predict 1; its log: "
        "W gpu_device.cc:2342] Cannot dlopen some GPU libraries.")


def test_json_has_the_contract_keys():
    document = diagnose(machines.h200()).to_json()
    assert document["format"] == "tfplace-doctor/1" and document["ok"] is False
    assert set(document) == {"format", "ok", "summary", "gpus_reported", "gpus_usable", "findings", "facts"}
    assert set(document["findings"][0]) == {"code", "severity", "message", "fix", "evidence"}
    assert json.loads(json.dumps(document)) == document


# --- the rules ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("capability, kind", [
    ("8.0", "native"), ("8.6", "native"), ("8.9", "native"), ("7.5", "native"), ("9.0", "ptx"), ("10.0", "too-new"),
    ("12.0", "too-new"), ("5.2", "too-old"), ("3.7", "too-old")])
def test_classify_over_tensorflow_2_21s_code(capability, kind):
    assert classify(capability, machines.BUILD_2_21)[0] == kind


def test_blackwell_gets_a_build_from_source_and_maxwell_the_last_release_with_its_code():
    facts = machines.with_and_cuda(machines.h200(machines.tensorflow()))
    facts["gpus"] = [dict(facts["gpus"][0], name="NVIDIA GeForce RTX 5090", compute_capability="12.0"),
                     dict(facts["gpus"][0], index=1, uuid="GPU-b", name="Tesla M60", compute_capability="5.2")]
    diagnosis = diagnose(facts)
    assert (diagnosis.gpus_reported, diagnosis.gpus_usable) == (2, 0)
    fixes = [f.fix for f in diagnosis.findings if f.code == "compute-capability-unsupported"]
    assert fixes == ["build TensorFlow from source with HERMETIC_CUDA_COMPUTE_CAPABILITIES=compute_120 "
                     "(https://www.tensorflow.org/install/source)", "pip install 'tensorflow[and-cuda]==2.16.*'"]


def test_a_driver_too_old_for_the_build_and_one_too_old_for_its_ptx():
    facts = machines.with_and_cuda(machines.h200(machines.tensorflow()))
    facts["driver"] = {"version": "520.61.05", "cuda": "11.8"}
    assert codes(diagnose(facts), "error") == ["driver-too-old"]
    facts["driver"] = {"version": "535.104.05", "cuda": "12.2"}  # runs CUDA 12.5 code, cannot compile its PTX
    diagnosis = diagnose(facts)
    assert codes(diagnosis, "error") == ["driver-too-old"] and diagnosis.gpus_usable == 0
    assert "cannot compile" in diagnosis.summary


def test_a_cudnn_wheel_older_than_the_pin_is_named_with_the_requirement_that_fixes_it():
    facts = machines.with_and_cuda(machines.h200(machines.tensorflow()))
    facts["libraries"]["libcudnn.so.9"].update(version="9.1.0", cuda="12.4", package="nvidia-cudnn-cu12 9.1.0.70")
    diagnosis = diagnose(facts)
    mismatch = finding(diagnosis, "library-version-mismatch")
    assert (mismatch.severity, mismatch.evidence["found"]["version"], mismatch.evidence["required"]["version"]) == (
        "error", "9.1.0", "9.3.0.75")
    assert mismatch.fix == "pip install 'nvidia-cudnn-cu12<10.0,>=9.3.0.75'"


def test_a_library_put_first_by_ld_library_path_is_fixed_there():
    facts = machines.with_and_cuda(machines.h200(machines.tensorflow(), LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu:/x"))
    facts["libraries"]["libcudnn.so.9"] = {"path": "/usr/lib/x86_64-linux-gnu/libcudnn.so.9.14.0", "error": None,
                                           "version": "9.14.0", "cuda": "13.0"}
    assert finding(diagnose(facts), "library-version-mismatch").fix.startswith(
        "export LD_LIBRARY_PATH=/x  # it puts /usr/lib/x86_64-linux-gnu first")


def test_platforms_conflicts_and_wsl():
    windows = machines.h200(machines.tensorflow())
    windows["platform"] = {"system": "Windows", "release": "11", "machine": "AMD64", "wsl": False}
    assert diagnose(windows).findings[0].code == "platform-without-gpu"
    both = machines.with_and_cuda(machines.h200(machines.tensorflow()))
    both["tensorflow"]["distributions"]["tensorflow-cpu"] = "2.21.0"
    conflict = finding(diagnose(both), "conflicting-tensorflow")
    assert conflict.fix == "pip uninstall -y tensorflow-cpu && pip install 'tensorflow[and-cuda]==2.21.0'"
    wsl = machines.h200(machines.tensorflow())
    wsl["platform"]["wsl"] = True
    wsl["libraries"]["libcuda.so.1"] = {"path": None, "error": "libcuda.so.1: cannot open", "version": None,
                                        "cuda": None}
    assert diagnose(wsl).findings[0].code == "wsl-libcuda-missing"


def test_a_gpu_on_the_pci_bus_without_a_driver_is_an_error():
    facts = machines.cpu_machine()
    facts["pci_gpus"] = ["0000:00:06.0"]
    diagnosis = diagnose(facts)
    assert not diagnosis.ok and finding(diagnosis, "no-driver").severity == "error"


def test_libraries_wanted_follow_tensorflows_requirements_and_run_path():
    wanted = _libraries.wanted(machines.REQUIRES_2_21, machines.FOLDERS_2_21)
    assert [w.soname for w in wanted] == ["libcudart.so.12", "libcublasLt.so.12", "libcublas.so.12", "libcufft.so.11",
                                          "libcusparse.so.12", "libcusolver.so.11", "libcudnn.so.9", "libnccl.so.2",
                                          "libcupti.so.12"]
    assert [w.soname for w in wanted if w.required] == [w.soname for w in wanted][:7]


@pytest.mark.parametrize("soname, calls, expected", [
    ("libcudnn.so.9", {"cudnnGetVersion": 91900, "cudnnGetCudartVersion": 13010}, ("9.19.0", "13.1")),
    ("libcudnn.so.8", {"cudnnGetVersion": 8907, "cudnnGetCudartVersion": 12020}, ("8.9.7", "12.2")),
    ("libcudart.so.12", {"cudaRuntimeGetVersion": 12050}, ("12.5", "12.5")),
    ("libcufft.so.11", {"cufftGetVersion": 11203}, ("11.2.3", None)),
    ("libcublasLt.so.12", {"cublasLtGetVersion": 120503}, ("12.5.3", None)),
    ("libnccl.so.2", {"ncclGetVersion": 22809}, ("2.28.9", None)),
    ("libcusparse.so.12", {"cusparseGetProperty": [12, 6, 3]}, ("12.6.3", None)),
    ("libnvJitLink.so.13", {"nvJitLinkVersion": [13, 0]}, ("13.0", None))])
def test_versions_as_libraries_encode_them(soname, calls, expected):
    assert _libraries.describe(soname, calls) == expected


# --- bad input ---------------------------------------------------------------------------------------------------

def doctor_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "tfplace", "doctor", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("content, says", [
    ("{not json", "not JSON"),
    ('{"format": "tfplace-doctor/1"}', "format 'tfplace-doctor/1' is not 'tfplace-machine/1'"),
    ('{"format": "tfplace-machine/1", "platform": {}}', "the key 'python' is missing"),
    ("[1]", "expected a JSON object")])
def test_bad_facts_exit_2_with_one_line_naming_the_file(tmp_path, content, says):
    path = tmp_path / "facts.json"
    path.write_text(content)
    done = doctor_cli(f"--facts={path}")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"tfplace doctor: error: {path}: ")
    assert says in done.stderr


def test_missing_facts_file_and_facts_with_run(tmp_path):
    done = doctor_cli(f"--facts={tmp_path / 'none.json'}")
    assert done.returncode == 2 and "cannot be read (FileNotFoundError" in done.stderr
    done = doctor_cli(f"--facts={tmp_path / 'none.json'}", "--run")
    assert done.returncode == 2 and "give one or the other" in done.stderr


def test_saved_facts_explained_elsewhere_and_as_json(tmp_path):
    path = tmp_path / "h200.json"
    _facts.save(machines.h200(machines.tensorflow()), path)
    done = doctor_cli(f"--facts={path}", "--json")
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    assert document["gpus_reported"] == 1 and "cuda-libraries-missing" in [f["code"] for f in document["findings"]]
    text = doctor_cli(f"--facts={path}")
    assert text.stdout.splitlines()[0] == document["summary"]
    assert text.stdout.splitlines()[1] == "fix: pip install 'tensorflow[and-cuda]==2.21.0'"


# --- probes that misbehave -----------------------------------------------------------------------------------------

def compile_library(tmp_path, name, body):
    source = tmp_path / f"{name}.c"
    source.write_text(body)
    target = tmp_path / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(target), str(source)], check=True)
    return target


def test_a_library_that_crashes_or_hangs_when_loaded_is_a_finding(tmp_path):
    compile_library(tmp_path, "libcrash.so.1", "#include <signal.h>\n"
                    "__attribute__((constructor)) static void boom(void) { raise(SIGSEGV); }\n")
    compile_library(tmp_path, "libhang.so.1", "#include <unistd.h>\n"
                    "__attribute__((constructor)) static void wait(void) { sleep(60); }\n")
    compile_library(tmp_path, "libcudart.so.99", "int cudaRuntimeGetVersion(int *v) { *v = 99010; return 0; }\n")
    found = _libraries.probe(["libcrash.so.1", "libcudart.so.99", "libhang.so.1"], [str(tmp_path)], limit=8)
    assert found["libcrash.so.1"]["error"] == "loading it crashed the process (SIGSEGV)"
    assert found["libcudart.so.99"] == {"path": str(tmp_path / "libcudart.so.99"), "error": None, "version": "99.1",
                                        "cuda": "99.1"}
    assert found["libhang.so.1"]["error"].startswith("loading it did not finish within")


def test_nvidia_smi_that_fails_or_hangs_gives_no_gpu_and_no_traceback(tmp_path):
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate' >&2\nexit 9\n")
    script.chmod(0o755)
    done = run_python("""
        from tfplace.machine import _facts
        from tfplace.machine._verdict import diagnose
        facts = _facts.read()
        report([facts.driver, list(facts.gpus), [f.to_json() for f in diagnose(facts).findings]])
    """, env={"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"})
    driver, gpus, findings = result_of(done)
    assert driver is None and gpus == [] and "Traceback" not in done.stderr
    said = next(f for f in findings if f["code"] == "driver-not-answering")
    assert said["severity"] == "warning"  # no driver version, no GPU on the bus: it cannot cost a GPU here
    assert said["message"] == ("the NVIDIA driver does not answer: nvidia-smi exited with status 9: NVIDIA-SMI has "
                               "failed because it could not communicate")
    assert said["fix"] is None  # "could not", not the driver's own "couldn't communicate with the NVIDIA driver"


# --- where users already are -----------------------------------------------------------------------------------------

FAKE_NVML = """
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = 2; return 0; }
"""


@pytest.fixture
def two_gpu_driver(tmp_path):
    """A machine whose driver reports two GPUs (NVML's library and nvidia-smi stand-ins) that TensorFlow here lists
    none of: the environment of a process."""
    compile_library(tmp_path, "libnvidia-ml.so.1", FAKE_NVML)
    script = tmp_path / "nvidia-smi"
    script.write_text(textwrap.dedent("""\
        #!/bin/sh
        case "$1" in
          --query-gpu=driver_version) echo 550.54.15;;
          --query-gpu=index*) printf '0, Tesla V100-SXM2-16GB, 16160, GPU-aa, 0, 7.0\\n'
                              printf '1, Tesla V100-SXM2-16GB, 16160, GPU-bb, 0, 7.0\\n';;
          *) echo '| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |';;
        esac
    """))
    script.chmod(0o755)
    return {"LD_LIBRARY_PATH": str(tmp_path), "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}


def test_configure_and_try_gpu_warn_once_with_the_verdict(two_gpu_driver):
    done = run_python("""
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import tfplace
            tfplace.configure(soft_placement=True)
            tfplace.try_gpu()
            tfplace.try_all_gpus()
        report([[w.category.__name__, str(w.message), w.filename] for w in caught
                if issubclass(w.category, tfplace.GpuUnusedWarning)])
    """, env=two_gpu_driver)
    caught = result_of(done)
    assert len(caught) == 1, caught
    category, message, filename = caught[0]
    assert category == "GpuUnusedWarning" and filename == "<string>"
    assert message.startswith("tfplace.configure(): GPUs: 2 reported by the driver, 0 used by TensorFlow: ")
    assert message.endswith("; run `tfplace doctor` for the fix")


def test_no_warning_where_cuda_visible_devices_chose_the_gpus(two_gpu_driver):
    done = run_python("""
        import warnings
        warnings.simplefilter("error")
        from tfplace.machine import _doctor
        report(_doctor.unused_reason(0))
    """, env={**two_gpu_driver, "CUDA_VISIBLE_DEVICES": "1"})
    assert result_of(done) is not None  # tensorflow-cpu still leaves the chosen GPU unused
    assert "is a build without CUDA" in result_of(done)


def test_requires_gpu_skips_with_the_verdict(pytester, two_gpu_driver, monkeypatch):
    for name, value in two_gpu_driver.items():
        monkeypatch.setenv(name, value)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.requires_gpu
        def test_needs_a_gpu():
            pass
    """)
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*requires_gpu(n=1): it needs 1 GPU(s), 0 visible; GPUs: 2 reported by the driver, "
                                 "0 used by TensorFlow: tensorflow-cpu * is a build without CUDA*"])


def test_env_prints_the_verdict_line_first():
    done = subprocess.run([sys.executable, "-m", "tfplace", "env"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == ("GPUs: 0 reported by the driver (no NVIDIA driver), 0 used by TensorFlow: "
                                           "it runs on the CPU")


def test_doctor_on_this_machine_reads_tensorflow_in_a_child_only():
    done = run_python("""
        import sys
        import tfplace
        diagnosis = tfplace.doctor()
        report([diagnosis.ok, diagnosis.gpus_reported, "tensorflow" in sys.modules,
                diagnosis.facts["tensorflow_view"]["gpus"], diagnosis.summary,
                diagnosis.facts["platform"]["container"]])
    """)
    ok, reported, imported, listed, summary, container = result_of(done)
    assert ok and reported == 0 and listed == [] and not imported
    here = (f"this {container} container was started without GPU access (no /dev/nvidia*, no libcuda.so.1)"
            if container else "no NVIDIA GPU here")  # a CI machine may be a container
    assert summary == f"GPUs: 0 reported by the driver, 0 used by TensorFlow: {here}, TensorFlow runs on the CPU"


def test_save_here_then_explain_the_saved_facts(tmp_path):
    path = tmp_path / "here.json"
    saved = doctor_cli(f"--save={path}")
    assert saved.returncode == 0, saved.stderr
    assert saved.stdout.splitlines()[-1] == (f"facts saved to {path} (explain them anywhere: "
                                             f"tfplace doctor --facts={path})")
    facts = _facts.load(path)
    assert facts.tensorflow_view is not None and facts.tensorflow_view.gpus == () and facts.tensorflow.distributions
    explained = doctor_cli(f"--facts={path}")
    assert explained.returncode == 0 and explained.stdout.splitlines()[0] == saved.stdout.splitlines()[0]
