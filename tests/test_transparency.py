"""A program runs under `tfplace trace` exactly as under `python`: the same exit status and the same
standard output before the report, for every example and every conformance program (and, on a few, the
trace's `--memory`, `--timing` and `--perfetto` modes).

The conformance programs are written for two logical CPUs (the conformance harness makes them): their
reference run makes them with plain TensorFlow before running the program as `__main__`, and the trace
gets `--logical_cpus=2`. The examples are absl apps that take `--logical_cpus` themselves.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # slow tier: whole programs run twice, under the trace and under python

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = sorted((ROOT / "tests" / "conformance" / "programs").glob("*.py"))
EXAMPLES = ROOT / "examples"

# `python program.py` on two logical CPUs made with plain TensorFlow (no tfplace in the reference run).
TWO_CPUS = """
import os, runpy, sys
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
"""
REPORT = "== tfplace trace:"
# What differs between two runs of the same program under `python` alone: seconds per epoch, and the
# figures of a training from random weights.
TIMES = re.compile(r"\d+(\.\d+)? sec")
FIGURES = re.compile(r"\d+\.\d+|\d+%")  # a training's losses, accuracies and step shares
OWN_FAILURE = re.compile(r"tfplace's .* failed \(")  # `tfplace._contained.failed`

MODES = {"b_keras_dense": ["--memory"], "d_tf_data": ["--timing"], "h_mirrored": ["--perfetto={tmp}/t.json.gz"],
         "i_saved_model": ["--memory", "--timing"], "o_mirrored_fit": ["--memory"]}

EXAMPLE_RUNS = {
    "gpu_guide": ["gpu_guide.py", "--logical_cpus=2"],
    "gpu_guide_one_cpu": ["gpu_guide.py", "--section=single_gpu"],
    "d2l_gpus": ["d2l_gpus.py", "--logical_cpus=2"],
    "d2l_gpus_explicit": ["d2l_gpus.py", "--logical_cpus=2", "--device_policy=explicit"],
    "multi_gpu_training": ["multi_gpu_training.py", "--num_devices=2", "--logical_cpus=2", "--width=0.0625",
                           "--dataset=synthetic", "--epochs=1", "--train_size=128", "--batch_size=64"],
    "multi_gpu_training_bad_batch": ["multi_gpu_training.py", "--num_devices=2", "--logical_cpus=2",
                                     "--batch_size=63", "--dataset=synthetic"],
    "multi_worker": ["multi_worker.py", "--launch_local=2", "--epochs=1", "--train_size=64", "--batch_size=32"],
}


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})


def _same(reference: subprocess.CompletedProcess, traced: subprocess.CompletedProcess, *, quiet: bool = False,
          processes: bool = False, random: bool = False) -> None:
    """The same exit status and output before the report; `processes`: the output of several processes,
    whose lines interleave as the system runs them (compared as sorted lines); `random`: a training whose
    figures differ from run to run (compared without them)."""
    assert traced.returncode == reference.returncode, (reference.stderr[-3000:], traced.stderr[-3000:])
    before, found, _ = traced.stdout.partition(REPORT)
    assert found or quiet, traced.stdout[-2000:] + traced.stderr[-3000:]
    before, expected = TIMES.sub("N sec", before), TIMES.sub("N sec", reference.stdout)
    if random:
        before, expected = FIGURES.sub("N", before), FIGURES.sub("N", expected)
    if processes:
        before, expected = sorted(before.splitlines()), sorted(expected.splitlines())
    assert before == expected, traced.stderr[-3000:]
    assert not OWN_FAILURE.search(traced.stderr), traced.stderr[-3000:]


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_a_conformance_program_exits_and_prints_under_the_trace_as_under_python(program, tmp_path):
    reference = _run([sys.executable, "-c", TWO_CPUS, str(program)], tmp_path)
    modes = [mode.format(tmp=tmp_path) for mode in MODES.get(program.stem, [])]
    traced = _run([sys.executable, "-m", "tfplace", "trace", "--logical_cpus=2", *modes, str(program)], tmp_path)
    _same(reference, traced)
    if any(mode.startswith("--perfetto") for mode in modes):
        assert (tmp_path / "t.json.gz").stat().st_size > 0


@pytest.mark.parametrize("case", sorted(EXAMPLE_RUNS))
def test_an_example_exits_and_prints_under_the_trace_as_under_python(case, tmp_path):
    script, *args = EXAMPLE_RUNS[case]
    reference = _run([sys.executable, str(EXAMPLES / script), *args], tmp_path)
    traced = _run([sys.executable, "-m", "tfplace", "trace", str(EXAMPLES / script), "--", *args], tmp_path)
    # no report where the script imports no TensorFlow: a flag refused first, multi_worker.py's launcher
    _same(reference, traced, quiet=case in ("multi_worker", "multi_gpu_training_bad_batch"),
          processes=case == "multi_worker", random=case.startswith(("multi_gpu_training", "multi_worker")))


CONFIGURE_FIRST = """
import tfplace
tfplace.configure(logical_cpus=2)
import tensorflow as tf
with tf.device("CPU:1"):
    x = tf.reduce_sum(tf.ones((2, 2)))
