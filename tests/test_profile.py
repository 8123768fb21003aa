"""Timing: a capture under TensorFlow's own profiler, busy time per device and op, the profile's
GPU planes read with the profiler's schema, and a profiler session that is not ours."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import PRELUDE, ROOT, result_of

SETUP = """
import warnings
import tensorflow as tf, tfplace
tfplace.configure(logical_cpus=2)
"""


def run_file(tmp_path, code: str, onednn: str = "1", name: str = "program.py"):
    path = tmp_path / name
    path.write_text(PRELUDE + SETUP + textwrap.dedent(code), encoding="utf-8")
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": onednn})
    return result_of(done)


@pytest.mark.parametrize("onednn", ["1", "0"])
def test_two_devices_busy_with_200_matmuls_each(tmp_path, onednn):
    out = run_file(tmp_path, """
        inputs = {}
        for device in ("CPU:0", "CPU:1"):
            with tf.device(device):
                inputs[device] = tf.random.normal((256, 256))
        with tfplace.capture_placement(timing=True) as log:
            for device in ("CPU:1", "CPU:0"):
                with tf.device(device):
                    for _ in range(200):
                        y = tf.matmul(inputs[device], inputs[device])
        cost = log.cost()
        timing = log._timing
        report({"cost": cost.to_json(), "wall": timing.wall_us, "threads": timing.threads,
                "eager": [[d, o, n] for (d, o), n in timing.eager.items()],
                "records": [[r.device, r.op] for r in log.records if r.kind == "execute"]})
    """, onednn)
    cost = out["cost"]
    assert cost["timed"] and cost["missing"] == ""
    devices = {d["device"]: d for d in cost["devices"]}
    assert set(devices) == {"/device:CPU:0", "/device:CPU:1"}
    for figures in devices.values():
        assert figures["busy_us"] > 0 and 0.3 <= figures["share"] <= 0.7
        assert figures["busy_us"] <= out["wall"] * out["threads"]
    ops = {(o["device"], o["op"]): o for o in cost["ops"]}
    assert ops[("/device:CPU:0", "MatMul")]["executions"] == ops[("/device:CPU:1", "MatMul")]["executions"] == 200
    assert all(ops[key]["time_us"] > 0 for key in ops)
    # Every eager op the profile saw is one the records have, on the same device.
    records = {}
    for device, op in out["records"]:
        records[(device, op)] = records.get((device, op), 0) + 1
    assert {(d, o): n for d, o, n in out["eager"]} == records


def test_a_function_in_a_loop_gets_its_executions_and_transfer_times(tmp_path):
    out = run_file(tmp_path, """
        x = tf.ones((256, 256))

        @tf.function
        def step(x):
            with tf.device("CPU:1"):
                y = tf.matmul(x, x)
            return tf.reduce_sum(y)

        @tf.function
        def loop(x):
            def body(i, acc):
                with tf.device("CPU:1"):
                    y = tf.matmul(acc, x)
                return i + 1, y / 256.0
            return tf.while_loop(lambda i, a: i < 5, body, (tf.constant(0), x))[1]

        with tfplace.capture_placement(timing=True) as log:
            for _ in range(3):
                step(x)
            loop(x)
        report({"ops": [[d, o, c.executions] for (d, o), c in log.cost().ops.items()],
                "transfers": [[t.op, t.node, t.count, t.lower_bound, t.time_us] for t in log.transfers()]})
    """)
    ops = {(d, o): n for d, o, n in out["ops"]}
    assert ops[("/device:CPU:1", "MatMul")] == 3 + 5 and ops[("/device:CPU:0", "Sum")] == 3
    rows = {node: (count, lower_bound, time) for _, node, count, lower_bound, time in out["transfers"]}
    assert rows["MatMul"][:2] == (3, False) and rows["Sum"][:2] == (3, False)
    body = [row for node, row in rows.items() if node.startswith("while/body")]
    # Inside the loop the profile counts each send: 5 iterations, and one more at the loop's exit.
    assert body and all(count == 6 and not lower_bound for count, lower_bound, _ in body)
    assert all(time is not None and time >= 0 for _, _, time in rows.values())


def test_a_profiler_session_of_the_users_leaves_times_empty_with_one_warning(tmp_path):
    out = run_file(tmp_path, """
        x = tf.ones((64, 64))
        tf.profiler.experimental.start(str(__import__("tempfile").mkdtemp()))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with tfplace.capture_placement(timing=True) as log:
                with tf.device("CPU:1"):
                    for _ in range(10):
                        y = tf.matmul(x, x)
        tf.profiler.experimental.stop()  # the user's session is still theirs to stop
        cost = log.cost()
        report({"warnings": [str(w.message) for w in caught if "tfplace" in str(w.message)],
                "cost": cost.to_json(), "copies": len(log.copies)})
    """)
    message, = out["warnings"]
    assert "another TensorFlow profiler session was active" in message and "Another profiler is running" in message
    cost = out["cost"]
    assert not cost["timed"] and "another TensorFlow profiler session was active" in cost["missing"]
    assert cost["devices"] == [{"device": "/device:CPU:1", "executions": 10, "busy_us": None, "share": None}]
    assert cost["directions"] == [{"from_device": "/device:CPU:0", "to_device": "/device:CPU:1", "count": 20,
                                   "bytes": 20 * 64 * 64 * 4, "time_us": None}]


def test_trace_with_timing_leads_with_time_shares_and_writes_them(tmp_path):
    script = tmp_path / "work.py"
    script.write_text(textwrap.dedent("""
        import tensorflow as tf
        with tf.device("CPU:1"):
            b = tf.random.normal((128, 128))
        a = tf.random.normal((128, 128))
        for _ in range(50):
            c = tf.matmul(a, a)
        with tf.device("CPU:1"):
            for _ in range(50):
                d = tf.matmul(b, b) + a  # a crosses to CPU:1
    """), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "--logical_cpus=2", "--timing",
                           "--json=t.json", "work.py"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    first = lines.index("where the time and bytes went:")
    shares = [float(line.split("= ")[1].split("%")[0]) for line in lines[first + 1:first + 3]]
    assert [line.split(":")[0] + ":" + line.split(":")[1] for line in lines[first + 1:first + 3]] == [
        "  CPU:0", "  CPU:1"]
    assert abs(sum(shares) - 100) <= 1
    assert "  transfers CPU:0 -> CPU:1: 50 (3.1 MiB, " in "\n".join(lines)
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["cost"]["timed"] and {d["device"] for d in data["cost"]["devices"]} == {"/device:CPU:0",
                                                                                       "/device:CPU:1"}
    assert data["transfers"][0]["op"] == "AddV2" and data["transfers"][0]["count"] == 50


def test_the_gpu_plane_reader_on_a_written_profile():
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from tfplace.placement import _profile

    space = xplane_pb2.XSpace()
    plane = space.planes.add(id=1, name="/device:GPU:0")
    for index, name in enumerate(["kernel_details", "memcpy_details", "device_id"], start=1):
        plane.stat_metadata[index].id = index
        plane.stat_metadata[index].name = name
    for index, name in enumerate(["volta_sgemm_128x64_nn", "relu_kernel", "MemcpyH2D"], start=1):
        plane.event_metadata[index].id = index
        plane.event_metadata[index].name = name
    stream = plane.lines.add(id=7, name="Stream #7(MemcpyH2D,Compute)", timestamp_ns=1_000)
    for metadata, offset_ps, duration_ps, stat, text in [
            (1, 0, 250_000_000, 1, "regs:64 static_shared:0 grid:4,1,1 block:256,1,1"),
            (2, 300_000_000, 50_000_000, 1, "regs:16 grid:1,1,1 block:128,1,1"),
            (3, 400_000_000, 700_000_000, 2, "kind_src:Host kind_dst:Device size:4194304 dest:0 async:1")]:
        event = stream.events.add(metadata_id=metadata, offset_ps=offset_ps, duration_ps=duration_ps)
        event.stats.add(metadata_id=stat, str_value=text)
    timing = _profile.read_xspace(space)
    assert timing.devices == {"/device:GPU:0": (2, 300.0)}  # 250 µs + 50 µs of kernels
    assert timing.ops[("/device:GPU:0", "volta_sgemm_128x64_nn")] == (1, 250.0)
    assert timing.transfers == {("/device:CPU:0", "/device:GPU:0"): (1, 4194304, 700.0)}
    assert timing.threads == 1


@pytest.mark.parametrize("program", ["b_keras_dense", "h_mirrored"])
def test_conformance_programs_timed_keep_busy_time_within_wall_time_and_eager_counts(tmp_path, program):
    path = ROOT / "tests" / "conformance" / "programs" / f"{program}.py"
    out = run_file(tmp_path, f"""
        import runpy, sys
        sys.argv = [{str(path)!r}]
        with tfplace.capture_placement(timing=True) as log:
            runpy.run_path({str(path)!r}, run_name="__main__")
        timing = log._timing
        records = {{}}
        for r in log.records:
            if r.kind == "execute" and not r.op.startswith("__"):
                records[r.device + " " + r.op] = records.get(r.device + " " + r.op, 0) + 1
        report({{"devices": {{d: busy for d, (_, busy) in timing.devices.items()}}, "wall": timing.wall_us,
                "threads": timing.threads, "records": records,
                "eager": {{d + " " + o: n for (d, o), n in timing.eager.items()}}}})
    """, name=f"timed_{program}.py")
    assert out["devices"] and all(0 < busy <= out["wall"] * out["threads"] for busy in out["devices"].values())
    assert out["eager"] == out["records"]
