"""The pytest plugin, run with pytester in subprocesses."""

import pytest

# slow tier: pytest inside pytest (pytester runs a whole pytest per case)
pytestmark = [pytest.mark.filterwarnings("ignore"), pytest.mark.slow]


@pytest.mark.placement
def test_failing_placement_assertion_shows_where_matmul_ran(pytester):
    pytester.makepyfile(test_gpu="""
        import tensorflow as tf
        def test_matmul_on_gpu(placement_log):
            tf.matmul(tf.ones((2, 3)), tf.ones((3, 2)))
            placement_log.assert_placed("MatMul", "GPU:0")
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*AssertionError: expected MatMul on /device:GPU:0, but it was placed on /device:CPU:0:*",
        "*(/device:GPU:0 does not exist in this process; its devices are /device:CPU:0)",
        "*MatMul*/device:CPU:0*execute*1*",
    ])


def test_a_run_that_uses_nothing_of_tfplace_never_imports_tensorflow(pytester):
    pytester.makepyfile(test_plain="""
        import sys
        def test_plain():
            assert "tensorflow" not in sys.modules
    """)
    result = pytester.runpytest_subprocess("-p", "tfplace", "-p", "no:cacheprovider", "--tfplace-update-snapshots")
    result.assert_outcomes(passed=1)
    assert "tfplace devices" not in result.stdout.str()


def test_logical_cpus_option_ini_marker_and_header(pytester):
    pytester.makeini("[pytest]\ntfplace_logical_cpus = 2\n")
    pytester.makepyfile(test_two="""
        import pytest, tensorflow as tf, tfplace
        def test_cpu1(placement_log):
            with tfplace.device("CPU:1"):
                tf.matmul(tf.ones((2, 3)), tf.ones((3, 2)))
            placement_log.assert_placed("MatMul", "CPU:1")
            placement_log.assert_not_placed("MatMul", "CPU:0")
        @pytest.mark.requires_gpu(n=2)
        def test_needs_gpus():
            raise AssertionError("must be skipped")
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["tfplace devices: /device:CPU:0, /device:CPU:1",
                                 "SKIPPED [[]1[]] test_two.py:*: test_needs_gpus requires_gpu(n=2): "
                                 "it needs 2 GPU(s), 0 visible"])
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tfplace-logical-cpus=3", "-k", "cpu1")
    result.stdout.fnmatch_lines(["tfplace devices: /device:CPU:0, /device:CPU:1, /device:CPU:2"])
    result.assert_outcomes(passed=1, deselected=1)


def test_failures_and_warnings_point_at_the_test_line(pytester):
    pytester.makepyfile(test_where="""
        import pytest, tensorflow as tf

        def test_placed(placement_log):
            tf.matmul(tf.ones((2, 3)), tf.ones((3, 2)))
            placement_log.assert_placed("MatMul", "CPU:1")

        def test_snapshot(placement_log, placement_snapshot):
            tf.ones(2) * 2.0
            placement_snapshot.assert_match(placement_log)

        def test_trivially_not_placed(placement_log):
            tf.ones(2) * 2.0
            placement_log.assert_not_placed("Mul", "GPU:3")
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2, passed=1)
    output = result.stdout.str()
    result.stdout.fnmatch_lines([
        ">       placement_log.assert_placed(\"MatMul\", \"CPU:1\")",
        "E       AssertionError: expected MatMul on /device:CPU:1, but it was placed on /device:CPU:0:",
        "E         (/device:CPU:1 does not exist in this process; its devices are /device:CPU:0)",
        "*",
        "test_where.py:5: AssertionError",
        "*",
        ">       placement_snapshot.assert_match(placement_log)",
        "E       AssertionError: no placement snapshot at *test_snapshot.json*",
        "test_where.py:9: AssertionError",
        "*",
        "*/test_where.py:13: RuntimeWarning: tfplace: assert_not_placed('Mul', 'GPU:3') holds trivially: "
        "/device:GPU:3 does not exist in this process; its devices are /device:CPU:0",
    ])
    assert "placement_log.py" not in output and "pytest_plugin.py" not in output and "snapshots.py" not in output


def test_marker_arguments_are_checked(pytester):
    pytester.makepyfile(test_marks="""
        import pytest

        @pytest.mark.requires_gpu(n="2")
        def test_text(): pass

        @pytest.mark.requires_gpu(n=0)
        def test_zero(): pass

        @pytest.mark.requires_gpu(-1)
        def test_negative(): pass

        @pytest.mark.requires_gpu(gpus=2)
        def test_unknown(): pass

        @pytest.mark.transfer_guard(level="bogus")
        def test_level(): pass

        @pytest.mark.transfer_guard("log", strict=True)
        def test_guard_unknown(): pass

        @pytest.mark.transfer_guard("log")
        def test_log_level(): pass
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=6, passed=1)
    gpu = "allowed is n, a whole number >= 1 (default 1), e.g. @pytest.mark.requires_gpu(n=2)"
    level = "allowed is level, one of 'disallow', 'log', 'allow' (default 'disallow')"
    result.stdout.fnmatch_lines_random([
        f"test_marks.py::test_text: @pytest.mark.requires_gpu received n='2' (str) (from the marker's arguments): "
        f"{gpu}",
        f"test_marks.py::test_zero: @pytest.mark.requires_gpu received n=0 (int) (from the marker's arguments): {gpu}",
        f"test_marks.py::test_negative: @pytest.mark.requires_gpu received n=-1 (int) *: {gpu}",
        f"test_marks.py::test_unknown: @pytest.mark.requires_gpu received (gpus=2) *: {gpu}",
        f"test_marks.py::test_level: @pytest.mark.transfer_guard received level='bogus' (from the marker's "
        f"arguments): {level}",
        f"test_marks.py::test_guard_unknown: @pytest.mark.transfer_guard received ('log', strict=True) *: {level}",
    ])


def test_transfer_guard_fails_a_test_that_asks_for_a_device_that_does_not_exist(pytester):
    pytester.makepyfile(test_missing="""
        import pytest, tensorflow as tf

        @pytest.mark.transfer_guard
        def test_two_cpus():
            with tf.device("CPU:1"):
                y = tf.ones(2) * 2.0

        @pytest.mark.transfer_guard
        def test_one_cpu():
            with tf.device("CPU:0"):
                y = tf.ones(2) + 1.0
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([
        "*test_missing.py::test_two_cpus: @pytest.mark.transfer_guard guarded nothing between devices that do not "
        "exist: the test asked for /device:CPU:1 (at test_missing.py:6), and this process has only /device:CPU:0, "
        "so TensorFlow ran those ops elsewhere and copied nothing. Give the test its devices "
        "(--tfplace-logical-cpus=N*"])
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tfplace-logical-cpus=2").assert_outcomes(passed=2)


def test_bad_option_and_disabling(pytester):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--tfplace-logical-cpus=0")
    result.stderr.fnmatch_lines(
        ["*logical_cpus=0 (from option --tfplace-logical-cpus) is not allowed: expected a whole number >= 1*"])
    assert result.ret != 0
    result = pytester.runpytest_subprocess("-p", "no:tfplace", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "tfplace devices" not in result.stdout.str()


def test_markers_are_registered(pytester):
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines(["*requires_gpu(n=1): skip the test unless at least n GPUs*"])


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
