"""`tfplace trace`: a script run under a capture, its report, JSON, plot and usage errors."""

import fnmatch
import json
import os
import subprocess
import sys

import pytest

from tfplace.cli._trace import Findings, plot, report
from tfplace.placement.api._log import PlacementLog
from tfplace.placement.records._records import CopyRecord, PlacementRecord

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


def trace(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "tfplace", "trace", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env)


@pytest.mark.placement
def test_trace_keeps_argv_and_exit_status_and_names_the_copy(tmp_path):
    (tmp_path / "script.py").write_text(SCRIPT)
    done = trace("--logical_cpus=2", "--json=out.json", "script.py", "a", "--b", cwd=tmp_path)
    assert done.returncode == 3, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "argv ['a', '--b']"  # the script's own output comes first
    assert lines[1].startswith("== tfplace trace:")
    assert "    script.py:9  x3  48 B  AddV2 input #0 CPU:0 -> CPU:1, 16 B each" in lines
    assert "  /device:CPU:1  2 compute op type(s): AddV2 3, Fill 1" in lines
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["exit_status"] == 3 and data["args"] == ["a", "--b"]
    assert {"op": "AddV2", "name": "", "device": "/device:CPU:1", "kind": "execute", "source": "script.py:9",
            "requested": "/device:CPU:1"} in [{k: r[k] for k in ("op", "name", "device", "kind", "source", "requested")}
                                              for r in data["records"]]
    assert {k: v for k, v in data["copies"][0].items() if k not in ("line", "count")} == {
        "op": "AddV2", "input_index": 0, "from_device": "/device:CPU:0", "to_device": "/device:CPU:1",
        "source": "script.py:9", "kind": "eager", "function": "", "node": "", "tensor": "", "dtype": "float32",
        "bytes": 16, "call": "", "in_loop": False}


def test_uncaught_exception_keeps_its_traceback_and_status(tmp_path):
    (tmp_path / "boom.py").write_text("import tensorflow as tf\ntf.ones(1)\nraise ValueError('boom')\n")
    done = trace("boom.py", cwd=tmp_path)
    assert done.returncode == 1
    assert 'File "' in done.stderr and "boom.py\", line 3" in done.stderr and "ValueError: boom" in done.stderr
    assert "runpy" not in done.stderr
    assert "== tfplace trace: 1 op placement(s) (eager ops run, function nodes placed: each once)" in done.stdout


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


