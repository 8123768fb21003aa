"""Placement snapshots and the transfer_guard marker, through pytester (each run a subprocess)."""

import json
from pathlib import Path

import pytest

from tfplace.integrations import _snapshots
from tfplace.placement.api._log import PlacementLog

# slow tier: pytest inside pytest (pytester runs a whole pytest per case)
pytestmark = [pytest.mark.filterwarnings("ignore"), pytest.mark.slow]

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


@pytest.mark.placement
def test_snapshot_written_with_each_ops_device_and_a_moved_op_named(pytester):
    pytester.makeini("[pytest]\ntfplace_logical_cpus = 2\n")
    pytester.makepyfile(test_model=TEST_FILE.format(where="CPU:1"))
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

    pytester.makepyfile(test_model=TEST_FILE.format(where="CPU:0"))
    moved = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "test_step")
    moved.assert_outcomes(failed=1, deselected=2)
    moved.stdout.fnmatch_lines([
        "*AssertionError: placement differs from the snapshot *test_step.json:",
        "*MatMul moved from /device:CPU:1 to /device:CPU:0: /device:CPU:0 0 -> 1, /device:CPU:1 1 -> 0",
        "*--tfplace-update-snapshots*",
    ])


@pytest.mark.xdist
def test_snapshot_missing_then_written_by_workers_then_matching(pytester):
    pytester.makeini("[pytest]\ntfplace_logical_cpus = 2\n")
    pytester.makepyfile(test_model=TEST_FILE.format(where="CPU:1"))
    missing = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    missing.assert_outcomes(failed=3)
    missing.stdout.fnmatch_lines(["*AssertionError: no placement snapshot at *__placement__/test_model/test_step.json:"
                                  " run pytest with --tfplace-update-snapshots to write it*"])

    on_workers = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--tfplace-update-snapshots")
    on_workers.stdout.fnmatch_lines(["tfplace: wrote 3 placement snapshot(s)", "*3 passed*"])  # pytest-xdist
    folder = pytester.path / "__placement__" / "test_model"
    assert sorted(p.name for p in folder.iterdir()) == ["test_param[1].json", "test_param[2].json", "test_step.json"]
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=3)


def test_each_test_item_has_its_own_snapshot_file(pytester):
    pytester.makepyfile(test_items="""
        import pytest, tensorflow as tf

        def ops(n):
            for _ in range(n):
                tf.ones(1) + 1.0

        class TestA:
            def test_step(self, placement_log, placement_snapshot):
                ops(1)
                placement_snapshot.assert_match(placement_log)

        class TestB:
            def test_step(self, placement_log, placement_snapshot):
                ops(2)
                placement_snapshot.assert_match(placement_log)

        def test_step(placement_log, placement_snapshot):
            ops(3)
            placement_snapshot.assert_match(placement_log)

        @pytest.mark.parametrize("n", [4, 5, 6], ids=["a:b", "a/b", "a_b"])
        def test_param(placement_log, placement_snapshot, n):
            ops(n)
            placement_snapshot.assert_match(placement_log)

        def test_twice(placement_log, placement_snapshot):
            ops(1)
            placement_snapshot.assert_match(placement_log)
            placement_snapshot.assert_match(placement_log)
    """)
    written = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tfplace-update-snapshots")
    written.assert_outcomes(passed=6, failed=1)
    written.stdout.fnmatch_lines(["E*AssertionError: placement_snapshot.assert_match() was called again in "
                                  "test_items.py::test_twice: a test item has one snapshot (*test_twice.json); "
                                  "compare one log, at the end of the test",
                                  "tfplace: wrote 7 placement snapshot(s)"])
    files = sorted((pytester.path / "__placement__" / "test_items").iterdir())
    assert len(files) == 7
    adds = sorted(json.loads(path.read_text())["placement"]["/device:CPU:0"]["AddV2"] for path in files)
    assert adds == [1, 1, 2, 3, 4, 5, 6]
    assert {path.name for path in files} >= {"TestA.test_step.json", "TestB.test_step.json", "test_step.json",
                                             "test_param[a_b].json"}
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "not twice").assert_outcomes(passed=6, deselected=1)


