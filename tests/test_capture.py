"""capture_placement(): records, copies, passthrough, nesting, volume and incomplete logs."""

from conftest import result_of, run_python


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
        execs = [(r.op, r.device) for r in log.records if r.kind == "execute" and r.op in ("MatMul", "AddN")]
        report({"execs": execs, "value": total.numpy().tolist(), "complete": log.complete})
    """)
    assert out["execs"] == [["MatMul", "/device:CPU:0"], ["MatMul", "/device:CPU:1"], ["AddN", "/device:CPU:0"]]
    assert out["value"] == [[44.0, 56.0], [98.0, 128.0]] and out["complete"]


def test_tf_function_gives_place_records_with_node_names(python):
    out = python("""
        import tensorflow as tf, tfplace
        @tf.function
        def f(x, y):
            return tf.matmul(x, y) + 1.0
        with tfplace.capture_placement() as log:
            f(tf.ones((2, 2)), tf.ones((2, 2)))
        report(sorted({(r.op, r.name, r.device) for r in log.records if r.kind == "place"
                       and r.op in ("MatMul", "AddV2")}))
    """)
    assert out == [["AddV2", "add", "/device:CPU:0"], ["MatMul", "MatMul", "/device:CPU:0"]]


def test_warn_policy_copy_record(python):
    out = python("""
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2, device_policy="warn")
        with tf.device("CPU:0"):
            x = tf.ones((2, 2))
        with tf.device("CPU:1"):
            y = tf.ones((2, 2))
        with tfplace.capture_placement() as log:
            with tf.device("CPU:1"):
                z = x + y
        report([c[:4] for c in log.copies])
    """)
    assert out == [["AddV2", 0, "/device:CPU:0", "/device:CPU:1"]]


def test_passthrough_nesting_and_restoring():
    done = run_python("""
        import os, tensorflow as tf, tfplace
        print("before", flush=True)
        with tfplace.capture_placement() as outer:
            print("python print")
            os.write(1, b"C-level write\\n")
            os.write(2, b"to stderr\\n")
            with tfplace.capture_placement() as inner:
                tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
            live = len(outer.records)
            try:
                with tfplace.capture_placement(passthrough=False):
                    print("dropped")
                    raise KeyError("boom")
            except KeyError:
                pass
        report({"inner": inner.devices_for("MatMul"), "outer": outer.devices_for("MatMul"), "live": live})
    """)
    out = result_of(done)
    assert out["inner"] == out["outer"] == ["/device:CPU:0"] and out["live"] > 0
    assert done.stdout.splitlines()[:3] == ["before", "python print", "C-level write"]
    assert "dropped" not in done.stdout
    assert "to stderr" in done.stderr and "Executing op" not in done.stdout + done.stderr


def test_two_hundred_thousand_ops_do_not_deadlock(python):
    out = python("""
        import tensorflow as tf, tfplace
        x = None
        with tfplace.capture_placement() as log:
            x = tf.ones(1)
            for _ in range(200_000):
                x = tf.identity(x)
        report(sum(1 for r in log.records if r.op == "Identity" and r.kind == "execute"))
    """, timeout=600)
    assert out == 200_000


def test_hidden_eager_lines_make_an_incomplete_log_with_a_warning(python):
    out = python("""
        import warnings, tensorflow as tf, tfplace
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with tfplace.capture_placement() as log:
                tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
        report({"complete": log.complete, "kinds": sorted({r.kind for r in log.records}),
                "matmul": log.devices_for("MatMul"), "warnings": [str(w.message) for w in caught]})
    """, env={"TF_CPP_MIN_LOG_LEVEL": "1"})
    assert out["complete"] is False and out["kinds"] == ["place"] and out["matmul"] == ["/device:CPU:0"]
    assert any("TF_CPP_MIN_LOG_LEVEL=1" in w for w in out["warnings"])


def test_capture_after_runtime_started_without_logging_says_so(python):
    out = python("""
        import warnings, tensorflow as tf, tfplace
        tf.ones(1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with tfplace.capture_placement() as log:
                tf.ones(2) + 1
        report({"complete": log.complete, "reason": log.incomplete_reason, "warned": len(caught)})
    """)
    assert out["complete"] is False and out["warned"] == 1
    assert "placement logging was off when TensorFlow's runtime started" in out["reason"]


def test_under_pytest_capture_modes(pytester):
    pytester.makepyfile(test_modes="""
        import os, tensorflow as tf, tfplace
        def test_capture():
            with tfplace.capture_placement() as log:
                print("visible-marker")
                tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
            log.assert_placed("MatMul", "CPU:0")
            assert False, "show output"
    """)
    for mode in ("fd", "sys", "no"):
        result = pytester.runpytest_subprocess(f"--capture={mode}", "-p", "no:cacheprovider")
        result.assert_outcomes(failed=1)
        assert "visible-marker" in result.stdout.str()
        assert "AssertionError: show output" in result.stdout.str()


def test_python_level_streams_as_under_jupyter(python):
    """Where sys.stdout is not fd 1 (IPython's OutStream), lines written to it are captured too."""
    out = python("""
        import io, sys, tensorflow as tf, tfplace
        notebook = io.StringIO()
        real, sys.stdout = sys.stdout, notebook
        with tfplace.capture_placement() as log:
            print("cell output")
            # TensorFlow may route its eager lines through sys.stdout in a notebook:
            print("Executing op MatMul in device /job:localhost/replica:0/task:0/device:CPU:0")
            tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
        sys.stdout = real
        report({"notebook": notebook.getvalue(), "execs": [r.op for r in log.records if r.kind == "execute"]})
    """)
    assert out["notebook"] == "cell output\n"
    assert out["execs"].count("MatMul") == 2  # the routed line and the fd-level one


def test_other_threads_output_is_not_lost():
    done = run_python("""
        import os, threading, time, tensorflow as tf, tfplace
        def chatter():
            for i in range(50):
                os.write(1, f"thread line {i}\\n".encode())
                time.sleep(0.001)
        with tfplace.capture_placement() as log:
            worker = threading.Thread(target=chatter)
            worker.start()
            for _ in range(200):
                tf.identity(tf.ones(1))
            worker.join()
        report(len(log.records))
    """)
    assert result_of(done) > 0
    assert [line for line in done.stdout.splitlines() if line.startswith("thread line")] == [
        f"thread line {i}" for i in range(50)]
