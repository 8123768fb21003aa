"""The placement parser, on recorded lines and on generated lines with noise (hypothesis)."""

from hypothesis import given, settings as hsettings, strategies as st

import pytest

from tfplace import CopyRecord, PlacementLog, PlacementRecord
from tfplace.placement.records._parsing import parse_placement

FULL = "/job:localhost/replica:0/task:0/device:{}:{}"
PREFIX = "I0000 00:00:1795316459.951921    1852 execute.cc:1775] "
PLACER_PREFIX = "I0000 00:00:1795316459.951596    1852 placer.cc:162] "
# TensorFlow 2.16-2.20's prefixes: a date, no thread, the source's path.
DATED_PREFIX = "2026-11-27 09:10:37.565408: I tensorflow/core/common_runtime/eager/execute.cc:1756] "
DATED_PLACER_PREFIX = "2026-11-27 09:10:37.564717: I tensorflow/core/common_runtime/placer.cc:125] "

ops = st.sampled_from(["MatMul", "AddV2", "_EagerConst", "AddN", "VarHandleOp", "__inference_f_12"])
devices = st.tuples(st.sampled_from(["CPU", "GPU"]), st.integers(0, 7))
names = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,8}(/[A-Za-z0-9_]{1,5})?", fullmatch=True)
noise = st.text(st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)), max_size=40).filter(
    lambda s: "Executing op " not in s and "): /job:" not in s and "before computing" not in s)


def test_recorded_eager_and_placer_lines():
    text = (PLACER_PREFIX + "MatMul: (MatMul): " + FULL.format("CPU", 0) + "\n"
            + PREFIX + "Executing op MatMul in device " + FULL.format("CPU", 0) + "\n"
            + "tf.Tensor([[22. 28.]]\n"
            + "MatMul: (MatMul): " + FULL.format("CPU", 0) + "\n")
    parsed = parse_placement(text)
    assert [(r.op, r.name, r.device, r.kind) for r in parsed.records] == [
        ("MatMul", "MatMul", "/device:CPU:0", "place"), ("MatMul", "", "/device:CPU:0", "execute")]
    assert parsed.copies == []


def test_copy_warning_line():
    line = ("W0000 00:00:1795316460.008019    1852 execute.cc:197] before computing AddV2 input #0 was expected "
            f"to be on {FULL.format('CPU', 1)} but is actually on {FULL.format('CPU', 0)} (operation running on "
            f"{FULL.format('CPU', 1)}). This triggers a copy which can be a performance bottleneck.\n")
    copy, = parse_placement(line).copies
    assert (copy.op, copy.input_index, copy.from_device, copy.to_device) == (
        "AddV2", 0, "/device:CPU:0", "/device:CPU:1")
    assert copy.line.startswith("before computing AddV2 input #0")


def test_onednn_kernel_variants_are_read_as_op_types_keeping_the_printed_line():
    text = "".join(f"{PREFIX}Executing op {kernel} in device {FULL.format('CPU', 0)}\n"
                   for kernel in ("_MklMatMul", "_MklNativeConv2D", "_MklFusedMatMul", "_MklNativeFusedBatchNormV3"))
    log = PlacementLog.from_text(text)
    assert [r.op for r in log.records] == ["MatMul", "Conv2D", "_FusedMatMul", "FusedBatchNormV3"]
    assert log.records[0].line == f"Executing op _MklMatMul in device {FULL.format('CPU', 0)}"
    assert log.guide_lines()[0] == f"Executing op MatMul in device {FULL.format('CPU', 0)}"
    log.assert_placed("MatMul", "CPU:0")


def test_spliced_lines_are_split():
    text = ("a: (_Arg): " + FULL.format("CPU", 0) + PREFIX + "Executing op Fill in device " + FULL.format("GPU", 1)
            + "\nhello " + "Executing op AddN in device " + FULL.format("CPU", 0) + "\n")
    parsed = parse_placement(text)
    assert [(r.op, r.device) for r in parsed.records] == [
        ("_Arg", "/device:CPU:0"), ("Fill", "/device:GPU:1"), ("AddN", "/device:CPU:0")]


@hsettings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("execute"), ops, devices, st.just("")),
    st.tuples(st.just("place"), ops.filter(lambda o: not o.startswith("__")), devices, names),
    st.tuples(st.just("noise"), noise, devices, st.just("")),
), max_size=30), st.sampled_from([(PREFIX, PLACER_PREFIX), (DATED_PREFIX, DATED_PLACER_PREFIX)]))
def test_generated_logs_round_trip(events, prefixes):
    """Both streams of a run: fd 2 (prefixed as 2.21 or 2.16-2.20 prefix them, eager + placer) and fd 1 (bare
    placer) parse to the events."""
    execute_prefix, placer_prefix = prefixes
    fd2, fd1, expected = [], [], []
    for kind, what, (dtype, index), name in events:
        device = FULL.format(dtype, index)
        if kind == "execute":
            fd2.append(f"{execute_prefix}Executing op {what} in device {device}\n")
            expected.append((what, "", f"/device:{dtype}:{index}", "execute"))
        elif kind == "place":
            fd2.append(f"{placer_prefix}{name}: ({what}): {device}\n")
            fd1.append(f"{name}: ({what}): {device}\n")
            expected.append((what, name, f"/device:{dtype}:{index}", "place"))
        else:
            fd2.append(what + "\n")
    parsed = parse_placement("".join(fd2) + "".join(fd1))
    assert [(r.op, r.name, r.device, r.kind) for r in parsed.records] == expected
    # With fd 2's lines hidden (TF_CPP_MIN_LOG_LEVEL >= 1), the bare placer lines are all kept.
    hidden = PlacementLog.from_text("".join(fd1))
    assert [r[:4] for r in hidden.records] == [e for e in expected if e[3] == "place"]