def test_path_for_names_every_item_apart():
    test_file = Path("tests/test_model.py")
    names = [["TestA", "test_step"], ["TestB", "test_step"], ["test_step"], ["test_p[a:b]"], ["test_p[a/b]"],
             ["test_p[a_b]"], ["test_p[a_b]-0123456789"], ["test_p[" + "x" * 300 + "]"], ["test_p[" + "x" * 301 + "]"]]
    paths = [_snapshots.path_for(test_file, parts) for parts in names]
    assert len(set(paths)) == len(paths)
    assert all(path.parent == Path("tests/__placement__/test_model") for path in paths)
    assert [path.name for path in paths[:3]] == ["TestA.test_step.json", "TestB.test_step.json", "test_step.json"]
    assert paths[3].name.startswith("test_p[a_b]-") and paths[4].name.startswith("test_p[a_b]-")
    assert paths[5].name == "test_p[a_b].json"
    assert all(len(path.name) <= 140 for path in paths)


@pytest.mark.parametrize("content, problem", [
    ("{not json", "is not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
    ("[]", "holds a JSON list, not an object"),
    ('{"placement": {}}', 'has no "tfplace_snapshot" key'),
    ('{"tfplace_snapshot": 1}', 'has no "placement" key'),
    ('{"tfplace_snapshot": 99, "placement": {}}', 'has "tfplace_snapshot": 99, not the format 1 this tfplace reads'),
    ('{"tfplace_snapshot": true, "placement": {}}', 'has "tfplace_snapshot": true, not the format 1'),
    ('{"tfplace_snapshot": 1, "placement": {"/device:CPU:0": 3}}',
     'has "placement": {"/device:CPU:0": 3}, not op counts per device'),
    (None, "cannot be read (Is a directory)"),
])
def test_a_file_that_is_not_a_snapshot_is_named_with_the_option_that_rewrites_it(tmp_path, content, problem):
    path = tmp_path / "test_x.json"
    if content is None:
        path.mkdir()
    else:
        path.write_text(content)
    with pytest.raises(_snapshots.SnapshotError) as raised:
        _snapshots.read(path)
    assert str(raised.value).startswith(f"the placement snapshot {path} {problem}")
    assert str(raised.value).endswith("allowed is {\"tfplace_snapshot\": 1, \"placement\": {device: {op: count}}}, "
                                      "as pytest --tfplace-update-snapshots writes it; run pytest with "
                                      "--tfplace-update-snapshots to rewrite it, then review and commit it")


def test_a_broken_snapshot_fails_the_test_and_a_folder_in_its_place_cannot_be_updated(pytester):
    pytester.makepyfile(test_broken="""
        import tensorflow as tf

        def test_bad_json(placement_log, placement_snapshot):
            tf.ones(1) + 1.0
            placement_snapshot.assert_match(placement_log)

        def test_folder(placement_log, placement_snapshot):
            tf.ones(1) + 1.0
            placement_snapshot.assert_match(placement_log)
    """)
    folder = pytester.path / "__placement__" / "test_broken"
    folder.mkdir(parents=True)
    (folder / "test_bad_json.json").write_text('{"tfplace_snapshot": 1, "placement": ')
    (folder / "test_folder.json").mkdir()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines_random([
        "E*AssertionError: the placement snapshot */test_bad_json.json is not JSON (Expecting value: *): allowed is "
        "*run pytest with --tfplace-update-snapshots to rewrite it*",
        "E*AssertionError: the placement snapshot */test_folder.json cannot be read (Is a directory): allowed is*",
    ])
    for raw in ("JSONDecodeError", "IsADirectoryError", "KeyError", "TypeError", "_snapshots.py:"):
        assert raw not in result.stdout.str()
    updated = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tfplace-update-snapshots")
    updated.assert_outcomes(passed=1, failed=1)
    updated.stdout.fnmatch_lines(["E*AssertionError: the placement snapshot */test_folder.json cannot be written "
                                  "(Is a directory): remove what is in its place*",
                                  "tfplace: wrote 1 placement snapshot(s)"])
    assert json.loads((folder / "test_bad_json.json").read_text())["placement"] == {
        "/device:CPU:0": {"AddV2": 1, "Fill": 1}}


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
    assert _snapshots.differences(before, after) == [
        "AddV2: /device:CPU:0 2 -> 3",
        "MatMul moved from /device:CPU:1 to /device:CPU:0: /device:CPU:0 0 -> 1, /device:CPU:1 1 -> 0",
    ]
    assert _snapshots.differences(after, after) == []
    log = PlacementLog.from_text("a: (_Arg): /job:localhost/replica:0/task:0/device:CPU:0\n"
                                 "Executing op __inference_f_123 in device "
                                 "/job:localhost/replica:0/task:0/device:CPU:0\n")
    assert _snapshots.placement(log) == {"/device:CPU:0": {"__inference_f": 1}}


@pytest.mark.xdist
def test_snapshots_no_test_wrote_or_read_are_listed_after_a_whole_run_and_removed_on_update(pytester):
    pytester.makepyfile(test_m="""
        import pytest, tensorflow as tf

        def test_a(placement_log, placement_snapshot):
            tf.ones(1) + 1.0
            placement_snapshot.assert_match(placement_log)

        def test_b(placement_log):  # it no longer compares a snapshot
            tf.ones(1) + 1.0

        @pytest.mark.skip(reason="not here")
        def test_skipped(placement_log, placement_snapshot):
            placement_snapshot.assert_match(placement_log)
    """)
    folder = pytester.path / "__placement__" / "test_m"
    for name in ("test_a", "test_b", "test_skipped", "test_renamed"):
        _snapshots.write(folder / f"{name}.json", {"/device:CPU:0": {"AddV2": 1, "Fill": 1}})
    listed = ("tfplace: 2 placement snapshot(s) unused: no test of this run wrote or read them: "
              "__placement__/test_m/test_b.json, __placement__/test_m/test_renamed.json; "
              "run pytest with --tfplace-update-snapshots to remove them")
    whole = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    whole.assert_outcomes(passed=2, skipped=1)
    whole.stdout.fnmatch_lines([listed])
    on_workers = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2")  # pytest-xdist
    on_workers.stdout.fnmatch_lines([listed])
    for narrowed in (["-k", "test_a or test_skipped"], ["test_m.py::test_a", "test_m.py::test_b"]):
        part = pytester.runpytest_subprocess("-p", "no:cacheprovider", *narrowed)
        assert part.ret == 0 and "unused" not in part.stdout.str(), part.stdout.str()
    assert len(list(folder.iterdir())) == 4
    removed = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tfplace-update-snapshots")
    removed.stdout.fnmatch_lines(["tfplace: wrote 1 placement snapshot(s)",
                                  "tfplace: removed 2 unused placement snapshot(s): __placement__/test_m/test_b.json, "
                                  "__placement__/test_m/test_renamed.json"])
    assert sorted(p.name for p in folder.iterdir()) == ["test_a.json", "test_skipped.json"]


INTERLEAVE_TEST = """
    import json
    import tensorflow as tf, tfplace

    def rows(n):
        for i in range(3):
            yield i * n

    def test_pipeline(placement_log, placement_snapshot):
        interleaved = tf.data.Dataset.range(1, 5).interleave(
            lambda n: tf.data.Dataset.from_generator(rows, args=(n,), output_signature=tf.TensorSpec((), tf.int64)),
            cycle_length=2, num_parallel_calls=tf.data.AUTOTUNE)
        assert sorted(int(v) for v in interleaved) == sorted(i * n for n in range(1, 5) for i in range(3))
        assert not placement_log.complete and placement_log.only_uncertain
        assert {r.op for r in placement_log.uncertain} >= {"PyFunc"}
        again = tfplace.PlacementLog.from_json(json.dumps(placement_log.to_json()))
        assert again.only_uncertain and sorted(again.uncertain) == sorted(placement_log.uncertain)
        placement_snapshot.assert_match(placement_log)
"""


def test_a_parallel_interleaves_pipeline_is_snapshotted_without_the_functions_its_threads_instantiate(pytester):
    """The generators' functions an interleave's threads instantiate a varying number of times are left out
    of the snapshot and named; everything else of the log is compared."""
    pytester.makepyfile(test_data=INTERLEAVE_TEST)
    written = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tfplace-update-snapshots", "-W", "default")
    written.assert_outcomes(passed=1)
    written.stdout.fnmatch_lines(["*placement_snapshot of test_data.py::test_pipeline leaves out * record(s) of "
                                  "functions TensorFlow's own threads instantiate a varying number of times*"])
    snapshot = json.loads((pytester.path / "__placement__" / "test_data" / "test_pipeline.json").read_text())
    ops = snapshot["placement"]["/device:CPU:0"]
    assert not {"PyFunc", "GeneratorDataset"} & set(ops)  # the generators' functions: left out
    assert ops["ParallelInterleaveDatasetV4"] == 1 and ops["IteratorGetNext"] == 13  # the rest: compared
    for _ in range(2):  # the varying count never makes the comparison fail
        pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
