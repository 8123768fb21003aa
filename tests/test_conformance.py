"""Conformance: `tfplace.capture_placement()` says what TensorFlow's own placement log says.

One test per program of `tests/conformance/programs/` and oneDNN mode
(`TF_ENABLE_ONEDNN_OPTS=0` and `=1`; `CONFORMANCE_ONEDNN=0` or `=1` runs one mode). Each runs
the program under `tests/conformance/harness.py` in a subprocess, with TensorFlow's placement
log on, and compares the capture with TensorFlow's stderr as `tests/conformance/tflog.py` reads
it (the referee never uses tfplace's own parsing). See `tests/conformance/compare.py` for the
checks, and `python benchmarks/conformance.py` for the table.

    pytest tests/test_conformance.py          # or: pytest -m conformance
"""

from __future__ import annotations

import os

import pytest

from conformance import compare

# slow tier: the conformance suite: each program in a process of its own, in both oneDNN modes
pytestmark = pytest.mark.slow

conformance = pytest.mark.conformance  # registered in pyproject.toml

MODES = [m.strip() for m in os.environ.get("CONFORMANCE_ONEDNN", "0,1").split(",") if m.strip()]
CASES = [pytest.param(program, mode, id=f"{program.stem}-onednn{mode}")
         for program in compare.programs() for mode in MODES]


# Real lines of TensorFlow 2.21's stderr (from the programs' runs), in the order TensorFlow wrote them.
_D0 = "/job:localhost/replica:0/task:0/device:CPU:0"
_D1 = "/job:localhost/replica:0/task:0/device:CPU:1"
_REAL_LOG = "\n".join(f"{level}0000 00:00:1795386404.5{i:05d}   {thread} {text}"
                      for i, (level, thread, text) in enumerate([
    ("I", 100, f"placer.cc:162] input: (_Arg): {_D1}"),                       # explicit copy: tf.identity on CPU:1
    ("I", 100, f"placer.cc:162] Identity: (Identity): {_D1}"),
    ("I", 100, f"placer.cc:162] output_RetVal: (_Retval): {_D1}"),
    ("W", 100, f"execute.cc:197] before computing Identity input #0 was expected to be on {_D1} but is actually on "
               f"{_D0} (operation running on {_D1}). This triggers a copy which can be a performance bottleneck."),
    ("I", 100, f"execute.cc:1775] Executing op Identity in device {_D1}"),
    ("I", 100, f"placer.cc:162] a: (_Arg): {_D1}"),                           # oneDNN: two wrapper instances
    ("I", 100, f"placer.cc:162] b: (_Arg): {_D1}"),
    ("I", 100, f"placer.cc:162] MatMul: (MatMul): {_D1}"),
    ("I", 100, f"placer.cc:162] product_RetVal: (_Retval): {_D1}"),
    ("I", 100, f"placer.cc:162] a: (_Arg): {_D1}"),
    ("I", 100, f"placer.cc:162] b: (_Arg): {_D1}"),
    ("I", 100, f"placer.cc:162] _MklMatMul: (_MklMatMul): {_D1}"),
    ("I", 100, f"placer.cc:162] product_RetVal: (_Retval): {_D1}"),
    ("W", 100, f"execute.cc:197] before computing _MklMatMul input #1 was expected to be on {_D1} but is actually on "
               f"{_D0} (operation running on {_D1}). This triggers a copy which can be a performance bottleneck."),
    ("I", 100, f"execute.cc:1775] Executing op _MklMatMul in device {_D1}"),
    ("I", 100, f"placer.cc:162] handle_RetVal: (_Retval): {_D0}"),            # no inputs: the retval comes first
    ("I", 100, f"placer.cc:162] AnonymousIteratorV3: (AnonymousIteratorV3): {_D0}"),
    ("I", 100, f"execute.cc:1775] Executing op AnonymousIteratorV3 in device {_D0}"),
    ("I", 100, f"execute.cc:1775] Executing op MakeIterator in device {_D0}"),
    ("I", 100, f"placer.cc:162] args_0: (_Arg): {_D0}"),                      # the map function MakeIterator placed ...
    ("I", 100, f"placer.cc:162] add: (AddV2): {_D0}"),
    ("I", 100, f"placer.cc:162] Identity: (Identity): {_D0}"),
    ("I", 100, f"placer.cc:162] FakeSink0: (Identity): {_D0}"),
    ("I", 100, f"placer.cc:162] identity_RetVal: (_Retval): {_D0}"),
    ("I", 100, f"placer.cc:162] add/y: (Const): {_D0}"),
    ("I", 200, f"placer.cc:162] args_0: (_Arg): {_D0}"),                      # ... a tf.data thread places another
    ("I", 200, f"placer.cc:162] PyFunc: (PyFunc): {_D0}"),
    ("I", 100, f"placer.cc:162] iterator: (_Arg): {_D0}"),                    # ... then IteratorGetNext's wrapper
    ("I", 100, f"placer.cc:162] IteratorGetNext: (IteratorGetNext): {_D0}"),
    ("I", 100, f"placer.cc:162] components_0_RetVal: (_DeviceRetval): {_D0}"),
    ("I", 100, f"execute.cc:1775] Executing op IteratorGetNext in device {_D0}"),
    ("W", 300, f"execute.cc:197] before computing All input #1 was expected to be on {_D0} but is actually on "
               f"{_D1} (operation running on {_D1}). This triggers a copy which can be a performance bottleneck."),
    ("I", 300, f"execute.cc:1775] Executing op All in device {_D1}"),
    ("I", 100, f"placer.cc:162] x: (_Arg): {_D0}"),                           # a tf.function's nodes
    ("I", 100, f"placer.cc:162] Identity: (Identity): {_D0}"),
    ("I", 100, f"placer.cc:162] identity_RetVal: (_Retval): {_D0}"),
    ("I", 100, f"execute.cc:1775] Executing op __inference_f_12 in device {_D0}"),
]))


