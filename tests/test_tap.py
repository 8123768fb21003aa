"""Quiet placement logging: captures work at any time, the terminal stays as it was."""

from conftest import result_of, run_python

DESIGN_EXAMPLE = """
    import tensorflow as tf
    import tfplace
    tfplace.configure(soft_placement=True, memory_growth=True)
    with tfplace.try_gpu():
        x = tf.ones((2, 3))
    print("before capture")
    with tfplace.capture_placement() as log:
        y = tf.matmul(x, tf.transpose(x))
    log.assert_placed("MatMul", "CPU:0")
    z = y + 1
    print("Executing op MatMul in device /job:localhost/replica:0/task:0/device:CPU:0")  # the program's own line
    report({"complete": log.complete, "matmul": log.devices_for("MatMul"), "shown": tfplace.configure().log_placement})
    import sys; sys.stdout.write("no newline at the end"); sys.stdout.flush()
"""


def test_design_example_captures_after_ops_and_keeps_the_terminal_clean():
    done = run_python(DESIGN_EXAMPLE)
    out = result_of(done)
    assert out == {"complete": True, "matmul": ["/device:CPU:0"], "shown": False}
    lines = done.stdout.splitlines()
    assert lines[0] == "before capture"
    assert lines[1] == "Executing op MatMul in device /job:localhost/replica:0/task:0/device:CPU:0"
    assert done.stdout.endswith("\nno newline at the end")
    assert ": (MatMul): /job" not in done.stdout
    assert "execute.cc" not in done.stderr and "placer.cc" not in done.stderr


def test_log_placement_true_shows_lines_and_false_turns_logging_off():
    shown = run_python("""
        import tensorflow as tf, tfplace
        tfplace.configure(log_placement=True)
        tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
        report(tfplace.configure().log_placement)
    """)
    assert result_of(shown) is True and "Executing op MatMul" in shown.stderr
    off = run_python("""
        import warnings, tensorflow as tf, tfplace
        tfplace.configure(log_placement=False)
        tf.ones(1)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            with tfplace.capture_placement() as log:
                tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
        try:
            tfplace.configure(log_placement=True)
            error = ""
        except tfplace.RuntimeInitializedError as err:
            error = str(err)
        report({"complete": log.complete, "error": error})
    """)
    out = result_of(off)
    assert out["complete"] is False and "Executing op" not in off.stderr
    assert "log_placement=True (from argument log_placement) cannot be applied" in out["error"]


def test_showing_and_hiding_after_start():
    done = run_python("""
        import tensorflow as tf, tfplace
        tfplace.configure()
        tf.identity(tf.ones(1))
        tfplace.configure(log_placement=True)
        tf.add(tf.ones(1), 2.0)
        tfplace.configure(log_placement=False)
        tf.multiply(tf.ones(1), 3.0)
        report("done")
    """)
    assert result_of(done) == "done"
    assert "Executing op AddV2" in done.stderr
    assert "Executing op Identity" not in done.stderr and "Executing op Mul" not in done.stderr


def test_spool_rotation_loses_nothing():
    done = run_python("""
        import os, tensorflow as tf, tfplace
        from tfplace import tap
        tap._ROTATE_BYTES = 4096
        tfplace.configure()
        for i in range(3000):
            tf.identity(tf.ones(1))
            if i % 10 == 0:
                os.write(1, f"line {i}\\n".encode())
        report("done")
    """, timeout=300)
    assert result_of(done) == "done"
    assert [l for l in done.stdout.splitlines() if l.startswith("line ")] == [f"line {i}" for i in range(0, 3000, 10)]
    assert "Executing op" not in done.stderr
