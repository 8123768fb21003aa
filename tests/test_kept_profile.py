"""Kept profiles read as data: `tfplace.read_profile` and `tfplace profile`, checked on a real H200 profile against
XProf's own reading of it (tests/fixtures/gpu/README.md) and on profiles TensorFlow writes here."""

import json
import os
import statistics
import subprocess
import sys

import pytest

from conftest import ROOT
from xspace import Plane

H200 = os.path.join(ROOT, "tests", "fixtures", "gpu", "h200_jax_steps.xplane.pb")
# What XProf 2.24.2 reads from it (the fixture's README): its overview page's median step over its 10 steps and its
# device compute per step; its memory profile's peaks per allocator.
XPROF_MEDIAN_MS = 37.43
XPROF_DEVICE_COMPUTE_MS = 4.42
XPROF_PEAKS = {"GPU_0_bfc": 301_992_960, "xla_gpu_host_bfc": 67_108_864}


def test_the_h200_profile_reads_as_xprof_reads_it():
    import tfplace

    profile = tfplace.read_profile(H200)
    steps = profile.steps()
    assert (steps.count, steps.warmup, steps.kind, steps.name) == (12, 0, "marked", "train")
    # XProf times a step to its device work's end, tfplace to its marker's end: medians within 1 %
    assert steps.median_us / 1000 == pytest.approx(XPROF_MEDIAN_MS, rel=0.01)
    assert statistics.median(s.wall_us for s in steps.steps) == steps.median_us
    gpu = steps.gpus["/device:GPU:0"]
    assert gpu["h2d_bytes"] == 64 * 2 ** 20 and gpu["pinned_bytes"] == 64 * 2 ** 20  # each step's host copy
    assert (gpu["compute_us"] + gpu["h2d_us"]) / 1000 == pytest.approx(XPROF_DEVICE_COMPUTE_MS, rel=0.05)
    assert steps.shares["host"] == pytest.approx(0.882, abs=0.01)  # XProf's "other" (host) 88.2 %
    assert "tfplace trace --timing" in steps.reason  # no placement records: the user's lines are unknown
    memory = profile.memory()
    assert {a.allocator: a.peak_bytes for a in memory.allocators} == XPROF_PEAKS
    assert {a.allocator: a.devices for a in memory.allocators} == {"GPU_0_bfc": ("/device:GPU:0",),
                                                                   "xla_gpu_host_bfc": ("/device:CPU:0",)}


def test_the_profile_command_prints_and_writes_json(tmp_path):
    out = tmp_path / "profile.json"
    ran = subprocess.run([sys.executable, "-m", "tfplace", "profile", H200, f"--json={out}"], capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] == f"tfplace profile: {H200}"
    assert lines[1].startswith("steps: 12 x 37.3 ms median") and "(marked train)" in lines[1]
    assert any(line.startswith("  GPU:0 per step: kernels 3.1 ms") and "pinned 64.0 MiB" in line for line in lines)
    assert "  allocator GPU_0_bfc (/device:GPU:0): peak 288.0 MiB" in lines
    data = json.loads(out.read_text())
    assert data["steps"]["count"] == 12 and data["paths"] == [H200]
    assert {a["allocator"]: a["peak_bytes"] for a in data["memory"]["allocators"]} == XPROF_PEAKS


@pytest.mark.parametrize("path, said", [("missing", "no such file or folder"), ("empty", "no *.xplane.pb file"),
                                        ("text.xplane.pb", "could not read"), ("notes.txt", "not a profile")])
