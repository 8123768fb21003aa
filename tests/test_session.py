"""The capture session: made by the first capture or guard, shared by every thread's, dropped by the last; and
what a capture says of a `tf.compat.v1.Session`, which places its graph where no hook reaches."""

import subprocess
import sys


def test_one_session_from_the_first_capture_to_the_last_and_nothing_left_behind(python):
    found = python("""
        import threading, tensorflow as tf, tfplace
        from tfplace.placement import _session
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
        from tfplace.placement import _session
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
import tensorflow as tf
graph = tf.Graph()
with graph.as_default():
    with tf.device("/cpu:0"):
        a = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    with tf.device("/cpu:1"):
        c = tf.matmul(a, a)
    d = tf.add_n([c, a])
config = tf.compat.v1.ConfigProto(device_count={"CPU": 2})
with tf.compat.v1.Session(graph=graph, config=config) as sess:
    print(sess.run(d).tolist())            # the run
    print(sess.make_callable(d)().tolist())  # the callable
    from tensorflow.core.protobuf.config_pb2 import CallableOptions
    options = CallableOptions(fetch=[d.name])  # as tf_keras' graph mode makes its callables
    print(sess._make_callable_from_options(options)()[0].tolist())
"""


def test_a_capture_around_a_tf1_session_says_it_recorded_none_of_its_nodes(python):
    # TF1's "Using GPUs" guide through tf.compat.v1: the Session places its graph itself, out of tfplace's reach.
    found = python("""
        import warnings, tensorflow as tf, tfplace
        with warnings.catch_warnings(record=True) as caught, tfplace.capture_placement() as log:
            warnings.simplefilter("always")
            exec(compile(PROGRAM, "guide.py", "exec"))
        report([log.complete, log.incomplete_reason, len(log.records), [str(w.message) for w in caught]])
    """.replace("PROGRAM", repr(GPU_GUIDE_TF1)))
    complete, reason, records, warned = found
    assert complete is False and records == 0
    assert reason.count("the block ran a tf.compat.v1.Session's graph (3 node(s), at guide.py:") == 3, reason
    assert "guide.py:12" in reason and "guide.py:13" in reason and "guide.py:16" in reason, reason
    assert "none of them (nor their transfers) is recorded" in reason, reason
    assert len(warned) == 3 and all("incomplete placement log" in w for w in warned), warned


def test_a_trace_of_a_tf1_session_leads_with_what_it_did_not_record_and_never_says_no_ops_ran(tmp_path):
    (tmp_path / "guide.py").write_text(GPU_GUIDE_TF1)
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "guide.py"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("== tfplace trace:"))
    assert lines[start + 1].startswith("incomplete log: the block ran a tf.compat.v1.Session's graph"), lines
    assert "(no ops ran)" not in done.stdout, done.stdout
    assert "  (none recorded: the log is incomplete, see why above)" in lines, done.stdout


def test_guards_refuse_to_vouch_for_a_tf1_sessions_graph_and_allow_lets_it_run(python):
    found = python("""
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)
        graph = tf.Graph()
        with graph.as_default():
            with tf.device("/cpu:1"):
                c = tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
        sess = tf.compat.v1.Session(graph=graph)
        seen = []
        for guard in (tfplace.transfer_guard(), tfplace.device_guard("CPU:0")):
            try:
                with guard:
                    sess.run(c)
                seen.append("passed")
            except tfplace.Error as error:
                seen.append([type(error).__name__, str(error)])
        with tfplace.transfer_guard("allow"):
            seen.append(float(sess.run(c).sum()))
        report(seen)
    """)
    (copy_kind, copy_text), (device_kind, device_text), total = found
    assert copy_kind == "ImplicitCopyError" and device_kind == "PlacementError"
    assert copy_text.startswith("tfplace.transfer_guard('disallow') cannot watch what it was given: the block ran a "
                                "tf.compat.v1.Session's graph"), copy_text
    assert device_text.startswith("tfplace.device_guard('/device:CPU:0') cannot watch"), device_text
    assert "write the step as a tf.function" in copy_text
    assert total == 8.0
