"""The capture session: made by the first capture or guard, shared by every thread's, dropped by the last; and
what a capture says of a `tf.compat.v1.Session`, which places its graph where no hook reaches."""

import subprocess
import sys


def test_one_session_from_the_first_capture_to_the_last_and_nothing_left_behind(python):
    found = python("""
        import threading, tensorflow as tf, tfplace
        from tfplace.placement.session import _session
        from tfplace import _tensorflow
        x = tf.ones((2, 2))
        seen = {"before": _session.current() is None}
        with tfplace.capture_placement() as outer:
            first = _session.current()
            other = {}
            def work():
                with tfplace.capture_placement() as log:
                    other["same"] = _session.current() is first
                    tf.matmul(x, x)
                other["records"] = len(log)
            thread = threading.Thread(target=work)
            thread.start(); thread.join()
            with tfplace.transfer_guard("log"):
                seen["nested"] = _session.current() is first
            seen["hooks"] = len(first.hooks)
        seen["after"] = _session.current() is None
        seen["thread"] = other
        seen["patched"] = [getattr(_tensorflow.SET_DEVICE.owner, _tensorflow.SET_DEVICE.name) is not
                           _tensorflow.SET_DEVICE.replaced]
        with tfplace.capture_placement():
            seen["fresh"] = _session.current() is not first and _session.current().described == {}
        report(seen)
    """)
    assert found == {"before": True, "nested": True, "hooks": 1, "after": True,
                     "thread": {"same": True, "records": 1}, "patched": [False], "fresh": True}


def test_the_code_objects_a_session_keys_on_stay_as_many_as_the_code_that_ran(python):
    found = python("""
        import tensorflow as tf, tfplace
        from tfplace.placement.session import _session
        f = tf.function(lambda x: x * 2.0)
        g = tf.function(lambda x: x + 1.0)
        x = tf.ones(2)
        def from_here():
            return f(x)
        def from_there():
            return g(x)
        with tfplace.capture_placement(sources=True):
            session = _session.current()
            from_here(); from_there()
            first = len(session.pinned)
            for _ in range(200):  # calls from two places in turn: each reads its origin and line afresh
                from_here(); from_there()
            report({"first": first, "after": len(session.pinned), "origins": len(session.origin_shortcuts)})
    """)
    assert 0 < found["after"] == found["first"] and found["origins"] <= found["after"]


GPU_GUIDE_TF1 = """
import numpy as np, tensorflow as tf
graph = tf.Graph()
with graph.as_default():
    with tf.device("/cpu:0"):
        x = tf.compat.v1.placeholder(tf.float32, (2, 2), name="x")
    with tf.device("/cpu:1"):
        c = tf.matmul(x, x, name="c")
    d = tf.add_n([c, x], name="d")
config = tf.compat.v1.ConfigProto(device_count={"CPU": 2})
with tf.compat.v1.Session(graph=graph, config=config) as sess:
    for step in range(3):
        sess.run(d, feed_dict={x: [[1.0, 2.0], [3.0, float(step)]]})   # the runs
    print(sess.make_callable(d, feed_list=[x])([[1.0, 0.0], [0.0, 1.0]]).tolist())  # a callable: a run
    from tensorflow.core.protobuf.config_pb2 import CallableOptions
    options = CallableOptions(feed=[x.name], fetch=[d.name])  # as tf_keras' graph mode makes its callables
    print(sess._make_callable_from_options(options)(np.eye(2, dtype="float32"))[0].tolist())
"""