def test_what_is_not_a_profile_is_named(tmp_path, path, said):
    (tmp_path / "empty").mkdir()
    (tmp_path / "text.xplane.pb").write_bytes(b"\xff not a protobuf \xff" * 8)
    (tmp_path / "notes.txt").write_text("notes")
    ran = subprocess.run([sys.executable, "-m", "tfplace", "profile", str(tmp_path / path)], capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 2 and ran.stdout == ""
    assert said in ran.stderr and str(tmp_path / path) in ran.stderr


def test_a_folder_gives_its_latest_run(tmp_path):
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    import tfplace

    for run, steps in (("2026_01_01_00_00_00", 3), ("2026_02_01_00_00_00", 5)):
        space = xplane_pb2.XSpace()
        host = Plane(space, "/host:CPU")
        line = host.line("python")
        for i in range(steps):
            host.event(line, "train", 1000 * i, 900, step_num=i)
        folder = tmp_path / "train" / "plugins" / "profile" / run
        folder.mkdir(parents=True)
        (folder / "host.xplane.pb").write_bytes(space.SerializeToString())
    profile = tfplace.read_profile(str(tmp_path / "train"))
    latest = tmp_path / "train" / "plugins" / "profile" / "2026_02_01_00_00_00"
    assert profile.paths == (str(latest / "host.xplane.pb"),)
    assert profile.steps().count == 5 and profile.steps().median_us == 900.0
    assert profile.memory().allocators == () and "no allocator events" in profile.memory().note


def test_a_gpu_plane_in_a_cluster_task_names_the_tasks_gpu(python, tmp_path):
    """In a task of a cluster, `/device:GPU:0`'s plane is that task's GPU: one canonical name with the copies and
    kernels the capture's records give under `/job:worker/replica:0/task:1/...`."""
    config = {"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 1}}
    found = python(f"""
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
        import sys
        sys.path.insert(0, {os.path.join(ROOT, "tests")!r})
        from xspace import Plane
        from tfplace.placement.profile import _xspace
        space = xplane_pb2.XSpace()
        gpu = Plane(space, "/device:GPU:0")
        stream = gpu.line("Stream #7(Kernel,MemcpyH2D)")
        gpu.event(stream, "sgemm", 0, 250, kernel_details="regs:64", tf_op="MatMul:MatMul")
        gpu.event(stream, "MemcpyH2D", 300, 100, memcpy_details="kind_src:pinned kind_dst:device size:64 dest:0")
        timing = _xspace.read_xspace(space)
        report({{"devices": sorted(timing.devices), "transfers": sorted(map(list, timing.transfers)),
                 "copies": [c.device for c in timing.steps.host_copies]}})
    """, env={**os.environ, "TF_CONFIG": json.dumps(config)})
    gpu, cpu = "/job:worker/replica:0/task:1/device:GPU:0", "/job:worker/replica:0/task:1/device:CPU:0"
    assert found == {"devices": [gpu], "transfers": [[cpu, gpu]], "copies": [gpu]}


def test_the_h200_profile_gives_each_devices_peak_and_what_it_held():
    import tfplace

    memory = tfplace.read_profile(H200).memory()
    gpu = memory.devices["/device:GPU:0"]
    # requested bytes: the allocator's own peak counts its chunks (requests rounded up)
    assert 288 * 2 ** 20 <= gpu.peak_bytes <= XPROF_PEAKS["GPU_0_bfc"]
    assert sum(row.bytes for row in gpu.at_peak) == gpu.peak_bytes
    assert gpu.allocator_peak_bytes == XPROF_PEAKS["GPU_0_bfc"] and gpu.coverage == ""
    assert {row.kind for row in gpu.at_peak} <= {"before", "returned", "intermediate"}
    assert memory.devices["/device:CPU:0"].peak_bytes == 64 * 2 ** 20  # pinned host memory, on the host


def test_a_tensorflow_gpu_profile_names_the_nodes_held_at_the_peak(tmp_path):
    """XSpace in TensorFlow's GPU schema: `GPU_0_bfc` events on the host plane naming their node (`tf_op`),
    frees by address; one step's function call holds an activation and its gradient at the peak."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from xspace import Plane
    import tfplace

    space = xplane_pb2.XSpace()
    host = Plane(space, "/host:CPU")
    python, compute = host.line("python"), host.line("tf_Compute/1")
    host.event(python, "EagerLocalExecute: __inference_train_step_9", 100, 800)
    in_use = 2 ** 20  # what the allocator held before

    def allocate(at, node, size, address, shape):
        nonlocal in_use
        in_use += size
        host.event(compute, "MemoryAllocation", at, 0, allocator_name="GPU_0_bfc", bytes_allocated=in_use,
                   bytes_reserved=0, peak_bytes_in_use=in_use, requested_bytes=size, allocation_bytes=size,
                   addr=address, tf_op=node, region_type="output", data_type=1, shape=shape)

    def free(at, size, address):
        nonlocal in_use
        in_use -= size
        host.event(compute, "MemoryDeallocation", at, 0, allocator_name="GPU_0_bfc", bytes_allocated=in_use,
                   bytes_reserved=0, peak_bytes_in_use=in_use, requested_bytes=size, allocation_bytes=size,
                   addr=address)

    allocate(200, "model/wide/Relu", 8 * 2 ** 20, 0x10, "[512,4096]")
    allocate(300, "gradient_tape/model/wide/ReluGrad", 8 * 2 ** 20, 0x20, "[512,4096]")
    free(400, 8 * 2 ** 20, 0x20)
    free(500, 8 * 2 ** 20, 0x10)
    (tmp_path / "gpu.xplane.pb").write_bytes(space.SerializeToString())
    gpu = tfplace.read_profile(str(tmp_path / "gpu.xplane.pb")).memory().devices["/device:GPU:0"]
    assert gpu.peak_bytes == 17 * 2 ** 20 and gpu.live_bytes == 2 ** 20
    assert [(row.kind, row.node, row.bytes, row.dtype, row.shape) for row in gpu.at_peak] == [
        ("intermediate", "gradient_tape/model/wide/ReluGrad", 8 * 2 ** 20, "float32", (512, 4096)),
        ("intermediate", "model/wide/Relu", 8 * 2 ** 20, "float32", (512, 4096)),
        ("before", "", 2 ** 20, "", ())]
    assert gpu.peak_node == "gradient_tape/model/wide/ReluGrad at an unknown line"
