"""capture_placement(): records from TensorFlow's hooks, on every CPU, at any time, output untouched."""

import os
import pty
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, TWO_CPUS_XY, line_of, run_python

pytestmark = pytest.mark.placement  # reads where ops ran: CI runs it again with oneDNN off

GUIDE_LINE = "Executing op MatMul in device /job:localhost/replica:0/task:0/device:CPU:0"


@pytest.mark.parametrize("onednn", ["1", "0"])
def test_matmul_in_two_successive_captures_on_both_onednn_modes(python, onednn):
    out = python("""
        import tensorflow as tf, tfplace
        from tensorflow.python.util import _pywrap_util_port
        logs = []
        for _ in range(2):
            with tfplace.capture_placement() as log:
                tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
            log.assert_placed("MatMul", "CPU:0")
            logs.append(log)
        report({"onednn": _pywrap_util_port.IsMklEnabled(), "ops": [[r.op for r in l.records] for l in logs],
                "lines": [l.guide_lines() for l in logs]})
    """, env={"TF_ENABLE_ONEDNN_OPTS": onednn})
    assert out["onednn"] is (onednn == "1")
    assert out["ops"] == [["Fill", "Fill", "MatMul"]] * 2
    assert [lines[-1] for lines in out["lines"]] == [GUIDE_LINE] * 2


