"""Function placement as TensorFlow decides it: place, removed, compiled and failed records,
tf.data functions, copies from where memory is, TensorFlow's threads, a live `complete`."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import PRELUDE, ROOT, result_of, run_python

pytestmark = pytest.mark.placement  # reads where ops ran: CI runs it again with oneDNN off

TWO_CPUS = """
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)
"""  # indented as the test programs are


def run_file(tmp_path, code: str, *, env: dict | None = None):
    """Runs `code` from a file (autograph reads a function's source) and returns what it reported."""
    path = tmp_path / "program.py"
    path.write_text(PRELUDE + textwrap.dedent(code), encoding="utf-8")
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=ROOT, timeout=240,
                          env=env)
    return result_of(done)


@pytest.mark.parametrize("onednn", ["1", "0"])
def test_keras_fit_records_dense_layers_under_their_own_op_types(tmp_path, onednn):
    import os
    out = run_file(tmp_path, TWO_CPUS + """
        import numpy as np, keras
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
        model.compile("adam", "mse")
        x, y = np.ones((32, 4), np.float32), np.ones((32, 1), np.float32)
        with tfplace.capture_placement() as log:
            model.fit(x, y, epochs=1, batch_size=8, verbose=0)
        checks = {}
        for op in ("MatMul", "BiasAdd", "Relu"):
            try:
                log.assert_placed(op, "CPU:0")
                checks[op] = "ok"
            except AssertionError as err:
                checks[op] = str(err)
        report({"checks": checks, "complete": log.complete,
                "variants": sorted({r.op for r in log.records if r.op.startswith(("_Fused", "_Mkl"))}),
                "gathers": len([r for r in log.records if r.op == "GatherV2" and r.kind == "place"]),
                "kinds": sorted({r.kind for r in log.records})})
    """, env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": onednn})
    assert out["checks"] == {"MatMul": "ok", "BiasAdd": "ok", "Relu": "ok"}
    assert out["variants"] == []
    assert out["gathers"] > 0, "Keras's batching dataset function (tf.gather) has records"
    assert out["complete"] is True
    assert {"execute", "place"} <= set(out["kinds"])


def test_a_replicas_function_converted_by_autograph_names_the_users_lines(tmp_path):
    out = run_file(tmp_path, TWO_CPUS + """
        strategy = tf.distribute.MirroredStrategy(["/CPU:0", "/CPU:1"])
        flag = 1

        @tf.function
        def step(x):
            def replica_step(y):
                if flag == 1:  # converted: the replica's code is autograph's
                    z = tf.matmul(y, y)
                return z * 2.0
            return strategy.run(replica_step, args=(x,))

        with tfplace.capture_placement(sources=True) as log:
            step(tf.ones((2, 2)))
        report(sorted({(r.op, r.device, r.source.rpartition(":")[2]) for r in log.records
                       if r.op in ("MatMul", "Mul")}))
    """)
    text = (tmp_path / "program.py").read_text().splitlines()  # the program's own lines, not autograph's
    matmul, mul = (next(i for i, line in enumerate(text, 1) if marker in line) for marker in ("tf.matmul", "z * 2"))
    assert out == [["MatMul", f"/device:CPU:{i}", str(matmul)] for i in (0, 1)] + \
        [["Mul", f"/device:CPU:{i}", str(mul)] for i in (0, 1)]


def test_dataset_map_function_recorded_eagerly_and_inside_a_function(tmp_path):
    out = run_file(tmp_path, """
        import tensorflow as tf, tfplace
        ds = tf.data.Dataset.range(8).map(lambda x: x * 2).batch(2)
        with tfplace.capture_placement() as eager:
            total = sum(int(tf.reduce_sum(b)) for b in ds)
        @tf.function
        def loop():
            s = tf.constant(0, tf.int64)
            for b in ds:
                s += tf.reduce_sum(b)
            return s
        with tfplace.capture_placement() as inside:
            total_in = int(loop())
        def muls(log):
            return sorted({(r.name, r.device, r.kind) for r in log.records if r.op == "Mul"})
        report({"total": [total, total_in], "eager": muls(eager), "inside": muls(inside),
                "complete": [eager.complete, inside.complete]})
    """)
    assert out["total"] == [56, 56]
    assert ["mul", "/device:CPU:0", "place"] in out["eager"]
    assert ["mul", "/device:CPU:0", "place"] in out["inside"]
    assert out["complete"] == [True, True]


def test_xla_function_is_compiled_whole_on_the_calls_device(tmp_path):
    out = run_file(tmp_path, TWO_CPUS + """
        @tf.function(jit_compile=True)
        def scaled(v):
            with tf.device("CPU:1"):
                return v * 5.0
        with tfplace.capture_placement() as log:
            with tf.device("CPU:0"):
                y = scaled(tf.ones(3))
        report({"compiled": sorted({(r.op, r.device, r.requested) for r in log.records if r.kind == "compiled"}),
                "complete": log.complete, "reason": log.incomplete_reason, "y": y.numpy().tolist()})
    """)
    assert ["Mul", "/device:CPU:0", "/device:CPU:1"] in out["compiled"]
    assert {device for _, device, _ in out["compiled"]} == {"/device:CPU:0"}
    assert out["complete"] is True, out["reason"]
    assert out["y"] == [5.0] * 3


def test_failed_eager_op_is_recorded_where_it_ran_and_the_error_propagates(python):
    out = python(TWO_CPUS + """
        with tfplace.capture_placement() as log:
            try:
                tf.matmul(tf.ones((2, 3)), tf.ones((2, 3)))
                raised = None
            except tf.errors.InvalidArgumentError as err:
                raised = type(err).__name__
            with tf.device("CPU:1"):
                try:
                    tf.matmul(tf.ones((2, 3)), tf.ones((2, 3)))
                except tf.errors.InvalidArgumentError:
                    pass
        report({"raised": raised, "failed": [(r.op, r.device, r.requested) for r in log.records
                                             if r.kind == "failed"]})
    """)
    assert out["raised"] == "InvalidArgumentError"
    assert out["failed"] == [["MatMul", "/device:CPU:0", ""], ["MatMul", "/device:CPU:1", "/device:CPU:1"]]


def test_a_call_tensorflow_rejects_before_running_is_no_failed_record(python):
    """A concrete function given an argument of the wrong dtype: TensorFlow logs no execution of it."""
    out = python("""
        import tensorflow as tf, tfplace

        @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
        def double(x):
            return x * 2
        concrete = double.get_concrete_function()
        with tfplace.capture_placement() as log:
            try:
                concrete(tf.constant([1, 2], tf.int32))
            except tf.errors.InvalidArgumentError as err:
                raised = str(err).split(" as input")[0]
        report({"raised": raised, "failed": [r.op for r in log.records if r.kind == "failed"]})
    """)
    assert out["raised"].startswith("cannot compute __inference_double_") and out["failed"] == []


def test_an_empty_function_called_first_in_the_block_leaves_the_log_complete(python):
    """A function with only a Python side effect: TensorFlow places nothing, at its first call or later."""
    out = python("""
        import tensorflow as tf, tfplace
        noted = []

        @tf.function
        def note():
            noted.append(1)

        with tfplace.capture_placement() as log:
            note()
            note()
        with tfplace.capture_placement() as again:
            note()
        report([log.complete, log.incomplete_reason, again.complete, len(noted)])
    """)
    assert out == [True, "", True, 1]


def test_copies_follow_where_the_memory_is(tmp_path):
    out = run_file(tmp_path, TWO_CPUS + """
        with tfplace.capture_placement() as strings:
            with tf.device("CPU:1"):
                s = tf.constant(["a", "b"])
                joined = tf.strings.join([s, s])
        @tf.function
        def on_cpu1(v):
            with tf.device("CPU:1"):
                return v * 3.0
        x = tf.ones(3)
        with tfplace.capture_placement() as function_output:
            with tf.device("CPU:0"):
                out = on_cpu1(x)
                z = out + 1.0
        report({"backing": out.backing_device, "device": out.device,
                "strings": [tuple(c[:4]) for c in strings.copies],
                "output": [tuple(c[:4]) for c in function_output.copies]})
    """)
    assert out["device"].endswith("CPU:0") and out["backing"].endswith("CPU:1")
    assert out["strings"] == []
    # The argument crosses into the function's Mul on CPU:1 (a function transfer), and the result,
    # whose memory stays on CPU:1, crosses back into the eager AddV2.
    assert out["output"] == [["Mul", 0, "/device:CPU:0", "/device:CPU:1"],
                             ["AddV2", 0, "/device:CPU:1", "/device:CPU:0"]]


def test_complete_is_live_and_an_incomplete_snapshot_fails_whatever_the_order(pytester):
    body = """
        step(tf.ones(2))
        print("LIVE", request.node.name, placement_log.complete)   # read inside the block
        placement_snapshot.assert_match(placement_log)
    """
    pytester.makepyfile(test_order=textwrap.dedent("""
        import tensorflow as tf

        @tf.function
        def step(v):
            return v * 2.0

        def test_a(request, placement_log, placement_snapshot):{body}
        def test_b(request, placement_log, placement_snapshot):{body}
    """).format(body=textwrap.indent(textwrap.dedent(body), "    ")))
    snapshots = pytester.path / "__placement__" / "test_order"
    for first, second in (("test_a", "test_b"), ("test_b", "test_a")):
        for path in snapshots.glob("*.json"):
            path.unlink()
        result = pytester.runpytest_subprocess("-p", "tfplace", "-s", "-W", "ignore", "--tfplace-update-snapshots",
                                               f"test_order.py::{first}", f"test_order.py::{second}")
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.fnmatch_lines([f"*LIVE {first} True", f"*LIVE {second} False",
                                     f"*_ {second} _*", "E*incomplete placement log cannot be compared*step*"])
        assert sorted(p.name for p in snapshots.glob("*.json")) == [f"{first}.json"]


def test_from_text_equals_the_capture_of_the_same_run_for_the_guides_first_cell(tmp_path):
    program = tmp_path / "guide.py"
    program.write_text(PRELUDE + textwrap.dedent("""
        import tensorflow as tf, tfplace
        tf.debugging.set_log_device_placement(True)
        with tfplace.capture_placement() as log:
            a = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
            b = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
            c = tf.matmul(a, b)
        report([[r.op, r.name, r.device, r.kind] for r in log.records])
    """), encoding="utf-8")
    done = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    captured = result_of(done)
    out = run_python(f"""
        import tfplace
        log = tfplace.PlacementLog.from_text({done.stderr!r})
        report([[r.op, r.name, r.device, r.kind] for r in log.records])
    """)
    assert captured == [["MatMul", "", "/device:CPU:0", "execute"]]
    assert result_of(out) == captured


def test_from_text_reads_both_streams_of_a_run_as_its_stderr_alone(tmp_path):
    """TensorFlow prints each placer line twice, bare on stdout and with its log prefix on stderr (a prefix that
    changed in 2.21): a log of both streams (`python script.py > log 2>&1`) names each node once."""
    program = tmp_path / "function.py"
    program.write_text(textwrap.dedent("""
        import tensorflow as tf
        tf.debugging.set_log_device_placement(True)
        @tf.function
        def f(x):
            return tf.matmul(x, x) + 1.0
        print(f(tf.constant([[1.0, 2.0], [3.0, 4.0]])))
    """), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFPLACE_", "TF_CPP"))}
    merged = subprocess.run([sys.executable, str(program)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=ROOT, env=env, timeout=120)
    alone = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, cwd=ROOT, env=env,
                           timeout=120)
    assert merged.returncode == alone.returncode == 0, alone.stderr[-2000:]
    out = run_python(f"""
        import tfplace
        report([[[r.op, r.name, r.device, r.kind] for r in tfplace.PlacementLog.from_text(text).records]
                for text in ({merged.stdout!r}, {alone.stderr!r})])
    """)
    both, stderr = result_of(out)
    assert both == stderr
    assert ["AddV2", "add", "/device:CPU:0", "place"] in stderr and stderr[-1][3] == "execute"


def test_trace_reports_the_ops_of_a_thread_the_script_starts(tmp_path):
    script = tmp_path / "threaded.py"
    script.write_text(textwrap.dedent("""
        import threading
        import tensorflow as tf

        def work():
            x = tf.ones((2, 2))
            for _ in range(10):
                x = tf.matmul(x, x)

        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
    """), encoding="utf-8")
    out_json = tmp_path / "trace.json"
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", f"--json={out_json}", str(script)],
                          capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    records = json.loads(out_json.read_text())["records"]
    assert sum(r["count"] for r in records if r["op"] == "MatMul" and r["kind"] == "execute") == 10
    assert "MatMul 10" in done.stdout


def test_reading_a_log_changes_nothing(python):
    out = python("""
        import tensorflow as tf, tfplace
        x = tf.ones(2)
        f = tf.function(lambda v: v + 1.0)
        with tfplace.capture_placement() as log:
            f(x)
            sizes = [len(log), len(log.records), repr(log).count("records")]
            log.records.clear()
            after = len(log)
        report({"sizes": sizes, "after": after, "json": sorted(log.to_json())})
    """)
    assert out["sizes"][0] == out["sizes"][1] > 1
    assert out["after"] == out["sizes"][0]
    assert out["json"] == ["complete", "copies", "cost", "format", "incomplete_reason", "incomplete_reasons", "memory",
                           "records", "runs", "transfers", "uncertain"]


def test_function_records_made_when_the_log_is_read_are_those_made_at_once_and_in_the_same_places(tmp_path):
    """A capture makes a placed function's records when its log is first read; a memory capture, which counts
    records as they come, makes them at once: the same program gives both the same records, node runs and
    copies, each copy still with its record (the timeline's arrows), whether read inside the block or after."""
    out = run_file(tmp_path, TWO_CPUS + """
        import json, os, re, tempfile
        from tfplace.placement.functions import _lowering

        lowered = []
        placer_nodes = _lowering.placer_nodes
        _lowering.placer_nodes = lambda *args, **kwargs: lowered.append(1) or placer_nodes(*args, **kwargs)

        def program(memory):
            with tf.device("/cpu:1"):
                far = tf.ones((2, 2))
            f = tf.function(lambda v: tf.nn.relu(tf.matmul(v, v)) + 1.0)
            g = tf.function(lambda v: tf.reduce_sum(v * 2.0))

            @tf.function
            def across(v):  # on two devices: its transfers wait too
                with tf.device("/cpu:1"):
                    w = v * 3.0
                return w + 1.0

            with tfplace.capture_placement(sources=True, memory=memory) as log:
                f(tf.ones((2, 2)))
                across(tf.ones((2, 2)))
                near = tf.ones((2, 2)) + far  # an implicit copy, after the function's records
                before = len(lowered)
                inside = len(log)  # read inside the block: what waited is made, and later events go after it
                g(near)
                f(near)
            path = os.path.join(tempfile.mkdtemp(), "timeline.json")
            log.to_perfetto(path)
            with open(path) as file:
                flows = [(e["ph"], e["ts"], re.sub(r"_[0-9]+", "", e["name"]), e.get("args", {}).get("op"))
                         for e in json.load(file)["traceEvents"] if e.get("ph") in ("s", "f", "X")]
            unnumbered = lambda name: re.sub(r"_[0-9]+$", "", name)  # each run traces its functions anew
            return {"lowered_before_read": before, "inside": inside,
                    "records": [[unnumbered(r.op), r.name, r.device, r.kind, r.source, r.origin] for r in log.records],
                    "copies": [[c.op, c.from_device, c.to_device, c.source, c.kind, unnumbered(c.function), c.tensor,
                                c.call] for c in log.copies],
                    "runs": sorted([list(key), count] for key, count in log.runs.items()), "flows": flows}

        line = next(i for i, text in enumerate(open(__file__), 1) if "across(tf.ones" in text)
        report({"later": program(memory=False), "at_once": program(memory=True), "line": line})
    """)
    later, at_once = out["later"], out["at_once"]
    assert later["lowered_before_read"] == 0 and at_once["lowered_before_read"] > 0
    assert later["inside"] == at_once["inside"] > 3
    for field in ("records", "copies", "runs", "flows"):
        assert later[field] == at_once[field], field
    assert [c[4] for c in later["copies"]].count("function") >= 2  # into /cpu:1 and back, with the call's line
    assert all(c[7].endswith(f"program.py:{out['line']}") for c in later["copies"] if c[4] == "function")
    assert ["AddV2", "/device:CPU:1", "/device:CPU:0"] in [c[:3] for c in later["copies"]]
    assert any(flow[0] == "s" for flow in later["flows"])  # the copy's arrow
    assert any(r[0] == "MatMul" and r[3] == "place" for r in later["records"])


def test_functions_whose_records_wait_are_few_the_oldest_made_first(python):
    """The graphs of functions whose records wait for the log's reading are held for a bounded number of
    functions: beyond it, the oldest are made (their records then as if read at once)."""
    out = python("""
        import tensorflow as tf, tfplace
        from tfplace.placement.functions import _collected
        from tfplace.placement.session import _session
        x = tf.ones(2)
        with tfplace.capture_placement() as log:
            for i in range(_collected._UNMADE_LIMIT + 6):
                tf.function(lambda v, i=i: v * (i + 2.0))(x)
            waiting = [ref() for ref in _session.runtime().unmade]
        report({"waiting": len(waiting), "unmade": sum(not later.made for later in waiting if later is not None),
                "limit": _collected._UNMADE_LIMIT,
                "functions": len({r.op for r in log.records if r.kind == "execute" and r.op.startswith("__inference")}),
                "muls": len([r for r in log.records if r.op == "Mul" and r.kind == "place"])})
    """)
    assert out["waiting"] == out["unmade"] == out["limit"]
    assert out["functions"] == out["muls"] == out["limit"] + 6


def test_a_function_tensorflow_does_not_inline_is_placed_on_its_own_on_the_calls_device(python):
    placed = python("""
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)

        @tf.function(experimental_attributes={"_noinline": True})
        def inner(x):
            with tf.device("CPU:1"):
                y = tf.sin(x)
            return y * 2.0

        @tf.function
        def outer(x):
            with tf.device("CPU:0"):
                return inner(x) + 1.0

        with tfplace.capture_placement() as log:
            outer(tf.ones((2,)))
        report([log.complete, sorted({(r.name, r.op, r.device[-5:]) for r in log.records if r.kind == "place"}),
                sorted({(c.function[:15], c.op, c.from_device[-5:], c.to_device[-5:]) for c in log.copies})])
    """)
    complete, records, copies = placed
    assert complete
    # TensorFlow's placer block for inner (when the PartitionedCall node first runs): its nodes on the call's
    # device, Sin where it asked
    assert {("Sin", "Sin", "CPU:1"), ("mul", "Mul", "CPU:0"), ("mul/y", "Const", "CPU:0"),
            ("PartitionedCall", "PartitionedCall", "CPU:0")} <= {tuple(r) for r in records}
    assert (["__inference_inn", "Mul", "CPU:1", "CPU:0"] in copies
            and ["__inference_inn", "Sin", "CPU:0", "CPU:1"] in copies)
