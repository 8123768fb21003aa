"""Timing: a capture under TensorFlow's own profiler, busy time per device and op, the profile's
GPU planes read with the profiler's schema, and a profiler session that is not ours."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import PRELUDE, ROOT, result_of
from xspace import Plane as _Plane

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
        assert figures["busy_us"] > 0 and 0.2 <= figures["share"] <= 0.8  # equal work; the machine is shared
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


KERNEL = "regs:64 static_shared:0 dynamic_shared:0 grid:4,1,1 block:256,1,1 occ_pct:50"


def test_the_gpu_plane_reader_on_a_written_profile():
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from tfplace.placement.profile import _xspace

    space = xplane_pb2.XSpace()
    gpu = _Plane(space, "/device:GPU:0")
    stream = gpu.line("Stream #7(Kernel,MemcpyH2D)")
    gpu.event(stream, "volta_sgemm_128x64_nn", 0, 250, correlation_id=11, context_id="$$1",
              kernel_details=KERNEL, tf_op="dense/MatMul:MatMul")
    gpu.event(stream, "relu_kernel", 300, 50, correlation_id=12, context_id="$$1", kernel_details=KERNEL)
    gpu.event(stream, "MemcpyH2D", 400, 700, correlation_id=13, context_id="$$1",
              memcpy_details="kind_src:pageable kind_dst:device size:4194304 dest:0 async:1")
    timing = _xspace.read_xspace(space)
    assert timing.devices == {"/device:GPU:0": (2, 300.0)}  # 250 µs + 50 µs of kernels
    assert timing.ops == {("/device:GPU:0", "MatMul"): (1, 250.0), ("/device:GPU:0", "relu_kernel"): (1, 50.0)}
    assert timing.transfers == {("/device:CPU:0", "/device:GPU:0"): (1, 4194304, 700.0)}
    assert timing.threads == 1 and timing.wall_us == 1100.0


def test_gpu_copies_out_and_between_gpus_and_a_host_op_on_a_timed_gpu():
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from tfplace.placement.profile import _xspace

    space = xplane_pb2.XSpace()
    host = _Plane(space, "/host:CPU")
    python = host.line("python")
    host.event(python, "EagerLocalExecute: MatMul", 0, 30)  # the launch, on the host
    gpus = [_Plane(space, f"/device:GPU:{n}") for n in range(2)]
    copies = gpus[0].line("Stream #14(MemcpyD2H,MemcpyP2P,MemcpyD2D)")
    for name, offset, duration, details in [
            ("MemcpyD2H", 0, 10, "kind_src:device kind_dst:pinned size:1024 dest:0 async:1"),
            ("MemcpyP2P", 20, 30, "kind_src:device kind_dst:device size:2048 dest:1 async:1"),
            ("MemcpyD2D", 60, 5, "kind_src:device kind_dst:device size:64 dest:0 async:1"),
            ("MemcpyOther", 70, 5, "kind_src:pageable kind_dst:pinned size:8 dest:0 async:0")]:  # host to host
        gpus[0].event(copies, name, offset, duration, memcpy_details=details)
    gpus[1].event(gpus[1].line("Stream #3(Kernel)"), "sgemm", 0, 40, kernel_details=KERNEL, tf_op="MatMul:MatMul")
    timing = _xspace.read_xspace(space, eager=[("MatMul", "/device:GPU:1")])
    assert timing.transfers == {("/device:GPU:0", "/device:CPU:0"): (1, 1024, 10.0),
                                ("/device:GPU:0", "/device:GPU:1"): (1, 2048, 30.0),
                                ("/device:GPU:0", "/device:GPU:0"): (1, 64, 5.0)}
    # GPU:1 is timed from its plane: its kernel, not the host's 30 µs launch; the eager op is still seen.
    assert timing.devices == {"/device:GPU:1": (1, 40.0)} and timing.eager == {("/device:GPU:1", "MatMul"): 1}


def test_host_events_count_leaf_work_once():
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from tfplace.placement.profile import _xspace

    space = xplane_pb2.XSpace()
    host = _Plane(space, "/host:CPU")
    python = host.line("python")
    host.event(python, "EagerExecute", 0, 110, eager_op="MatMul", is_func=0)
    host.event(python, "EagerLocalExecute: MatMul", 5, 100)  # its first 40 µs make the kernel
    host.event(python, "EagerKernelExecute", 45, 60)
    host.event(python, "KernelAndDeviceFunc::Run", 46, 58)
    host.event(python, "EagerLocalExecute: __inference_f_19", 200, 100)  # a call: its nodes count
    host.event(python, "EagerKernelExecute", 201, 98)
    pool = host.line("tf_Compute/1")
    host.event(pool, "MatMul:_MklMatMul", 210, 50)
    host.event(pool, "Sum:Sum", 240, 40)  # overlaps the MatMul's last 20 µs on the same thread
    host.event(pool, "ExecutorState::ProcessAsync::Start", 205, 2, name="x/_2", kernel_type="_Recv")
    host.event(pool, "x/_1:_Send", 208, 1, key="/job:localhost/replica:0/task:0/device:CPU:0;1;"
               "/job:localhost/replica:0/task:0/device:CPU:1;edge_2_x;0:0", **{"from": "x", "to": "MatMul"})
    timing = _xspace.read_xspace(space, {"MatMul": "/device:CPU:1", "Sum": "/device:CPU:0"},
                                  [("MatMul", "/device:CPU:0")])
    assert timing.ops == {("/device:CPU:0", "MatMul"): (1, 60.0), ("/device:CPU:0", "Sum"): (1, 20.0),
                          ("/device:CPU:1", "MatMul"): (1, 50.0)}
    assert timing.nodes == {"MatMul": 1, "Sum": 1, "x/_2": 1, "x/_1": 1}
    assert timing.transfers == {("/device:CPU:0", "/device:CPU:1"): (1, 0, 1.0)}
    assert timing.sends == {("x", "MatMul"): (1, 1.0)} and timing.threads == 2
    assert sum(busy for _, busy in timing.devices.values()) <= timing.wall_us * timing.threads


def test_function_nodes_on_the_devices_of_the_placed_graphs(tmp_path):
    out = run_file(tmp_path, """
        from tfplace import _tensorflow
        from tfplace.placement.profile import _session, _xspace
        x = tf.ones((256, 256))

        @tf.function
        def step(x):
            with tf.device("CPU:1"):
                y = tf.matmul(x, x)
            with tf.device("CPU:0"):
                return tf.reduce_sum(y)

        _tensorflow.enable_graph_collection()
        step(x)
        graphs = [g for f in _tensorflow.export_run_metadata().function_graphs for g in f.partition_graphs]
        _tensorflow.disable_graph_collection()
        devices = {n.name: n.device for g in graphs for n in g.node}
        session = _session.ProfilerSession.start()
        for _ in range(3):
            step(x)
        timing = _xspace.read_xspace(session.stop(), devices)
        report({"missing": session.missing, "ops": [[d, o, n] for (d, o), (n, _) in timing.ops.items()],
                "nodes": timing.nodes, "transfers": [[a, b, n] for (a, b), (n, _, _) in timing.transfers.items()],
                "ops_of": {n.name: n.op for g in graphs for n in g.node}})
    """)
    assert out["missing"] == ""
    ops = {(d, o): n for d, o, n in out["ops"]}
    assert ops == {("/device:CPU:1", "MatMul"): 3, ("/device:CPU:0", "Sum"): 3}
    receives = [name for name, op in out["ops_of"].items() if op == "_Recv"]
    sends = [name for name, op in out["ops_of"].items() if op == "_Send"]
    assert len(receives) == len(sends) == 2
    assert all(out["nodes"].get(name) == 3 for name in receives + sends + ["MatMul", "Sum"])
    assert sorted(out["transfers"]) == [["/device:CPU:0", "/device:CPU:1", 3], ["/device:CPU:1", "/device:CPU:0", 3]]


def test_a_session_while_another_is_active_starts_nothing_and_disturbs_nothing(tmp_path):
    out = run_file(tmp_path, """
        import glob, tempfile
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
        from tfplace.placement.profile import _session, _xspace
        x = tf.ones((64, 64))
        theirs = tempfile.mkdtemp()
        tf.profiler.experimental.start(theirs)
        tf.matmul(x, x)
        second = _session.ProfilerSession.start()
        tf.matmul(x, x)
        stopped = second.stop()
        tf.matmul(x, x)
        tf.profiler.experimental.stop()  # still theirs to stop
        path, = glob.glob(theirs + "/plugins/profile/*/*.xplane.pb")
        space = xplane_pb2.XSpace.FromString(open(path, "rb").read())
        theirs_saw = sum(1 for p in space.planes for line in p.lines for e in line.events
                         if p.event_metadata[e.metadata_id].name == "EagerLocalExecute: MatMul")
        ours = _session.ProfilerSession.start()
        tf.matmul(x, x)
        nested = _session.ProfilerSession.start()
        nested_stopped = nested.stop()
        ours_timing = _xspace.read_xspace(ours.stop(), eager=[("MatMul", "/device:CPU:0")])
        report({"missing": second.missing, "stopped": stopped is None, "theirs_saw": theirs_saw,
                "nested": nested.missing, "nested_stopped": nested_stopped is None, "ours": ours.missing,
                "ours_ops": ours_timing.ops[("/device:CPU:0", "MatMul")][0],
                "again": _session.ProfilerSession.start().missing})
    """)
    assert out["missing"].startswith("another TensorFlow profiler session was active (TensorFlow said: Another "
                                     "profiler is running")
    assert "\n" not in out["missing"] and out["stopped"]
    assert out["theirs_saw"] == 3  # before, during and after the second session's attempt
    assert out["nested"].startswith("another TensorFlow profiler session was active") and out["nested_stopped"]
    assert out["ours"] == "" and out["ours_ops"] == 1
    assert out["again"] == ""  # stopping leaves the profiler free


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
