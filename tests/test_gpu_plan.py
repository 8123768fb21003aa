"""GPU planning over recorded inventories, the inventory readers and the thin apply layer."""

import types

import pytest

from tfplace import ConfigurationError
from tfplace._tensorflow import apply_gpus, set_logical_cpus
from tfplace.machine._gpus import map_cuda_visible, parse_nvidia_smi
from tfplace.config._gpu_plan import GpuInfo, GpuPlan, plan_gpus

# d2l's GPU chapter machine (nvidia-smi in seeds/003): 8 x Tesla V100-SXM2-16GB, 16160 MiB each.
V100S = [GpuInfo(i, "Tesla V100-SXM2-16GB", 16160) for i in range(8)]
MIXED = [GpuInfo(0, "Tesla T4", 15360), GpuInfo(1, "NVIDIA A100-SXM4-40GB", 40960)]


def test_fraction_on_eight_v100s():
    plan = plan_gpus(V100S, memory_fraction=0.4)
    assert plan.visible == tuple(range(8))
    assert plan.memory_limits == ((6464,),) * 8
    assert plan.memory_growth is None


def test_fraction_uses_each_gpus_own_total_on_a_mixed_machine():
    plan = plan_gpus(MIXED, memory_fraction=0.5)
    assert plan.memory_limits == ((7680,), (20480,))


def test_limit_and_logical_gpus_apply_to_each_logical_device():
    assert plan_gpus(MIXED, memory_limit_mb=4096, logical_gpus=2).memory_limits == ((4096, 4096), (4096, 4096))
    assert plan_gpus(MIXED, logical_gpus=2).memory_limits == ((7680, 7680), (20480, 20480))


def test_visible_subset_and_growth():
    plan = plan_gpus(V100S, visible_gpus=[3, 1], memory_growth=True)
    assert plan == GpuPlan((3, 1), True, ((), ()))


def test_visible_gpu_that_does_not_exist():
    with pytest.raises(ConfigurationError) as err:
        plan_gpus(MIXED, visible_gpus=[5], sources={"visible_gpus": "flag --visible_gpus"})
    assert "visible_gpus=[5] (from flag --visible_gpus)" in str(err.value)
    assert "2 GPU(s) with indices [0, 1]" in str(err.value)
    with pytest.raises(ConfigurationError, match="this machine has 0 GPU"):
        plan_gpus([], visible_gpus=[0])


def test_cap_larger_than_a_gpu():
    with pytest.raises(ConfigurationError, match=r"GPU 0 \(Tesla T4\)'s 15360 MiB.*at most 7680 MiB"):
        plan_gpus(MIXED, memory_limit_mb=8000, logical_gpus=2)


def test_fraction_needs_known_memory():
    with pytest.raises(ConfigurationError, match="give memory_limit_mb instead"):
        plan_gpus([GpuInfo(0, "GPU", None)], memory_fraction=0.5)
    assert plan_gpus([GpuInfo(0, "GPU", None)], memory_limit_mb=100).memory_limits == ((100,),)


def test_parse_recorded_nvidia_smi_and_cuda_visible_devices():
    text = "".join(f"{i}, Tesla V100-SXM2-16GB, 16160, GPU-{i}aaa, {i}\n" for i in range(8))
    gpus = parse_nvidia_smi(text)
    assert gpus == [GpuInfo(i, "Tesla V100-SXM2-16GB", 16160, f"GPU-{i}aaa", i) for i in range(8)]
    assert parse_nvidia_smi("0, Tesla T4, [N/A], GPU-x, [N/A]\nNo devices were found\n") == [
        GpuInfo(0, "Tesla T4", None, "GPU-x", None)]
    mapped = map_cuda_visible(gpus, "6,GPU-2a")
    assert [(g.index, g.uuid) for g in mapped] == [(0, "GPU-6aaa"), (1, "GPU-2aaa")]
    assert [g.uuid for g in map_cuda_visible(gpus, "1,99,2")] == ["GPU-1aaa"]  # CUDA stops at a bad entry
    assert map_cuda_visible(gpus, "") == []
    assert map_cuda_visible(gpus, None) == gpus


class _FakeConfig:
    """Records the tf.config calls of the apply layer on a fake 2-GPU machine."""

    def __init__(self):
        self.calls = []
        self.experimental = types.SimpleNamespace(
            set_memory_growth=lambda gpu, value: self.calls.append(("growth", gpu, value)))

    def list_physical_devices(self, kind):
        return ["gpu0", "gpu1"] if kind == "GPU" else ["cpu0"]

    def set_visible_devices(self, devices, kind):
        self.calls.append(("visible", devices, kind))

    def set_logical_device_configuration(self, device, configs):
        self.calls.append(("logical", device, configs))

    @staticmethod
    def LogicalDeviceConfiguration(memory_limit=None):  # noqa: N802 (tf.config's name)
        return ("config", memory_limit)


def test_apply_layer_calls_tf_config():
    fake = _FakeConfig()
    plan = plan_gpus(MIXED[:1] + [GpuInfo(1, "T4", 15360)], visible_gpus=[1], memory_limit_mb=1024)
    apply_gpus(plan.visible, plan.memory_growth, plan.memory_limits, fake)
    set_logical_cpus(3, fake)
    assert fake.calls == [
        ("visible", ["gpu1"], "GPU"),
        ("logical", "gpu1", [("config", 1024)]),
        ("logical", "cpu0", [("config", None)] * 3),
    ]
    fake = _FakeConfig()
    plan = plan_gpus(MIXED, memory_growth=True)
    apply_gpus(plan.visible, plan.memory_growth, plan.memory_limits, fake)
    assert fake.calls == [("visible", ["gpu0", "gpu1"], "GPU"), ("growth", "gpu0", True), ("growth", "gpu1", True)]
