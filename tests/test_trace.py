"""`tfplace trace`: a script run under a capture, its report, JSON, plot and usage errors."""

import json
import subprocess
import sys

import pytest

from tfplace import kernels
from tfplace.placement_log import PlacementLog
from tfplace.records import CopyRecord, PlacementRecord
from tfplace.trace import report

SCRIPT = """\
import sys
import tensorflow as tf
print("argv", sys.argv[1:], flush=True)
with tf.device("CPU:0"):
    x = tf.ones((2, 2))
with tf.device("CPU:1"):
    y = tf.ones((2, 2))
    for _ in range(3):
        z = x + y
sys.exit(3)
"""


def trace(*args, cwd):
    return subprocess.run([sys.executable, "-m", "tfplace", "trace", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_trace_keeps_argv_and_exit_status_and_names_the_copy(tmp_path):
    (tmp_path / "script.py").write_text(SCRIPT)
    done = trace("--logical_cpus=2", "--json=out.json", "script.py", "a", "--b", cwd=tmp_path)
    assert done.returncode == 3, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "argv ['a', '--b']"  # the script's own output comes first
    assert lines[1].startswith("== tfplace trace:")
    assert "  script.py:9  x3  AddV2 input #0 /device:CPU:0 -> /device:CPU:1" in lines
    assert "  /device:CPU:1  4 op(s): AddV2 3, Fill 1" in lines
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["exit_status"] == 3 and data["args"] == ["a", "--b"]
    assert {"op": "AddV2", "name": "", "device": "/device:CPU:1", "kind": "execute", "source": "script.py:9"} \
        in data["records"]
    assert data["copies"][0] == {"op": "AddV2", "input_index": 0, "from_device": "/device:CPU:0",
                                 "to_device": "/device:CPU:1", "source": "script.py:9"}


def test_uncaught_exception_keeps_its_traceback_and_status(tmp_path):
    (tmp_path / "boom.py").write_text("import tensorflow as tf\ntf.ones(1)\nraise ValueError('boom')\n")
    done = trace("boom.py", cwd=tmp_path)
    assert done.returncode == 1
    assert 'File "' in done.stderr and "boom.py\", line 3" in done.stderr and "ValueError: boom" in done.stderr
    assert "runpy" not in done.stderr
    assert "== tfplace trace: 1 op placement(s)" in done.stdout


def test_usage_errors_and_the_separator(tmp_path):
    (tmp_path / "args.py").write_text("import sys\nprint(sys.argv[1:])\n")
    missing = trace("nowhere.py", cwd=tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "script 'nowhere.py' (from argument script) is not a file" in missing.stderr
    late = trace("args.py", "--logical_cpus=2", cwd=tmp_path)
    assert late.returncode == 2
    assert "'--logical_cpus=2' comes after the script 'args.py'" in late.stderr
    assert "tfplace trace --logical_cpus=2 args.py" in late.stderr
    passed = trace("args.py", "--", "--json=mine", cwd=tmp_path)
    assert passed.returncode == 0 and passed.stdout.splitlines()[0] == "['--json=mine']"


def test_plot_draws_a_png_or_says_what_is_missing(tmp_path):
    (tmp_path / "small.py").write_text("import tensorflow as tf\ntf.ones(2) * 2.0\n")
    code = ("import sys\nsys.modules['matplotlib'] = None\nfrom tfplace.cli import main\n"
            "sys.exit(main(['trace', '--plot=p.png', 'small.py']))")
    missing = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert missing.returncode == 2 and "--plot needs matplotlib" in missing.stderr
    pytest.importorskip("matplotlib")
    done = trace("--plot=p.png", "small.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_groups_cpu_ops_by_line_and_says_whether_a_gpu_kernel_exists(monkeypatch):
    monkeypatch.setattr(kernels, "device_types", lambda op: frozenset({"CPU", "GPU"} if op == "Cast" else {"CPU"}))
    log = PlacementLog(
        [PlacementRecord("Cast", "", "/device:CPU:0", "execute", "train.py:12")] * 2 + [
            PlacementRecord("MatMul", "", "/device:GPU:0", "execute", "train.py:13"),
            PlacementRecord("DecodeJpeg", "", "/device:CPU:0", "execute", "data.py:4"),
            PlacementRecord("StringFormat", "fmt", "/device:CPU:0", "place")],
        [CopyRecord("AddV2", 1, "/device:CPU:0", "/device:GPU:0", "train.py:20")] * 3 + [
            CopyRecord("Mul", 0, "/device:GPU:1", "/device:GPU:0", "train.py:30")])
    text = report(log, gpus_visible=True, top=10).splitlines()
    cpu = text.index("ops on the CPU while a GPU was visible:")
    assert text[cpu + 1:cpu + 4] == [
        "  train.py:12  Cast x2 (has a GPU kernel)",
        "  data.py:4  DecodeJpeg x1 (has no GPU kernel)",
        "  inside a function (node fmt)  StringFormat x1 (has no GPU kernel)"]
    copies = text.index("implicit copies (most frequent first):")
    assert text[copies + 1:] == ["  train.py:20  x3  AddV2 input #1 /device:CPU:0 -> /device:GPU:0",
                                 "  train.py:30  x1  Mul input #0 /device:GPU:1 -> /device:GPU:0"]
    short = report(log, gpus_visible=True, top=1).splitlines()
    assert short[short.index("implicit copies (most frequent first):") + 2] == "  ... and 1 more"
