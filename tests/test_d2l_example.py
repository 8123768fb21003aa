"""d2l's GPUs chapter example: each step's records, copies and values from its --report."""

import json
import subprocess
import sys

import pytest

from conftest import ROOT

# slow tier: the example scripts, each a whole program
pytestmark = [pytest.mark.placement, pytest.mark.slow]  # reads where ops ran: CI runs it again with oneDNN off


def run(tmp_path, *args):
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "d2l_gpus.py"), f"--report={report}", *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(report.read_text()), done.stdout


@pytest.mark.parametrize("count", [1, 2, 4])
def test_steps_on_logical_cpus(tmp_path, count):
    report, stdout = run(tmp_path, f"--logical_cpus={count}")
    second = "/device:CPU:1" if count > 1 else "/device:CPU:0"
    assert ["RandomUniform", second, "execute"] in report["storage"]["records"]
    assert report["storage"]["X"] == ["/device:CPU:0"] and report["storage"]["Y"] == [second]
    assert ["AddV2", second, "execute"] in report["copying"]["records"]
    assert report["copying"]["same"] is True and report["copying"]["Z"] == [second]
    flat = [v for row_ in report["copying"]["total"] for v in row_]
    assert flat == pytest.approx([v for row_ in report["copying"]["expected"] for v in row_])
    assert report["network"]["weights"] == [f"/device:CPU:{i}" for i in range(count)]
    assert report["network"]["strategy"] == ("MirroredStrategy" if count > 1 else "OneDeviceStrategy")
    assert "Traceback" not in stdout


def test_explicit_policy_refuses_the_uncopied_sum(tmp_path):
    report, _ = run(tmp_path, "--logical_cpus=2", "--device_policy=explicit")
    assert report["uncopied"]["refused"].startswith("Tensors on conflicting devices: cannot compute AddV2")
    assert not any(op == "AddV2" and kind == "execute" for op, _, kind in report["uncopied"]["records"])


def test_warn_policy_reports_the_copy(tmp_path):
    report, _ = run(tmp_path, "--logical_cpus=2", "--device_policy=warn")
    assert report["uncopied"]["copies"] == [["AddV2", 0, "/device:CPU:0", "/device:CPU:1"]]
    assert ["AddV2", "/device:CPU:1", "execute"] in report["uncopied"]["records"]