def test_referee_reads_real_lines():
    from conformance import tflog

    text = "noise before\nCONFORMANCE-BEGIN 100\n" + _REAL_LOG + "\nCONFORMANCE-END 100\n" + _REAL_LOG
    log = tflog.parse(text)
    assert log.main_thread == 100 and log.markers
    assert [(e.op, e.printed, e.device) for e in log.eager] == [
        ("Identity", "Identity", "/device:CPU:1"), ("MatMul", "_MklMatMul", "/device:CPU:1"),
        ("AnonymousIteratorV3", "AnonymousIteratorV3", "/device:CPU:0"),
        ("MakeIterator", "MakeIterator", "/device:CPU:0"), ("IteratorGetNext", "IteratorGetNext", "/device:CPU:0"),
        ("All", "All", "/device:CPU:1"), ("__inference_f_12", "__inference_f_12", "/device:CPU:0")]
    assert [len(nodes) for _, nodes in log.wrappers] == [3, 4, 4, 2, 3]
    assert [(n.name, n.op) for n in log.nodes] == [
        ("args_0", "_Arg"), ("add", "AddV2"), ("Identity", "Identity"), ("FakeSink0", "Identity"),
        ("identity_RetVal", "_Retval"), ("add/y", "Const"), ("x", "_Arg"), ("Identity", "Identity"),
        ("identity_RetVal", "_Retval"), ("args_0", "_Arg"), ("PyFunc", "PyFunc")]
    assert [(c.op, c.input_index, c.from_device, c.to_device, c.running) for c in log.copies] == [
        ("Identity", 0, "/device:CPU:0", "/device:CPU:1", "/device:CPU:1"),
        ("MatMul", 1, "/device:CPU:0", "/device:CPU:1", "/device:CPU:1"),
        ("All", 1, "/device:CPU:1", "/device:CPU:0", "/device:CPU:1")]
    # an _EagerConst's copy is exempt; a host-memory input copied to the host (All's reduction indices) is not
    assert [compare.exemption(c) is None for c in log.copies] == [False, True, True]
    assert not log.suspicious


# Real lines of TensorFlow 2.16's stderr (o_mirrored_fit), which name no thread: a tf.data thread's warning
# landed between an eager op's wrapper lines and its `Executing op`, as it does when the machine is busy.
_DATED_LOG = "\n".join(f"2026-11-27 09:10:37.5{i:05d}: {level} tensorflow/core/{text}"
                       for i, (level, text) in enumerate([
    ("I", f"common_runtime/placer.cc:125] input__dataset: (_Arg): {_D0}"),
    ("I", f"common_runtime/placer.cc:125] OptionsDataset: (OptionsDataset): {_D0}"),
    ("W", "framework/local_rendezvous.cc:404] Local rendezvous is aborting with status: OUT_OF_RANGE: End of sequence"),
    ("I", f"common_runtime/placer.cc:125] handle_RetVal: (_Retval): {_D0}"),
    ("W", "framework/local_rendezvous.cc:404] Local rendezvous is aborting with status: OUT_OF_RANGE: End of sequence"),
    ("I", f"common_runtime/eager/execute.cc:1756] Executing op OptionsDataset in device {_D0}"),
    ("I", f"common_runtime/placer.cc:125] x: (_Arg): {_D0}"),
    ("I", "util/dump_graph.cc:209] Dumped Graph to /tmp/graphs/__inference_f_12.0000.main.initial.pbtxt"),
    ("I", f"common_runtime/placer.cc:125] Identity: (Identity): {_D0}"),
    ("I", f"common_runtime/placer.cc:125] identity_RetVal: (_Retval): {_D0}"),
    ("I", f"common_runtime/eager/execute.cc:1756] Executing op __inference_f_12 in device {_D0}"),
]))


