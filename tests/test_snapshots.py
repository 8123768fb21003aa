"""Placement snapshots and the transfer_guard marker, through pytester (each run a subprocess)."""

import json

import pytest

from tfplace import snapshots
from tfplace.placement_log import PlacementLog

pytestmark = pytest.mark.filterwarnings("ignore")

TEST_FILE = """
    import pytest, tensorflow as tf, tfplace

    WHERE = "{where}"

    def test_step(placement_log, placement_snapshot):
        with tf.device(WHERE):
            tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
        tf.function(lambda x: x * 2.0)(tf.ones(2))
        placement_snapshot.assert_match(placement_log)

    @pytest.mark.parametrize("n", [1, 2])
    def test_param(placement_log, placement_snapshot, n):
        for _ in range(n):
            tf.ones(1) + 1.0
        placement_snapshot.assert_match(placement_log)
"""


def test_snapshot_missing_written_matching_and_moved(pytester):
    pytester.makeini("[pytest]\ntfplace_logical_cpus = 2\n")
    pytester.makepyfile(test_model=TEST_FILE.format(where="CPU:1"))
    missing = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    missing.assert_outcomes(failed=3)
    missing.stdout.fnmatch_lines(["*AssertionError: no placement snapshot at *__placement__/test_model/test_step.json:"
                                  " run pytest with --tfplace-update-snapshots to write it*"])

    written = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tfplace-update-snapshots")
    written.assert_outcomes(passed=3)
    written.stdout.fnmatch_lines(["tfplace: wrote 3 placement snapshot(s)"])
    folder = pytester.path / "__placement__" / "test_model"
    assert sorted(p.name for p in folder.iterdir()) == ["test_param[1].json", "test_param[2].json", "test_step.json"]
    step = json.loads((folder / "test_step.json").read_text())
    assert step["placement"]["/device:CPU:1"] == {"Fill": 2, "MatMul": 1}
    assert step["placement"]["/device:CPU:0"]["Mul"] == 1
    assert not any(op.startswith("_Arg") or op[-1].isdigit() for ops in step["placement"].values() for op in ops)
    assert json.loads((folder / "test_param[2].json").read_text())["placement"] == {
        "/device:CPU:0": {"AddV2": 2, "Fill": 2}}

    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=3)
    on_workers = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--tfplace-update-snapshots")
    on_workers.stdout.fnmatch_lines(["tfplace: wrote 3 placement snapshot(s)", "*3 passed*"])  # pytest-xdist

    pytester.makepyfile(test_model=TEST_FILE.format(where="CPU:0"))
    moved = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "test_step")
    moved.assert_outcomes(failed=1, deselected=2)
    moved.stdout.fnmatch_lines([
        "*AssertionError: placement differs from the snapshot *test_step.json:",
        "*MatMul moved from /device:CPU:1 to /device:CPU:0: /device:CPU:0 0 -> 1, /device:CPU:1 1 -> 0",
        "*--tfplace-update-snapshots*",
    ])


def test_transfer_guard_marker_fails_a_test_with_a_copy(pytester):
    pytester.makeini("[pytest]\ntfplace_logical_cpus = 2\n")
    pytester.makepyfile(test_copies="""
        import pytest, tensorflow as tf, tfplace

        @pytest.mark.transfer_guard
        def test_copies():
            with tf.device("CPU:0"):
                x = tf.ones(2)
            with tf.device("CPU:1"):
                y = x + tf.ones(2)

        @pytest.mark.transfer_guard
        def test_explicit():
            with tf.device("CPU:0"):
                x = tf.ones(2)
            with tf.device("CPU:1"):
                y = tfplace.to_device(x, "CPU:1") + tf.ones(2)

        def test_unguarded():
            with tf.device("CPU:0"):
                x = tf.ones(2)
            with tf.device("CPU:1"):
                y = x + tf.ones(2)
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=2)
    result.stdout.fnmatch_lines(["*ImplicitCopyError: implicit copy at test_copies.py:8: AddV2 input #0 lives on "
                                 "/device:CPU:0, but AddV2 runs on /device:CPU:1*"])


def test_markers_and_option_are_registered(pytester):
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines(["*transfer_guard(level=\"disallow\"): fail the test at its first implicit*"])
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(["*--tfplace-update-snapshots*"])


def test_differences_name_each_change():
    before = {"/device:CPU:0": {"AddV2": 2}, "/device:CPU:1": {"MatMul": 1}}
    after = {"/device:CPU:0": {"AddV2": 3, "MatMul": 1}}
    assert snapshots.differences(before, after) == [
        "AddV2: /device:CPU:0 2 -> 3",
        "MatMul moved from /device:CPU:1 to /device:CPU:0: /device:CPU:0 0 -> 1, /device:CPU:1 1 -> 0",
    ]
    assert snapshots.differences(after, after) == []
    log = PlacementLog.from_text("a: (_Arg): /job:localhost/replica:0/task:0/device:CPU:0\n"
                                 "Executing op __inference_f_123 in device /job:localhost/replica:0/task:0/device:CPU:0\n")
    assert snapshots.placement(log) == {"/device:CPU:0": {"__inference_f": 1}}