print(x.numpy(), x.device)
"""


@pytest.mark.parametrize("how", ["python", "trace", "capture"])
def test_configure_before_importing_tensorflow_works_under_the_trace_and_a_capture(how, tmp_path):
    script = tmp_path / "first.py"
    text = CONFIGURE_FIRST
    if how == "capture":  # a capture opened first, configure() inside it, then the program's import
        text = "import tfplace\nwith tfplace.capture_placement() as log:\n" + "".join(
            f"    {line}\n" for line in CONFIGURE_FIRST.strip().splitlines()) + \
            "print(log.devices_for('Sum'), log.complete)\n"
    script.write_text(text)
    command = [sys.executable, *(["-m", "tfplace", "trace"] if how == "trace" else []), str(script)]
    done = _run(command, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("4.0 /job:localhost/replica:0/task:0/device:CPU:1\n"), done.stdout
    if how == "trace":
        assert REPORT in done.stdout and "Sum" in done.stdout.partition(REPORT)[2]
    if how == "capture":
        assert "('/device:CPU:1',) True" in done.stdout


def test_configure_before_importing_tensorflow_works_under_launch(tmp_path):
    (tmp_path / "first.py").write_text(CONFIGURE_FIRST)
    done = _run([sys.executable, "-m", "tfplace", "launch", "--workers=2", "--trace", "first.py"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    for task in (0, 1):
        # (TensorFlow names a task's own devices /job:localhost/... in its tensors)
        assert f"[worker {task}] 4.0 /job:localhost/replica:0/task:0/device:CPU:1\n" in done.stdout
        assert f"== worker:{task}: " in done.stdout  # each task's trace


FAILING_PATCH = """
import tfplace
from tfplace.cluster import _checks
def broken(self, *args):
    raise KeyError("a defect of tfplace's own")
_checks.Publisher._about = broken     # every function call passes through it under the trace
import tensorflow as tf
@tf.function
def f(x):
    return x * 2.0
print(float(f(tf.constant(3.0))))
with tfplace.capture_placement() as log:
    print(float(f(tf.constant(4.0))))
print(log.complete, "KeyError" in log.incomplete_reason)
"""


def test_a_failure_inside_tfplaces_own_patch_is_reported_not_raised_into_the_program(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text(FAILING_PATCH)
    done = _run([sys.executable, "-m", "tfplace", "trace", str(script)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("6.0\n8.0\nFalse True\n"), done.stdout
    assert "tfplace's patch of TensorFlow's AtomicFunction.call_flat failed (KeyError" in done.stderr


FAILING_LISTENER = """
import tensorflow as tf, tfplace
from tfplace.placement.api import _log

def failing(write):
    def written(record, *copies):
        if record.op == "Mul":
            raise ValueError("a defect of tfplace's own")
        return write(record, *copies)
    return written

add_event, writer = _log.PlacementLog.add_event, _log.PlacementLog.writer
_log.PlacementLog.add_event = lambda self, record, copies: failing(lambda r, c: add_event(self, r, c))(record, copies)
_log.PlacementLog.writer = lambda self: failing(writer(self))
x = tf.ones(2)
with tfplace.capture_placement() as log:
    for _ in range(4):  # the first decided in Python, the later ones by the kept record (in C where built)
        y = x * 3.0
        z = x + 1.0
print(y.numpy().tolist(), z.numpy().tolist(), log.complete, "ValueError" in log.incomplete_reason,
      [r.op for r in log.records].count("AddV2"))
"""


def test_a_failure_inside_tfplaces_op_callback_is_reported_not_raised_into_the_program(tmp_path):
    script = tmp_path / "listener.py"
    script.write_text(FAILING_LISTENER)
    done = _run([sys.executable, str(script)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "[3.0, 3.0] [2.0, 2.0] False True 4\n", done.stdout + done.stderr[-3000:]
    assert "tfplace's op callback failed (ValueError: a defect of tfplace's own" in done.stderr