def test_capture_after_first_op_at_log_level_3_leaves_the_descriptors_alone(python):
    out = python("""
        import os, tensorflow as tf, tfplace
        x = tf.ones(3)
        def files():
            return [(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (1, 2)]
        before = files()
        with tfplace.capture_placement() as log:
            inside = files()
            y = x * 2.0
        report({"ops": [(r.op, r.device, r.kind) for r in log.records], "complete": log.complete,
                "same": before == inside == files()})
    """, env={"TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out == {"ops": [["Mul", "/device:CPU:0", "execute"]], "complete": True, "same": True}


def _run_on_terminal(code: str) -> str:
    """Runs `code` with fds 0, 1 and 2 on a pseudo-terminal; returns what the terminal showed."""
    main, child = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFPLACE_", "TF_CPP"))}
    process = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdin=child, stdout=child,
                               stderr=child, cwd=ROOT, env=env, close_fds=True)
    os.close(child)
    shown = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    process.wait(timeout=240)
    os.close(main)
    return shown.decode(errors="replace")


def test_terminal_stays_a_terminal_after_configure_and_inside_a_capture():
    shown = _run_on_terminal("""
        import os, tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)
        with tfplace.capture_placement():
            tf.ones(1) + 1
            print("isatty", os.isatty(1), os.isatty(2), flush=True)
    """)
    assert "isatty True True" in shown


def test_last_words_before_abort_reach_stderr():
    done = run_python("""
        import os, tensorflow as tf, tfplace
        tfplace.configure()
        with tfplace.capture_placement():
            tf.ones(1) + 1
            os.write(2, b"last words before abort\\n")
            os.abort()
    """)
    assert done.returncode != 0
    assert "last words before abort" in done.stderr


COPIES = TWO_CPUS_XY + """
    with tfplace.capture_placement() as implicit:
        with tf.device("CPU:1"):
            z = x + y  # the copy
    with tfplace.capture_placement() as explicit:
        with tf.device("CPU:1"):
            w = tfplace.to_device(x, "CPU:1") + y
            s = tf.identity(x) + y
    with tfplace.capture_placement() as unscoped:
        for _ in range(2):
            t = tf.identity(y)  # no scope: it runs on CPU:0 and reads y from CPU:1
    report({"copies": [list(c[:5]) for c in implicit.copies], "explicit": len(explicit.copies),
            "unscoped": [list(c[:5]) for c in unscoped.copies], "ran": [r.device for r in unscoped.records]})
"""


def test_implicit_copy_has_its_source_line_and_explicit_copies_none(python):
    out = python(COPIES)
    (op, index, source, target, line), = out["copies"]
    assert (op, index, source, target) == ("AddV2", 0, "/device:CPU:0", "/device:CPU:1")
    assert line == line_of(COPIES, "# the copy")
    assert out["explicit"] == 0
    # an identity is an explicit copy under a tf.device scope only (TensorFlow's "warn" policy logs this one)
    assert out["ran"] == ["/device:CPU:0"] * 2
    assert out["unscoped"] == [["Identity", 0, "/device:CPU:1", "/device:CPU:0",
                                line_of(COPIES, "t = tf.identity(y)")]] * 2


def test_host_memory_arguments_are_not_copies(python):
    out = python("""
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)
        with tf.device("CPU:0"):
            dims = tf.constant([2, 2])
        with tfplace.capture_placement() as log:
            with tf.device("CPU:1"):
                filled = tf.fill(dims, 1.0)   # Fill keeps `dims` in host memory
        report({"copies": len(log.copies), "fill": log.devices_for("Fill")})
    """)
    assert out == {"copies": 0, "fill": ["/device:CPU:1"]}


def test_variables_handed_to_ops_are_read_where_they_live_and_each_read_is_recorded(python):
    out = python("""
        import tensorflow as tf, tfplace
        from tensorflow.python.ops import resource_variable_ops
        tfplace.configure(logical_cpus=2)
        with tf.device("CPU:0"):
            v = tf.Variable([1.0, 2.0])
        c = tf.constant(2.0)
        with tfplace.capture_placement(sources=True) as log:
            tf.multiply(v, v)            # TensorFlow's fast path reads v twice, in C++
            c * v                        # once
            with tf.device("CPU:1"):
                v * 2.0                  # read on CPU:0, where v lives; the product on CPU:1
            v.assign_add([1.0, 1.0])     # no read
        reads = [(r.device, r.requested, r.origin, r.source.split(":")[-1]) for r in log.records
                 if r.op == "ReadVariableOp"]
        left = [name for name in ("_dtype", "_handle") if name in vars(resource_variable_ops.BaseResourceVariable)]
        report({"ops": [r.op for r in log.records], "reads": reads, "copies": [(c.op, c.from_device, c.to_device)
                for c in log.copies], "left": left, "value": v.numpy().tolist()})
    """)
    assert out["ops"] == ["ReadVariableOp", "ReadVariableOp", "Mul", "ReadVariableOp", "Mul", "ReadVariableOp", "Mul",
                          "AssignAddVariableOp"]
    lines = [int(read[3]) for read in out["reads"]]
    assert [read[:3] for read in out["reads"]] == [["/device:CPU:0", "", "user"]] * 3 + [
        ["/device:CPU:0", "/device:CPU:1", "user"]]
    assert lines[0] == lines[1] and lines[1] < lines[2] < lines[3]  # each read on the line that handed v over
    assert out["copies"] == [["Mul", "/device:CPU:0", "/device:CPU:1"]]  # the value read moves to the product
    assert out["left"] == [] and out["value"] == [2.0, 3.0]  # the variables are as they were after the block


def test_replica_threads_are_recorded_and_other_threads_are_not(python):
    out = python("""
        import threading, tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)
        strategy = tfplace.strategy()
        with tfplace.capture_placement() as log:
            strategy.run(lambda: tf.matmul(tf.ones((2, 2)), tf.ones((2, 2))))
            worker = threading.Thread(target=lambda: tf.math.sqrt(tf.ones(2)))
            worker.start()
            worker.join()
        report({"matmul": sorted(log.devices_for("MatMul")), "sqrt": log.devices_for("Sqrt")})
    """)
    assert out == {"matmul": ["/device:CPU:0", "/device:CPU:1"], "sqrt": []}


def test_a_capture_closing_in_another_thread_leaves_this_threads_capture_whole(python):
    out = python("""
        import threading, warnings, tensorflow as tf, tfplace
        from tensorflow.python.eager import execute
        early = tf.function(lambda v: v * 3.0)
        early(tf.ones(2))
        opened, closed = threading.Event(), threading.Event()
        def other():
            opened.wait()
            with tfplace.capture_placement():
                tf.ones(2) * 2.0
            closed.set()
        worker = threading.Thread(target=other)
        worker.start()
        with warnings.catch_warnings(record=True):
            with tfplace.capture_placement() as log:
                opened.set()
                closed.wait()
                early(tf.ones(2))
        worker.join()
        report({"ops": [r.op for r in log.records], "complete": log.complete,
                "patched": execute.execute is not execute.quick_execute})
    """)
    assert [op.startswith("__inference_") for op in out["ops"]] == [False, True], out  # Fill, the function call
    assert out["complete"] is False and out["patched"] is False


def test_functions_placed_before_and_inside_the_block(python):
    code = """
        import warnings, tensorflow as tf, tfplace
        @tf.function
        def early(x):
            return tf.matmul(x, x) + 1.0
        @tf.function
        def fresh(x):
            return tf.matmul(x, x) * 2.0
        early(tf.ones((2, 2)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with tfplace.capture_placement() as before:
                early(tf.ones((2, 2)))  # placed earlier
            with tfplace.capture_placement() as inside:
                fresh(tf.ones((2, 2)))
        report({"before": [before.complete, before.incomplete_reason, [r.kind for r in before.records]],
                "inside": [inside.complete,
                           sorted({(r.op, r.name, r.kind) for r in inside.records if r.kind == "place"})],
                "warnings": [str(w.message) for w in caught], "lineno": [w.lineno for w in caught]})
    """
    out = python(code)
    complete, reason, kinds = out["before"]
    assert complete is False and "ran function __inference_early_" in reason
    assert "placed before the block opened" in reason
    assert "place" not in kinds
    assert out["warnings"] == [f"tfplace: incomplete placement log: {reason}"]
    assert [f"<string>:{n}" for n in out["lineno"]] == [line_of(code, "# placed earlier")]  # the call's line
    complete, places = out["inside"]
    assert complete is True
    assert ["MatMul", "MatMul", "place"] in places and ["Mul", "mul", "place"] in places


@pytest.mark.parametrize("returns", ["none", "its own ops"])
def test_another_op_callback_before_the_captures_leaves_the_log_complete_with_each_nodes_line(python, returns):
    # TensorFlow hands each graph op callback what the one before returned: None from one that only looks (a
    # debugger's), tensors of ops it made itself from one that instruments (a numerics checker's); a constant
    # `convert_to_tensor` makes comes with no name
    out = python("""
        import sys, tensorflow as tf, tfplace
        from tensorflow.python.framework import op_callbacks

        def looks(op_type, inputs, attrs, outputs, op_name=None, graph=None):
            if sys.argv[1] == "none" or graph is None or not outputs or outputs[0].dtype != tf.float32:
                return None
            return [tf.identity(t) for t in outputs]   # replaces a float op's outputs with its own ops'
        op_callbacks.add_op_callback(looks)

        @tf.function
        def f(x):
            one = tf.cast(tf.convert_to_tensor(1), tf.float32)  # line 16
            return x + one                                      # line 17

        with tfplace.capture_placement(sources=True) as log:
            f(tf.ones((2, 2)))
        report({"complete": log.complete, "reason": log.incomplete_reason,
                "nodes": sorted({(r.op, r.source.rsplit(":", 1)[-1]) for r in log.records
                                 if r.kind in ("place", "removed") and r.op in ("Const", "Cast", "AddV2")})})
    """, args=[returns])
    assert out == {"complete": True, "reason": "", "nodes": [["AddV2", "17"], ["Cast", "16"], ["Const", "16"]]}


def test_eager_ops_are_recorded_once_and_a_pinned_one_op_function_is_kept(python):
    out = python("""
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)
        x = tf.ones((2, 2))
        with tf.device("CPU:1"):
            v = tf.Variable(1.0)
        @tf.function
        def bump(step):   # one op pinned to a full device name, no result: like TensorFlow's eager-op wrappers
            with tf.device("/job:localhost/replica:0/task:0/device:CPU:1"):
                v.assign_add(step)
        with tfplace.capture_placement() as log:
            with tf.device("CPU:1"):
                tf.add_n([x, x, x]); tf.split(x, 2); tf.Variable(1.0).assign_add(2.0); tf.matmul(x, x)
            bump(x[0, 0])
        report({"complete": log.complete,
                "records": sorted({(r.op, r.name, r.kind) for r in log.records if not r.op.startswith("__")})})
    """)
    assert out["complete"] is True
    assert out["records"] == sorted(map(list, {
        ("AddN", "", "execute"), ("Split", "", "execute"), ("VarHandleOp", "", "execute"),
        ("AssignVariableOp", "", "execute"), ("AssignAddVariableOp", "", "execute"), ("MatMul", "", "execute"),
        ("StridedSlice", "", "execute"), ("_Arg", "step", "place"), ("_Arg", "assignaddvariableop_resource", "place"),
        ("AssignAddVariableOp", "AssignAddVariableOp", "place")}))


def test_tensorboard_graph_trace_keeps_collecting_after_a_capture_and_is_warned(python):
    code = """
        import warnings, tensorflow as tf, tfplace
        from tensorflow.python.eager import context
        x = tf.ones(2)
        tf.summary.trace_on(graph=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with tfplace.capture_placement() as log:
                tf.function(lambda v: v * 2.0)(x)   # placed in the capture
        tf.function(lambda v: v + 2.0)(x)
        after = [n.op for f in context.context().export_run_metadata().function_graphs
                 for n in f.post_optimization_graph.node]
        tf.summary.trace_off()
        report({"mul": log.devices_for("Mul"), "traced_after": "AddV2" in after,
                "warnings": [[str(w.message), w.lineno] for w in caught]})
    """
    out = python(code)
    assert out["mul"] == ["/device:CPU:0"] and out["traced_after"] is True
    (message, lineno), = out["warnings"]
    assert "tf.summary.trace_on(graph=True)" in message and "trace_export will not show" in message
    assert f"<string>:{lineno}" == line_of(code, "# placed in the capture")


def test_nesting_live_reads_and_exceptions_leave_no_hook(python):
    out = python("""
        import tensorflow as tf, tfplace
        from tensorflow.python.eager import context, execute
        with tfplace.capture_placement() as outer:
            with tfplace.capture_placement() as inner:
                tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
            live = outer.devices_for("MatMul")
            try:
                with tfplace.capture_placement():
                    tf.ones(1) + 1
                    raise KeyError("boom")
            except KeyError:
                pass
            tf.ones(1) * 2
        tf.ones(1) - 1
        report({"inner": inner.devices_for("MatMul"), "outer": [r.op for r in outer.records], "live": live,
                "callbacks": len(context.context().op_callbacks),
                "patched": execute.execute is not execute.quick_execute})
    """)
    assert out["inner"] == out["live"] == ["/device:CPU:0"]
    assert out["outer"] == ["Fill", "Fill", "MatMul", "Fill", "AddV2", "Fill", "Mul"]
    assert out["callbacks"] == 0 and out["patched"] is False


def test_sources_name_the_users_line(python):
    code = """
        import tensorflow as tf, tfplace
        with tfplace.capture_placement(sources=True) as log:
            a = tf.ones((2, 2))
            b = tf.matmul(a, a)
        with tfplace.capture_placement() as plain:
            tf.matmul(a, a)
        report({"sources": [(r.op, r.source) for r in log.records], "plain": [r.source for r in plain.records]})
    """
    out = python(code)
    ones, matmul = line_of(code, "tf.ones((2, 2))"), line_of(code, "b = tf.matmul")
    assert out["sources"] == [["Fill", ones], ["MatMul", matmul]]
    assert out["plain"] == [""]


def test_manual_replication_on_two_logical_cpus(python):
    out = python("""
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)
        with tfplace.capture_placement() as log:
            c = []
            for d in ["CPU:0", "CPU:1"]:
                with tf.device(d):
                    a = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
                    b = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
                    c.append(tf.matmul(a, b))
            with tf.device("/cpu:0"):
                total = tf.add_n(c)
        report({"execs": [(r.op, r.device) for r in log.records], "value": total.numpy().tolist(),
                "complete": log.complete})
    """)
    assert out["execs"] == [["MatMul", "/device:CPU:0"], ["MatMul", "/device:CPU:1"], ["AddN", "/device:CPU:0"]]
    assert out["value"] == [[44.0, 56.0], [98.0, 128.0]] and out["complete"]


def test_one_hundred_thousand_ops_are_all_recorded(python):
    out = python("""
        import tensorflow as tf, tfplace
        x = tf.ones(1)
        with tfplace.capture_placement() as log:
            for _ in range(100_000):
                x = tf.identity(x)
        report(sum(1 for r in log.records if r.op == "Identity" and r.kind == "execute"))
    """, timeout=600)
    assert out == 100_000


def test_capture_before_the_runtime_starts_then_configure(python):
    out = python("""
        import tensorflow as tf, tfplace
        with tfplace.capture_placement() as log:
            tfplace.configure(logical_cpus=2)
            with tf.device("CPU:1"):
                tf.function(lambda x: x * 2.0)(tf.ones(2))
        report({"complete": log.complete, "mul": [(r.device, r.kind) for r in log.records if r.op == "Mul"]})
    """)
    assert out == {"complete": True, "mul": [["/device:CPU:1", "place"]]}


REPEATED_OPS = '''
import keras, tensorflow as tf

x = tf.ones((2, 2))
layer = keras.layers.Dense(3)
variable = tf.Variable(tf.ones((2, 2)))
with tf.device("/cpu:1"):
    far_variable = tf.Variable(tf.ones((2, 2)))


def helper(t):
    return tf.identity(t) * 2.0


def read(v):
    return tf.identity(v)


def program():
    for step in range(4):
        for device in ("/cpu:0", "/cpu:1", None, "/gpu:0"):
            with tf.device(device):
                y = x + 1.0
                y = helper(y)
            z = y * x
        helper(x)
        with tf.device("/cpu:1"):
            helper(x)
        helper(tf.cast(x, tf.float64))
        read(variable)
        read(far_variable)
        layer(x)
        other = layer(x)
        tf.identity(variable)
        for element in tf.data.Dataset.range(2):
            tf.cast(element, tf.float32) + 1.0
        tf.nest.map_structure(lambda t: t + 1.0, [x, x * 3.0])
'''


def test_ops_repeated_from_a_line_get_the_records_a_fresh_reading_gives(python, tmp_path):
    """An eager op a thread ran before from the same call, with the same device, scope and attributes, takes
    its record from the callback's kept entries: sources, origins, requesters and copies equal those the
    callback reads afresh for every op, when the scope alternates, a helper is called from two lines, a Keras layer's
    line is further out than the frame that decides its origin, or an op copies."""
    program = tmp_path / "repeated.py"
    program.write_text(REPEATED_OPS)
    out = python(f"""
        import runpy, sys, tensorflow as tf, tfplace
        from tfplace.placement.taking import _callback
        tfplace.configure(logical_cpus=2)
        program = runpy.run_path({str(program)!r})["program"]
        program()  # Keras builds its layer, tf.data its functions
        learned, original = [], _callback.Hook._learn
        def counting(self, *args):
            learned.append(args[0])
            return original(self, *args)
        def fields(log):
            return ([[r.op, r.device, r.source, r.origin, r.requested, r.requested_by, r.kind, r.dtypes]
                     for r in log.records],
                    [[c.op, c.input_index, c.from_device, c.to_device, c.source, c.kind] for c in log.copies])
        runs = {{}}
        for kept in ("kept", "none"):
            _callback.Hook._learn = counting if kept == "kept" else (lambda self, *args: None)
            for sources in (True, False):
                with tfplace.capture_placement(sources=sources) as log:
                    program()
                runs[f"{{kept}} {{sources}}"] = fields(log)
        _callback.Hook._learn = original
        report({{"runs": runs, "learned": len(learned)}})
    """)
    runs = out["runs"]
    for sources in (True, False):
        assert runs[f"kept {sources}"] == runs[f"none {sources}"]
    records, copies = runs["kept True"]
    assert out["learned"] / 2 < len(records) / 4  # per run: most records came from kept entries
    def line(marker):
        return f"{program}:{next(n for n, text in enumerate(REPEATED_OPS.splitlines(), 1) if marker in text)}"

    def count(*record, dtype="float32", attribute="T"):
        return sum(1 for r in records if r[:7] == list(record) and r[7] == [[attribute, dtype]])

    assert count("MatMul", "/device:CPU:0", line("layer(x)"), "user", "", "", "execute") == 4
    assert count("AddV2", "/device:CPU:1", line("y = x + 1.0"), "user", "/device:CPU:1", line("with tf.device(device)"),
                 "execute") == 4
    assert count("Mul", "/device:CPU:1", line("tf.identity(t) * 2.0"), "user", "/device:CPU:1",
                 line("with tf.device(device)"), "execute") == 4
    assert count("AddV2", "/device:CPU:0", line("lambda t"), "user", "", "", "execute") == 8
    assert count("MatMul", "/device:CPU:0", line("other = layer(x)"), "user", "", "", "execute") == 4
    assert count("ReadVariableOp", "/device:CPU:1", line("return tf.identity(v)"), "user", "", "", "execute",
                 attribute="dtype") == 4
    assert count("Mul", "/device:CPU:0", line("tf.identity(t) * 2.0"), "user", "", "", "execute", dtype="float64") == 4
    assert count("AddV2", "/device:CPU:0", line("y = x + 1.0"), "user", "/device:GPU:0", line("with tf.device(device)"),
                 "execute") == 4
    assert count("Mul", "/device:CPU:1", line("tf.identity(t) * 2.0"), "user", "/device:CPU:1",
                 line('        with tf.device("/cpu:1")'), "execute") == 4
    assert count("IteratorGetNext", "/device:CPU:0", line("tf.data.Dataset"), "input", "", "", "execute",
                 attribute="output_types", dtype="int64") == 8
    assert copies == [["AddV2", 0, "/device:CPU:0", "/device:CPU:1", line("y = x + 1.0"), "eager"],
                      ["Mul", 0, "/device:CPU:1", "/device:CPU:0", line("z = y * x"), "eager"],
                      # an identity under no scope reads the far variable's value where it runs
                      ["Identity", 0, "/device:CPU:1", "/device:CPU:0", line("return tf.identity(v)"), "eager"]] * 4


def test_an_op_repeated_from_a_line_on_another_device_gets_that_devices_record(python):
    """The device an eager op ran on is part of what a kept record must match (on a GPU machine an op without a
    scope runs where its inputs are): the op callback, handed the same op from one line with its output on two
    devices in turn, records each op where it ran."""
    out = python("""
        import tensorflow as tf, tfplace
        from tfplace.placement.taking import _callback
        tfplace.configure(logical_cpus=2)
        class Output:
            def __init__(self, device):
                self.device = device
        devices = ["/job:localhost/replica:0/task:0/device:CPU:" + str(i % 2) for i in range(6)]
        with tfplace.capture_placement() as log:
            hook = _callback.thread_hooks()[0]
            for device in devices:
                hook.callback(b"Neg", (), ("T", 1), (Output(device),))
        report([r.device for r in log.records])
    """)
    assert out == ["/device:CPU:0", "/device:CPU:1"] * 3


def test_an_op_a_thread_pool_runs_has_no_line_in_the_standard_librarys_pool(python):
    """The standard library's pools are plumbing, as its threads are: an op TensorFlow's code makes on a pool's
    thread (MultiWorkerMirroredStrategy's eager all-reduce) names no line of `multiprocessing/pool.py`."""
    out = python("""
        from multiprocessing.pool import ThreadPool
        import tensorflow as tf, tfplace
        x = tf.ones(2)
        with tfplace.capture_placement(sources=True, all_threads=True) as log:
            with ThreadPool(1) as pool:
                pool.apply(tf.identity, (x,))
        report([(r.op, r.source) for r in log.records if r.op == "Identity"])
    """)
    assert out == [["Identity", ""]]
