"""The GPU inventory through NVML and nvidia-smi, with stand-ins for both (no GPU, no TensorFlow)."""

import os
import sys
import types

import pytest

from tfplace import GpuInfo
from tfplace.machine import _gpus as _gpu_inventory


class NVMLError(Exception):
    pass


def fake_nvml(gpus, *, fail_init=False, calls=None):
    """A `pynvml` stand-in serving `gpus` as (name, total MiB, uuid, used MiB)."""
    calls = [] if calls is None else calls
    module = types.ModuleType("pynvml")
    module.NVMLError = NVMLError

    def init():
        calls.append("init")
        if fail_init:
            raise NVMLError("NVML Shared Library Not Found")

    module.nvmlInit = init
    module.nvmlShutdown = lambda: calls.append("shutdown")
    module.nvmlDeviceGetCount = lambda: len(gpus)
    module.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]
    module.nvmlDeviceGetName = lambda g: g[0].encode()
    module.nvmlDeviceGetUUID = lambda g: g[2]
    module.nvmlDeviceGetMemoryInfo = lambda g: types.SimpleNamespace(total=g[1] << 20, used=g[3] << 20)
    module.nvmlSystemGetDriverVersion = lambda: b"535.104.05"
    return module


def fake_nvidia_smi(tmp_path, monkeypatch, output):
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\ncase \"$1\" in --query-gpu=driver_version) echo 550.54.15;; "
                      f"*) printf '{output}';; esac\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


V100S = [("Tesla V100-SXM2-16GB", 16160, "GPU-aa", 310), ("Tesla V100-SXM2-16GB", 16160, "GPU-bb", 0)]


def test_nvml_names_memory_in_tensorflow_numbering_and_shuts_down(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(V100S, calls=calls))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert _gpu_inventory.read_gpus(1) == [GpuInfo(0, "Tesla V100-SXM2-16GB", 16160, "GPU-bb", 0)]
    assert _gpu_inventory.driver_version() == "535.104.05"
    assert calls == ["init", "shutdown"] * 2


def test_nvidia_smi_answers_when_nvml_cannot_start(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(V100S, fail_init=True))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_nvidia_smi(tmp_path, monkeypatch, "0, Tesla T4, 15360, GPU-cc, 5\\n1, Tesla T4, 15360, GPU-dd, 7\\n")
    assert [(g.index, g.name, g.total_mib, g.used_mib) for g in _gpu_inventory.read_gpus(2)] == [
        (0, "Tesla T4", 15360, 5), (1, "Tesla T4", 15360, 7)]
    assert _gpu_inventory.driver_version() == "550.54.15"


def test_without_nvml_or_nvidia_smi_memory_is_unknown(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    monkeypatch.setenv("PATH", str(tmp_path))
    assert _gpu_inventory.read_gpus(2) == [GpuInfo(0, "GPU", None), GpuInfo(1, "GPU", None)]
    assert _gpu_inventory.driver_version() is None
    assert _gpu_inventory.read_gpus(0) == []


@pytest.mark.parametrize("visible, expected", [("1,0", ["GPU-bb", "GPU-aa"]), ("GPU-b", ["GPU-bb"]),
                                               ("0,7,1", ["GPU-aa"])])
def test_cuda_visible_devices_renumbers_the_driver_gpus(visible, expected):
    driver = [GpuInfo(i, name, total, uuid, used) for i, (name, total, uuid, used) in enumerate(V100S)]
    mapped = _gpu_inventory.map_cuda_visible(driver, visible)
    assert [g.uuid for g in mapped] == expected and [g.index for g in mapped] == list(range(len(expected)))
