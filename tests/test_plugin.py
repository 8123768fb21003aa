"""The pytest plugin, run with pytester in subprocesses."""

import pytest

pytestmark = pytest.mark.filterwarnings("ignore")


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
        "*MatMul*/device:CPU:0*execute*1*",
    ])


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
                                 "*requires_gpu(n=2): 0 GPU(s) visible*"])
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tfplace-logical-cpus=3", "-k", "cpu1")
    result.stdout.fnmatch_lines(["tfplace devices: /device:CPU:0, /device:CPU:1, /device:CPU:2"])
    result.assert_outcomes(passed=1, deselected=1)


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