def test_boolean_flags_never_take_the_script_as_their_value(tmp_path):
    (tmp_path / "soft.py").write_text("import sys, tensorflow as tf\n"
                                      "print(sys.argv[1:], tf.config.get_soft_device_placement())\n")
    done = trace("--soft_placement", "soft.py", "a", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0] == "['a'] True"
    done = trace("--soft_placement=false", "soft.py", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.splitlines()[0] == "[] False"
    done = trace("--soft_placement", "--nosoft_placement", "soft.py", "--soft_placement", cwd=tmp_path)
    assert done.returncode == 2 and "'--soft_placement' comes after the script 'soft.py'" in done.stderr
    done = trace("--soft_placement=maybe", "soft.py", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == (
        "tfplace trace: error: soft_placement='maybe' (from option --soft_placement) cannot be read as "
        "soft_placement: expected True or False")


def test_output_paths_are_checked_before_the_script_runs(tmp_path):
    (tmp_path / "ran.py").write_text("open('ran.txt', 'w').close()\n")
    (tmp_path / "folder").mkdir()
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    expected = {
        "--json=missing/out.json": "--json='missing/out.json' (from option --json) cannot be written: its folder "
                                   "'missing' does not exist; allowed is a file in an existing folder",
        "--json=folder": "--json='folder' (from option --json) cannot be written: 'folder' is a folder; "
                         "allowed is a file path",
        "--json=": "--json='' (from option --json) cannot be written: it is empty; allowed is a file path",
        "--json=ran.py": "--json='ran.py' (from option --json) cannot be written: it is the script 'ran.py', "
                         "which it would overwrite",
        "--plot=out.xyz": "--plot='out.xyz' (from option --plot) cannot be written: matplotlib cannot write .xyz: "
                          "allowed extensions are *.png*",
        "--plot=missing/p.png": "--plot='missing/p.png' (from option --plot) cannot be written: its folder "
                                "'missing' does not exist; allowed is a file in an existing folder",
    }
    for option, message in expected.items():
        if option.startswith("--plot"):
            pytest.importorskip("matplotlib")
        done = trace(option, "ran.py", cwd=tmp_path, env=env)
        errors = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
        assert done.returncode == 2 and len(errors) == 2 and errors[0].startswith("usage: tfplace trace"), done.stderr
        assert fnmatch.fnmatchcase(errors[1], "tfplace trace: error: " + message), errors[1]
        assert not (tmp_path / "ran.txt").exists()
        assert not any(line.rsplit("|", 1)[1].strip() == "tensorflow"
                       for line in done.stderr.splitlines() if line.startswith("import time:"))


def test_plot_is_readable_with_twenty_op_types(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    drawn = []
    monkeypatch.setattr(Figure, "savefig", lambda figure, *args, **kwargs: drawn.append(figure))
    ops = [f"Op{i:02d}" for i in range(20)]
    log = PlacementLog([PlacementRecord(op, "", device, "execute")
                        for i, op in enumerate(ops) for device in ("/device:CPU:0", "/device:CPU:1")
                        for _ in range(1 + i % 3)])
    plot(log, str(tmp_path / "p.png"), top=15)
    plot(PlacementLog([PlacementRecord("Mul", "", "/device:CPU:0", "execute")] * 3), str(tmp_path / "q.png"))
    figure, small = drawn
    axes = figure.axes[0]
    labels = [text.get_text() for text in axes.get_legend().get_texts()]
    assert (labels[:2] == ["Op02 (6)", "Op05 (6)"] and labels[-1] == "5 other compute op types (10)"
            and len(labels) == 16)
    colours = [tuple(bars.patches[0].get_facecolor()) for bars in axes.containers]
    assert len(set(colours)) == 16  # "other" too has a colour of its own
    figure.canvas.draw()
    assert axes.get_legend().get_window_extent().x0 >= axes.get_window_extent().x1  # beside the bars
    assert [tick.get_text() for tick in axes.get_yticklabels()] == ["/device:CPU:0", "/device:CPU:1"]
    ticks = small.axes[0].get_xticks()
    assert len(ticks) >= 2 and all(tick == int(tick) for tick in ticks)  # whole ops: no 0.5


def test_plot_draws_a_png_or_says_what_is_missing(tmp_path):
    (tmp_path / "small.py").write_text("import tensorflow as tf\ntf.ones(2) * 2.0\n")
    code = ("import sys\nsys.modules['matplotlib'] = None\nfrom tfplace.cli._cli import main\n"
            "sys.exit(main(['trace', '--plot=p.png', 'small.py']))")
    missing = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert missing.returncode == 2 and "--plot needs matplotlib" in missing.stderr
    pytest.importorskip("matplotlib")
    done = trace("--plot=p.png", "small.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_groups_cpu_ops_by_line_and_says_why_they_ran_there():
    from tfplace.placement.shown import _explain
    from tfplace.placement.ops import _kernel_table
    log = PlacementLog(
        [PlacementRecord("Cast", "", "/device:CPU:0", "execute", "train.py:12",
                         dtypes=(("DstT", "float32"), ("SrcT", "int32"), ("Truncate", "bool")))] * 2 + [
            PlacementRecord("MatMul", "", "/device:GPU:0", "execute", "train.py:13", dtypes=(("T", "float32"),)),
            PlacementRecord("DecodeJpeg", "", "/device:CPU:0", "execute", "data.py:4"),
            PlacementRecord("StringFormat", "fmt", "/device:CPU:0", "place"),
            PlacementRecord("Mul", "", "/device:CPU:1", "execute", "train.py:14", requested="/device:GPU:1")],
        [CopyRecord("AddV2", 1, "/device:CPU:0", "/device:GPU:0", "train.py:20")] * 3 + [
            CopyRecord("Mul", 0, "/device:GPU:1", "/device:GPU:0", "train.py:30")])
    found = _explain.explain(log.records, devices=("/device:CPU:0", "/device:CPU:1", "/device:GPU:0"),
                            table=_kernel_table.shipped())
    text = report(log, Findings(True, tuple(found)), top=10).splitlines()
    asked = text.index("not where asked, and why (by source line):")
    assert text[asked + 1].startswith("  train.py:14  Mul x1: no-device: Mul asked for /device:GPU:1, which does not "
                                      "exist here (devices: /device:CPU:0, /device:CPU:1, /device:GPU:0)")
    cpu = text.index("ops on the CPU while a GPU was visible:")
    assert [line.split(": ", 2)[:2] for line in text[cpu + 1:cpu + 4]] == [
        ["  train.py:12  Cast x2", "unknown"],
        ["  data.py:4  DecodeJpeg x1", "no-kernel"],
        ["  function node fmt  StringFormat x1", "no-kernel"]]
    assert "DecodeJpeg has no GPU kernel for any dtype" in text[cpu + 2]
    assert text[1:5] == ["where the time and bytes went:", "  CPU:0: 3 op execution(s)", "  CPU:1: 1 op execution(s)",
                        "  GPU:0: 1 op execution(s)"]
    copies = text.index("  top transfers by bytes:")  # of unknown size: most frequent first
    assert text[copies + 1:copies + 3] == ["    train.py:20  x3  ? B  AddV2 input #1 CPU:0 -> GPU:0, ? B each",
                                           "    train.py:30  x1  ? B  Mul input #0 GPU:1 -> GPU:0, ? B each"]
    short = report(log, Findings(True, tuple(found)), top=1).splitlines()
    assert short[short.index("  top transfers by bytes:") + 2] == "    ... and 1 more"


LEGACY_KERAS = """
import importlib.util, os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"  # as TensorFlow's mixed-precision and parameter-server guides do
import tensorflow as tf
print("tensorflow.keras from", str(tf.__path__[0]).split("site-packages")[-1])  # None: tf_keras not installed
if importlib.util.find_spec("tf_keras") is not None:
    from tensorflow.keras import layers
    print("layers from", layers.Dense.__module__.split(".")[0])
print("ran", tf.add(1, 2).numpy())
"""


def test_a_script_that_asks_for_legacy_keras_before_importing_tensorflow_runs_as_under_python(tmp_path):
    """The trace starts when the script imports TensorFlow: what the script set before applies."""
    (tmp_path / "legacy.py").write_text(LEGACY_KERAS)
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    plain = subprocess.run([sys.executable, "legacy.py"], capture_output=True, text=True, cwd=tmp_path, env=env)
    traced = trace("--json=t.json", "legacy.py", cwd=tmp_path, env=env)
    assert plain.returncode == traced.returncode == 0, traced.stderr[-2000:]
    shown = [line for line in traced.stdout.splitlines() if line.startswith(("tensorflow.keras from", "layers", "ran"))]
    assert shown == plain.stdout.splitlines() and "/keras/api" not in shown[0]  # not Keras 3's
    records = json.loads((tmp_path / "t.json").read_text())["records"]
    assert any(r["op"] == "AddV2" for r in records)


def test_a_script_that_never_imports_tensorflow_is_run_and_said_to_have_nothing_to_trace(tmp_path):
    (tmp_path / "plain.py").write_text("import sys\nprint('plain', sys.argv[1:])\nsys.exit(3)\n")
    done = trace("--json=t.json", "plain.py", "a", cwd=tmp_path, env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    assert done.returncode == 3 and done.stdout == "plain ['a']\n"
    assert "tfplace trace: plain.py did not import TensorFlow: nothing to trace (no report, no files)" in done.stderr
    assert not (tmp_path / "t.json").exists()
    assert not any(line.rsplit("|", 1)[-1].strip() == "tensorflow" for line in done.stderr.splitlines())


@pytest.mark.placement
def test_an_xla_step_is_counted_at_every_call_and_named_on_its_device(tmp_path):
    (tmp_path / "xla.py").write_text(
        "import tensorflow as tf\n"
        "@tf.function(jit_compile=True)\n"
        "def train_step(x):\n"
        "    return tf.nn.relu(tf.matmul(x, x) + 1.0)\n"
        "x = tf.ones((4, 4))\n"
        "for _ in range(11):\n"
        "    y = train_step(x)\n")
    done = trace("xla.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    device = next(line for line in lines if line.startswith("  /device:CPU:0  "))
    assert "MatMul 11" in device and "Relu 11" in device and "AddV2 11" in device, device
    assert "      compiled by XLA (jit_compile), each call one compiled program: train_step 11 call(s)" in lines, lines
    executions = next(line for line in lines if line.startswith("  CPU:0: "))
    assert int(executions.split()[1]) >= 33, executions  # each call's MatMul, AddV2 and Relu