def test_referee_reads_lines_that_name_no_thread():
    """TensorFlow 2.16-2.20 name no thread: a line of another source may be any thread's and ends no run."""
    from conformance import tflog

    text = "CONFORMANCE-BEGIN 100\n" + _DATED_LOG.replace("\n2026-11-27 09:10:37.500004: W", "\n\t [[{{node X}}]]\n"
                                                          "2026-11-27 09:10:37.500004: W") + "\nCONFORMANCE-END 100\n"
    log = tflog.parse(text)
    assert not log.threads_known and log.main_thread == 100
    assert [(e.op, e.device, e.wrapper_placed) for e in log.eager] == [
        ("OptionsDataset", "/device:CPU:0", True), ("__inference_f_12", "/device:CPU:0", False)]
    assert [[n.name for n in nodes] for _, nodes in log.wrappers] == [
        ["input__dataset", "OptionsDataset", "handle_RetVal"]]
    assert [(n.name, n.op) for n in log.nodes] == [
        ("x", "_Arg"), ("Identity", "Identity"), ("identity_RetVal", "_Retval")]
    assert not log.suspicious


def test_referee_compares_multisets():
    from conformance import tflog

    log = tflog.parse("CONFORMANCE-BEGIN 100\n" + _REAL_LOG + "\nCONFORMANCE-END 100\n")
    capture = {"complete": True, "incomplete_reason": "", "copies": [
        {"op": "MatMul", "input_index": 1, "from_device": "/device:CPU:0", "to_device": "/device:CPU:1", "source": ""}],
        "records": [{"op": op, "name": "", "device": dev, "kind": "execute", "source": "", "requested": "",
                     "dtypes": []}
                    for op, dev in [("Identity", "/device:CPU:1"), ("MatMul", "/device:CPU:1"),
                                    ("AnonymousIteratorV3", "/device:CPU:0"), ("MakeIterator", "/device:CPU:0"),
                                    ("IteratorGetNext", "/device:CPU:0"), ("All", "/device:CPU:1")]]
        + [{"op": op, "name": name, "device": "/device:CPU:0", "kind": "place", "source": "", "requested": "",
            "dtypes": []} for name, op in [("args_0", "_Arg"), ("add", "AddV2"), ("Identity", "Identity"),
                                           ("FakeSink0", "Identity"), ("identity_RetVal", "_Retval"), ("x", "_Arg"),
                                           ("Identity", "Identity"), ("identity_RetVal", "_Retval"),
                                           ("args_0", "_Arg"), ("PyFunc", "PyFunc"), ("extra", "Mul")]]
        + [{"op": "Const", "name": "add/y", "device": "", "kind": "removed", "source": "", "requested": "",
            "dtypes": []}]}
    result = compare.compare_logs(compare.Result("snippet", "-"), log, capture)
    assert result.eager_missing == [("__inference_f_12", "/device:CPU:0", 1, " (TF's first such line: stderr line 38)")]
    assert (result.nodes_matched, result.nodes_total, result.place_extras) == (11, 11, 1)
    # the capture lacks the copy of All's reduction indices to the host: missing
    assert result.copies_missing == [("All", 1, "/device:CPU:1", "/device:CPU:0", 1)]
    assert result.copies_tf == 2 and len(result.copies_exempt) == 1
    problems = result.problems()
    assert len(problems) == 3 and "__inference_f_12 on /device:CPU:0 x1" in problems[0] and "extra (Mul)" in problems[1]
    assert "All input #1 /device:CPU:1 -> /device:CPU:0 x1" in problems[2]


def test_there_are_enough_programs():
    assert len(compare.programs()) >= 9, [p.name for p in compare.programs()]


@conformance
@pytest.mark.parametrize("program, mode", CASES)
def test_capture_matches_tensorflow_log(program, mode):
    result = compare.run_program(program, onednn=mode)
    if result.problems():
        pytest.fail(compare.describe(result) + "\n(CONFORMANCE_KEEP=DIR keeps each run's stderr and capture JSON; "
                    "stderr line numbers refer to it)", pytrace=False)


@conformance
@pytest.mark.parametrize("program", [pytest.param(p, id=p.stem) for p in compare.programs()])
def test_capture_matches_tensorflow_log_with_another_op_callback_before_its_own(program):
    # a debugger's or a numerics checker's callback that only looks runs first: TensorFlow then hands the
    # capture's callback None for a graph op's outputs (and no name for an unnamed constant or placeholder)
    result = compare.run_program(program, callback_first=True)
    if result.problems():
        pytest.fail(compare.describe(result) + "\n(with another op callback before the capture's)", pytrace=False)
