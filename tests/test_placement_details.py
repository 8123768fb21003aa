"""Placements and copies that must say what TensorFlow's own log says in the same run: a node
Grappler removed beside a fusion, and host-memory arguments on a CPU that is not the host's first."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import PRELUDE, ROOT, result_of

sys.path.insert(0, str(ROOT / "tests"))
from conformance import tflog  # TensorFlow's stderr read without tfplace's parser

SETUP = """
import tensorflow as tf, tfplace
tf.debugging.set_log_device_placement(True)
tfplace.configure(logical_cpus=2, device_policy="warn")
import sys
sys.stderr.write("CONFORMANCE-BEGIN 0\\n"); sys.stderr.flush()
"""


def run_logged(tmp_path, code: str, onednn: str):
    """Runs `code` with TensorFlow's placement log on; returns what it reported and TensorFlow's log."""
    path = tmp_path / "program.py"
    path.write_text(PRELUDE + SETUP + textwrap.dedent(code)
                    + '\nsys.stderr.write("CONFORMANCE-END 0\\n"); sys.stderr.flush()\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFPLACE_", "TF_CPP_"))}
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**env, "TF_ENABLE_ONEDNN_OPTS": onednn, "TF_CPP_MIN_LOG_LEVEL": "0"})
    return result_of(done), tflog.parse(done.stderr)


@pytest.mark.parametrize("onednn", ["1", "0"])
def test_an_identity_removed_beside_a_fusion_keeps_no_device_of_the_fusion(tmp_path, onednn):
    out, log = run_logged(tmp_path, """
        w, b = tf.ones((4, 4)), tf.ones((4,))

        @tf.function
        def outer2(x):
            xi = tf.identity(x)
            with tf.device("CPU:1"):
                return tf.nn.relu(tf.nn.bias_add(tf.matmul(xi, w), b))

        x = tf.ones((4, 4))
        with tfplace.capture_placement() as capture:
            outer2(x)
        report([[r.name, r.op, r.device, r.kind] for r in capture.records if r.kind in ("place", "removed")])
    """, onednn)
    placed = {(n.name, tflog.registered_op(n.op)): n.device for n in log.nodes}
    assert placed[("Identity", "Identity")] == "/device:CPU:0"
    records = {(name, op): (device, kind) for name, op, device, kind in out}
    # TensorFlow placed it on CPU:0 and Grappler removed it: its device is unknown, never the fusion's CPU:1.
    assert records[("Identity", "Identity")] == ("", "removed")
    for node in ("MatMul", "BiasAdd", "Relu"):  # fused into one kernel on CPU:1, each under its own op type
        assert records[(node, node)] == ("/device:CPU:1", "place") == (placed[(node, node)], "place")
    for (name, op), (device, kind) in records.items():  # no record on a device TensorFlow did not place it on
        assert kind == "removed" and device == "" or device == placed[(name, op)]


@pytest.mark.parametrize("onednn", ["1", "0"])
def test_host_memory_arguments_on_the_second_cpu_are_not_copies(tmp_path, onednn):
    out, log = run_logged(tmp_path, """
        with tf.device("CPU:0"):
            generator = tf.random.Generator.from_seed(1)
        with tfplace.capture_placement() as capture:
            with tf.device("CPU:1"):
                value = generator.normal([])
                filled = tf.fill([2, 2], 1.0)
        report([[c.op, c.input_index, c.from_device, c.to_device] for c in capture.copies])
    """, onednn)
    logged = sorted([c.op, c.input_index, c.from_device, c.to_device] for c in log.copies if c.op != "_EagerConst")
    assert sorted(out) == logged  # TensorFlow's "warn" lines, one for one
    assert not any(op in ("RngReadAndSkip", "StatelessRandomNormalV2", "Fill") for op, *_ in out)
