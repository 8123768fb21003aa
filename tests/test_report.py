"""Reports group once (`tfplace.placement.shown._report`) and every renderer shows the same rows."""

from tfplace.placement.shown import _display, _report
from tfplace.placement.shown._explain import Explanation
from tfplace.placement.api._log import PlacementLog
from tfplace.placement.records._records import PlacementRecord


def _failed(n):
    return [PlacementRecord("MatMul", f"f/MatMul_{i}", "/device:CPU:0", "failed", f"train.py:{i}") for i in range(n)]


def test_explanations_group_by_line_op_device_and_reason_with_names_and_the_first_message():
    moved = PlacementRecord("MatMul", "f/a", "/device:CPU:0", "place", "m.py:3", requested="/device:CPU:1")
    found = [Explanation(moved, "colocated", "first"), Explanation(moved._replace(name="f/b"), "colocated", "second"),
             Explanation(moved._replace(source="m.py:9"), "no-kernel", "third")]
    groups = _report.explained(found)
    assert [(g.source, g.reason, g.names, g.count, g.message) for g in groups] == [
        ("m.py:3", "colocated", ("f/a", "f/b"), 2, "first"), ("m.py:9", "no-kernel", ("f/a",), 1, "third")]


def test_failed_ops_group_and_every_renderer_leaves_the_same_rows_out():
    log = PlacementLog(_failed(_report.ROWS + 5))
    groups = _report.failed(log.records)
    assert len(groups) == _report.ROWS + 5 and {g.count for g in groups} == {1}
    assert _report.first(groups) == (groups[:_report.ROWS], 5)
    assert "… and 5 failed op rows more" in _display.html(log, [])
    assert "    ... and 5 more" in _display.text(log, []).splitlines()
    from tfplace.cli._trace import Findings, report

    assert "  ... and 5 more" in report(log, Findings(gpus_visible=True)).splitlines()


def test_the_end_of_a_dataset_is_recorded_but_no_failed_op(python):
    records, failed = python("""
        import tensorflow as tf, tfplace
        from tfplace.placement.shown import _report
        with tfplace.capture_placement() as log:
            for x in tf.data.Dataset.range(3):
                pass
            try:
                tf.debugging.check_numerics(tf.constant([float("nan")]), "nan here")
            except tf.errors.InvalidArgumentError:
                pass
        report([[(r.op, r.error) for r in log.records if r.kind == "failed"],
                [(g.op, g.count) for g in _report.failed(log.records)]])
    """)
    # TensorFlow's log names both ops; only the second failed
    assert ["IteratorGetNext", "OutOfRangeError"] in records and ["CheckNumerics", "InvalidArgumentError"] in records
    assert failed == [["CheckNumerics", 1]]