def test_a_capture_records_what_a_tf1_session_placed_ran_and_moved_and_says_what_it_could_not(python):
    # TF1's "Using GPUs" guide through tf.compat.v1: the Session places its graph itself, at its first run.
    found = python("""
        import tensorflow as tf, tfplace
        with tfplace.capture_placement(sources=True) as log:
            exec(compile(PROGRAM, "guide.py", "exec"))
        report([[[r.op, r.name, r.device, r.kind, r.source] for r in log.records],
                sorted([c.op, c.input_index, c.from_device, c.to_device, c.tensor, c.bytes, c.call]
                       for c in log.copies),
                {d: f.executions for d, f in log.cost().devices.items()}, log.complete, log.incomplete_reason])
    """.replace("PROGRAM", repr(GPU_GUIDE_TF1)))
    records, copies, executions, complete, reason = found
    assert records == [["MatMul", "c", "/device:CPU:1", "place", "guide.py:8"],
                       ["AddN", "d", "/device:CPU:0", "place", "guide.py:9"],
                       # x is fed, so it never runs: where TensorFlow's placer puts a node asking for CPU:0
                       ["Placeholder", "x", "/device:CPU:0", "place", "guide.py:6"]], records
    # one transfer per tensor crossing devices (x feeds both of MatMul's inputs: one), per run
    runs = ["guide.py:13"] * 3 + ["guide.py:14"]
    assert copies == sorted([["AddN", 0, "/device:CPU:1", "/device:CPU:0", "c:0", 16, line] for line in runs]
                            + [["MatMul", 0, "/device:CPU:0", "/device:CPU:1", "x:0", 16, line]
                               for line in runs]), copies
    assert executions == {"/device:CPU:0": 4, "/device:CPU:1": 4}, executions  # each run's MatMul and AddN
    assert complete is False  # the callable made from options, alone
    assert "no run of the block needed" not in reason, reason
    assert ("a tf.compat.v1.Session's graph (3 node(s), at guide.py:17) through a callable:" in reason
            and "Session.run is recorded" in reason), reason


def test_a_session_made_before_the_capture_has_its_runs_recorded_and_its_placement_said_unknown(python):
    found = python("""
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)
        graph = tf.Graph()
        with graph.as_default():
            x = tf.compat.v1.placeholder(tf.float32, (2, 2))
            with tf.device("/cpu:1"):
                y = x * 2.0
        sess = tf.compat.v1.Session(graph=graph)
        with tfplace.capture_placement() as log:
            sess.run(y, feed_dict={x: [[1.0, 2.0], [3.0, 4.0]]})
        report([len(log.records), {d: f.executions for d, f in log.cost().devices.items()}, log.incomplete_reason])
    """)
    records, executions, reason = found
    assert records == 0 and executions == {"/device:CPU:1": 2}, found  # the Mul and its constant
    assert reason.startswith("the block ran a tf.compat.v1.Session that was made or ran while no capture or guard "
                             "listened"), reason
    assert "Open the capture before the Session is made, around its runs" in reason


def test_a_trace_of_a_tf1_session_leads_with_what_it_did_not_record(tmp_path):
    (tmp_path / "guide.py").write_text(GPU_GUIDE_TF1)
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "guide.py"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("== tfplace trace:"))
    assert lines[start].startswith("== tfplace trace: 3 op placement(s)"), lines[start]
    assert lines[start + 1].startswith("incomplete log: the block ran a tf.compat.v1.Session's graph (3 node(s), "
                                       "at guide.py:17) through a callable"), lines
    assert "  /device:CPU:1  1 compute op type(s): MatMul 4" in lines, done.stdout
    assert "(no ops ran)" not in done.stdout, done.stdout


def test_guards_watch_a_tf1_sessions_runs_and_refuse_to_vouch_for_its_callables(python):
    found = python("""
        import numpy as np, tensorflow as tf, tfplace
        from tensorflow.core.protobuf.config_pb2 import CallableOptions
        tfplace.configure(logical_cpus=2)
        graph = tf.Graph()
        with graph.as_default():
            x = tf.compat.v1.placeholder(tf.float32, (2, 2), name="x")
            with tf.device("/cpu:1"):
                c = tf.matmul(x, x)
        seen = []
        for guard in (tfplace.transfer_guard(), tfplace.device_guard("CPU:0")):
            try:
                with guard:
                    sess = tf.compat.v1.Session(graph=graph)
                    sess.run(c, feed_dict={x: [[1.0, 2.0], [3.0, 4.0]]})
                seen.append("passed")
            except tfplace.Error as error:
                seen.append([type(error).__name__, str(error)])
        try:
            with tfplace.transfer_guard():
                options = CallableOptions(feed=[x.name], fetch=[c.name])
                sess._make_callable_from_options(options)(np.eye(2, dtype="float32"))
        except tfplace.Error as error:
            seen.append([type(error).__name__, str(error)])
        with tfplace.transfer_guard("allow"):
            seen.append(float(sess.run(c, feed_dict={x: [[1.0, 0.0], [0.0, 1.0]]}).sum()))
        report(seen)
    """)
    (copy_kind, copy_text), (device_kind, device_text), (callable_kind, callable_text), total = found
    assert copy_kind == "ImplicitCopyError" and "inside function a tf.compat.v1.Session's graph" in copy_text, copy_text
    assert "MatMul" in copy_text and "/device:CPU:0" in copy_text and "/device:CPU:1" in copy_text, copy_text
    assert device_kind == "PlacementError" and "MatMul" in device_text and "/device:CPU:1" in device_text, device_text
    assert callable_kind == "ImplicitCopyError" and callable_text.startswith(
        "tfplace.transfer_guard('disallow') cannot watch what it was given"), callable_text
    assert total == 2.0