@given(st.text(max_size=200))
def test_arbitrary_text_never_breaks_the_parser_and_invents_nothing(text):
    parsed = parse_placement(text)
    assert all(record.line and record.line in text for record in [*parsed.records, *parsed.copies])


def test_queries_accept_short_device_forms_and_assertions_show_a_table():
    log = PlacementLog.from_text(
        f"Executing op MatMul in device {FULL.format('CPU', 1)}\nExecuting op AddN in device {FULL.format('CPU', 0)}\n")
    assert log.ops_on("CPU:1") == log.ops_on("/cpu:1") == log.ops_on(FULL.format("CPU", 1)) == ("MatMul",)
    assert log.summary() == {"/device:CPU:1": {"MatMul": 1}, "/device:CPU:0": {"AddN": 1}}
    assert log.guide_lines() == [f"Executing op MatMul in device {FULL.format('CPU', 1)}",
                                 f"Executing op AddN in device {FULL.format('CPU', 0)}"]
    log.assert_not_placed("MatMul", "CPU:0")
    try:
        log.assert_placed("MatMul", "GPU:0")
    except AssertionError as err:
        message = str(err)
    assert message.splitlines()[0] == "expected MatMul on /device:GPU:0, but it was placed on /device:CPU:1:"
    assert "  MatMul  /device:CPU:1  execute   1" in message


@pytest.mark.parametrize("value", [b"Executing op MatMul", None, 123])
def test_from_text_takes_only_str(value):
    with pytest.raises(TypeError, match=r"PlacementLog.from_text received (bytes|NoneType|int) \(from argument "
                                        r"text\): allowed is str"):
        PlacementLog.from_text(value)


def test_a_long_line_with_a_placer_marker_is_read_in_linear_time():
    import time
    line = "x" * 20_000 + "): /job:" + "y" * 20_000
    start = time.perf_counter()
    parsed = parse_placement(line)
    assert time.perf_counter() - start < 1.0  # quadratic scanning took seconds
    assert parsed.records == [] and parsed.copies == []


def test_printed_log_shows_copies_completeness_and_long_op_names():
    log = PlacementLog(
        [PlacementRecord("ResourceApplyAdamWithAmsgrad", "", "/device:CPU:0", "execute")] * 2
        + [PlacementRecord("AddV2", "", "/device:CPU:1", "execute")],
        [CopyRecord("AddV2", 1, "/device:CPU:0", "/device:CPU:1", "train.py:7")])
    with pytest.warns(RuntimeWarning, match="incomplete placement log: the block ran function __inference_f_3"):
        log.mark_incomplete("the block ran function __inference_f_3, placed earlier")
    lines = str(log).splitlines()
    assert lines[0] == "PlacementLog: 3 records, 1 implicit copies, INCOMPLETE"
    assert "  ResourceApplyAdamWithAmsgrad  /device:CPU:0  execute   2" in lines
    assert "      train.py:7  x1  ? B  AddV2 input #1 CPU:0 -> CPU:1, ? B each" in lines
    assert any("incomplete log: the block ran function __inference_f_3" in line for line in lines)


def test_from_text_drops_eager_wrappers_of_both_onednn_kernels_and_keeps_a_users_one_op_function():
    d0 = "/job:localhost/replica:0/task:0/device:CPU:0"
    text = "\n".join([
        f"a: (_Arg): {d0}", f"b: (_Arg): {d0}", f"MatMul: (MatMul): {d0}", f"product_RetVal: (_Retval): {d0}",
        f"a: (_Arg): {d0}", f"b: (_Arg): {d0}", f"_MklMatMul: (_MklMatMul): {d0}", f"product_RetVal: (_Retval): {d0}",
        f"Executing op _MklMatMul in device {d0}",
        f"input: (_Arg): {d0}", f"_EagerConst: (_EagerConst): {d0}", f"output_RetVal: (_Retval): {d0}",
        f"Executing op _EagerConst in device {d0}",
        f"x: (_Arg): {d0}", f"MatMul: (MatMul): {d0}", f"identity_RetVal: (_Retval): {d0}",
        f"Executing op __inference_f_3 in device {d0}"])
    records = [(r.op, r.name, r.kind) for r in PlacementLog.from_text(text).records]
    assert records == [("MatMul", "", "execute"), ("_Arg", "x", "place"), ("MatMul", "MatMul", "place"),
                       ("_Retval", "identity_RetVal", "place"), ("__inference_f_3", "", "execute")]
