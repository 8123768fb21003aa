"""The GPU guide example: its printed placement lines, read back as records, on 1, 2 and 4 logical CPUs."""

import subprocess
import sys

import pytest

from conftest import ROOT
from tfplace import PlacementLog
from tfplace.placement.records._parsing import parse_placement

# slow tier: the example scripts, each a whole program
pytestmark = [pytest.mark.placement, pytest.mark.slow]  # reads where ops ran: CI runs it again with oneDNN off


def run_guide(*args: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "gpu_guide.py"), *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def sections(output: str) -> dict[str, str]:
    parts = output.split("\n== ")
    return {part.split("\n", 1)[0]: part.split("\n", 1)[1] for part in parts[1:]}


def executed(text: str) -> list[tuple[str, str]]:
    return [(r.op, r.device) for r in PlacementLog.from_text(text).records if r.kind == "execute"]


@pytest.fixture(scope="module", params=[1, 2, 4])
def guide(request):
    return request.param, sections(run_guide(f"--logical_cpus={request.param}"))


def test_log_and_soft_placement_sections(guide):
    count, out = guide
    gpu2 = "/device:CPU:2" if count > 2 else "/device:CPU:0"  # soft placement falls back to CPU:0
    for name, where in (("log_placement", "/device:CPU:0"), ("soft_placement", gpu2)):
        assert executed(out[name]) == [("MatMul", where)]
        assert "[[22. 28.]\n [49. 64.]]" in out[name]
    assert ("MatMul", "/device:CPU:0") in executed(out["manual_placement"])


def test_single_gpu_section(guide):
    count, out = guide
    if count > 2:  # GPU:2's stand-in exists: the guide's 4-GPU output
        assert executed(out["single_gpu"])[-1] == ("MatMul", "/device:CPU:2")
    else:
        assert "/device:CPU:2 does not exist and soft placement is off" in out["single_gpu"]
        assert "Traceback" not in out["single_gpu"]


def test_manual_replication_section(guide):
    count, out = guide
    matmuls = [d for op, d in executed(out["manual_replication"]) if op == "MatMul"]
    assert matmuls == [f"/device:CPU:{i}" for i in range(count)]
    # tf.add_n of a single tensor returns it without running AddN.
    assert (executed(out["manual_replication"])[-1] == ("AddN", "/device:CPU:0")) == (count > 1)
    value = {1: "[[22. 28.]\n [49. 64.]]", 2: "[[ 44.  56.]\n [ 98. 128.]]", 4: "[[ 88. 112.]\n [196. 256.]]"}
    assert value[count] in out["manual_replication"]


def test_manual_replication_under_the_explicit_policy_copies_explicitly():
    out = sections(run_guide("--logical_cpus=2", "--device_policy=explicit",
                             "--section=manual_replication"))["manual_replication"]
    # CPU:1's product is copied to CPU:0 (Identity), then summed there; CPU:0's is used as it is.
    assert executed(out) == [("MatMul", "/device:CPU:0"), ("MatMul", "/device:CPU:1"),
                             ("Identity", "/device:CPU:0"), ("AddN", "/device:CPU:0")]
    assert "--device_policy=explicit: 1 product(s) copied to /device:CPU:0 with tfplace.to_device" in out
    assert "[[ 44.  56.]\n [ 98. 128.]]" in out


def test_mirrored_strategy_section(guide):
    count, out = guide
    devices = {d for op, d in executed(out["mirrored_strategy"]) if op == "VarHandleOp"}
    assert devices == {f"/device:CPU:{i}" for i in range(count)}
    strategy = "MirroredStrategy" if count > 1 else "OneDeviceStrategy"
    assert f"Using {strategy} with devices" in out["mirrored_strategy"]


def test_memory_sections(guide):
    _, out = guide
    assert "caps each GPU at 6464 MiB" in out["memory_limit"]
    assert "RuntimeInitializedError: TensorFlow's runtime has already started" in out["memory_limit"]
    assert "memory growth on GPUs [0, 1, 2, 3, 4, 5, 6, 7]" in out["memory_growth"]


def test_log_placement_flag_shows_tensorflows_own_lines():
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "gpu_guide.py"), "--logical_cpus=2",
                           "--section=log_placement", "--log_placement"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    own = [r for r in parse_placement(done.stderr).records if r.kind == "execute"]  # every line TensorFlow printed
    assert [(r.op, r.device) for r in own][-3:] == ([("_EagerConst", "/device:CPU:0")] * 2
                                                    + [("MatMul", "/device:CPU:0")])
    assert executed(done.stdout) == [("MatMul", "/device:CPU:0")]  # the records, as without the flag


def test_help_lists_tfplace_flags():
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "gpu_guide.py"), "--help"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert "--logical_cpus" in done.stdout and "--memory_fraction" in done.stdout and "--section" in done.stdout