def test_a_session_with_its_own_config_is_told_what_it_does_not_take_from_configure(python):
    found = python("""
        import warnings, tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2, soft_placement=True)
        graph = tf.Graph()
        with graph.as_default():
            c = tf.constant(1.0) * 2.0
        with warnings.catch_warnings(record=True) as caught, tfplace.capture_placement():
            warnings.simplefilter("always")
            tf.compat.v1.Session(graph=graph)                                                  # takes the process's
            tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto())               # its own
            tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto())               # said once
            tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto(
                device_count={"CPU": 2}, allow_soft_placement=True))                            # agrees
        report([str(w.message) for w in caught if "ConfigProto" in str(w.message)])
    """)
    assert len(found) == 1, found
    assert found[0].startswith("tfplace: a tf.compat.v1.Session made with its own ConfigProto does not take the "
                               "process's configuration: it has 1 CPU device(s), not the 2 logical CPUs"), found
    assert "its soft placement is False, the process's True" in found[0], found


def test_a_failed_session_run_is_said_and_the_next_run_records_no_placement_twice(python):
    found = python("""
        import tensorflow as tf, tfplace
        with tfplace.capture_placement() as log:
            graph = tf.Graph()
            with graph.as_default():
                x = tf.compat.v1.placeholder(tf.float32, (2,), name="x")
                y = tf.multiply(x, 2.0, name="y")
            sess = tf.compat.v1.Session(graph=graph)
            try:
                sess.run(y)                               # no feed: fails after the Session placed its graph
            except tf.errors.InvalidArgumentError as error:
                failed = type(error).__name__
            sess.run(y, feed_dict={x: [1.0, 2.0]})
        report([failed, [r.name for r in log.records], log.incomplete_reason])
    """)
    failed, names, reason = found
    assert failed == "InvalidArgumentError" and names == [], found
    assert reason.startswith("a tf.compat.v1.Session's run at <string>:"), reason
    assert "failed (InvalidArgumentError): what its Session placed for it is not recorded" in reason, reason


def test_a_session_that_may_have_run_unseen_between_two_captures_is_not_taken_as_placing_again(python):
    found = python("""
        import tensorflow as tf, tfplace
        graph = tf.Graph()
        with graph.as_default():
            y = tf.multiply(tf.ones((2,)), 2.0, name="y")
        with tfplace.capture_placement():
            sess = tf.compat.v1.Session(graph=graph)     # made while a capture listens
        sess.run(y)                                      # its first run, unseen: TensorFlow places the graph here
        with tfplace.capture_placement() as later:
            sess.run(y)
        with tfplace.capture_placement() as first:       # a Session made and run in one capture
            other = tf.compat.v1.Session(graph=graph)
            other.run(y)
        with tfplace.capture_placement() as again:       # its graph unchanged since: nothing placed, nothing unknown
            other.run(y)
        report([[r.name for r in later.records], later.incomplete_reason, sorted(r.name for r in first.records),
                [r.name for r in again.records], again.complete])
    """)
    later, reason, first, again, complete = found
    assert later == [] and "made or ran while no capture or guard listened" in reason, found
    assert "y" in first and again == [] and complete is True, found


def test_a_partial_run_is_said_not_to_be_recorded(python):
    found = python("""
        import tensorflow as tf, tfplace
        with tfplace.capture_placement() as log:
            graph = tf.Graph()
            with graph.as_default():
                x = tf.compat.v1.placeholder(tf.float32, (), name="x")
                y = tf.multiply(x, 2.0, name="y")
            sess = tf.compat.v1.Session(graph=graph)
            handle = sess.partial_run_setup([y], [x])
            value = float(sess.partial_run(handle, y, feed_dict={x: 3.0}))
        report([value, log.complete, log.incomplete_reason])
    """)
    value, complete, reason = found
    assert value == 6.0 and complete is False, found
    assert "through a partial run: the Session places and runs it where tfplace's hooks do not reach" in reason, reason
