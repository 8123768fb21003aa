"""Steps: found in a profile without annotation, each step's time split into phases that sum to its wall time,
the input pipeline's slowest stage with the user's line, and advice only where the figures show it. On
profiles written as TensorFlow's profiler writes them (`tests/xspace.py`); the real programs are in
`tests/test_steps_programs.py`."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfplace.placement.records._records import PlacementRecord
from tfplace.placement.steps import _analysis, _phases, _rules
from tfplace.placement.steps._model import PHASES, Steps
from xspace import Plane

STEP_US, CALL_US = 1000.0, 900.0


def _profile(n=6, traced=(0,), marks=False, stages=True, graph_building=(), reads=(), scale=1.0, pause=(-1, 0.0)):
    """`n` calls of a tf.function `step` 1 ms apart, each waiting 500 µs for input inside its call, then
    computing 200 µs; the pipeline's Map (after a tensor slice, under a fused MapAndBatch) works 390 µs per
    element. The steps in `reads` read a tensor's value for 40 µs after their call, at train.py:10. `pause`: (a
    step, µs of Python after its call, before the next). Every time is multiplied by `scale`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from tfplace.placement.profile import _xspace

    space = xplane_pb2.XSpace()
    host = Plane(space, "/host:CPU")
    python, pool = host.line("python"), host.line("tf_Compute/1")

    def event(line, event_name, start, length, **stats):
        host.event(line, event_name, start * scale, length * scale, **stats)

    getnext, producer = host.line("tf_data_iterator_get_next/2"), host.line("tf_data_iterator_resource/3")
    for i in range(n):
        at = i * STEP_US + (pause[1] if i > pause[0] >= 0 else 0.0)
        if marks:
            event(python, "train", at, CALL_US, step_num=i, _r=1)
        event(python, "step", at, CALL_US, tf_function_call="traced-nonXla" if i in traced else "notTraced-nonXla",
                   tracing_count=1)
        if i in graph_building:
            event(python, "tf.function-graph_building", at + 10, 30)
        event(python, "EagerLocalExecute: __inference_step_5", at + 50, 840)
        event(getnext, "IteratorGetNextOp::DoCompute", at + 100, 500, id=i, iter_num=0, element_size=64)
        if stages:
            event(getnext, "Iterator::Root", at + 100, 500, name="fused(MapDataset:1,BatchDatasetV2:2)")
            event(getnext, "Iterator::Root::MapAndBatch", at + 101, 498, name="fused(MapDataset:1,BatchDatasetV2:2)",
                       parallelism=2)
            event(producer, "Iterator::Root::MapAndBatch::Map", at + 150, 400, name="MapDataset:1")
            event(producer, "Iterator::Root::MapAndBatch::Map::TensorSlice", at + 151, 10,
                       name="TensorSliceDataset:0")
            event(producer, "InstantiatedCapturedFunction::Run", at + 165, 380)
        event(pool, "MatMul:MatMul", at + 650, 200)
        if i in reads:
            event(python, "tfplace_host_read", at + CALL_US + 10, 40, source="train.py:10")
    return _xspace.read_xspace(space, {"MatMul": "/device:CPU:0"})


RECORDS = [PlacementRecord("TensorSliceDataset", "", "/device:CPU:0", "execute", "train.py:3"),
           PlacementRecord("MapDataset", "", "/device:CPU:0", "execute", "train.py:4"),
           PlacementRecord("BatchDatasetV2", "", "/device:CPU:0", "execute", "train.py:5")] + \
          [PlacementRecord("__inference_step_5", "", "/device:CPU:0", "execute", "train.py:9")] * 6


def test_a_function_called_each_step_gives_the_steps_and_their_phases():
    steps = _analysis.steps(RECORDS, _profile(), "")
    assert (steps.kind, steps.name, steps.source, steps.count, steps.warmup) == ("function", "step", "train.py:9", 5, 1)
    middle = steps.steps[2].phases  # inside the call (840 µs): 500 waiting, 200 computing, the rest idle
    assert middle == {"input": 500.0, "compute": 200.0, "transfer": 0.0, "sync": 0.0, "host": 160.0,
                      "compile": 0.0, "idle": 140.0}
    assert steps.steps[-1].wall_us == CALL_US  # the last step ends with its call
    for step in steps.steps:
        assert sum(step.phases.values()) == pytest.approx(step.wall_us)
    assert sum(steps.shares.values()) == pytest.approx(1.0)
    assert steps.median_us == STEP_US and steps.max_us == STEP_US
    assert steps.per_device == {"/device:CPU:0": (1000.0, pytest.approx(1000.0 / 4900.0))}


def test_the_slowest_input_stage_is_the_map_that_ran_the_function_at_the_users_line():
    stage = _analysis.steps(RECORDS, _profile(), "").input
    assert stage.dataset_op == "Map" and stage.source == "train.py:4"  # MapDataset:1, the chain's second op
    assert stage.per_element_us == pytest.approx(390.0)  # its 400 µs less its input's 10
    assert stage.parallelism is None and stage.prefetch is False
    assert stage.share == pytest.approx(1.0 - 10.0 / 400.0)  # the tensor slice holds the rest


def test_a_waiting_get_next_and_tf_datas_threads_are_no_devices_busy_time():
    timing = _profile()
    assert timing.devices == {"/device:CPU:0": (6, 1200.0)}  # the MatMuls only


def test_input_bound_advice_names_the_stage_line_and_a_fix_that_parses():
    log_steps = _analysis.steps(RECORDS, _profile(scale=10.0), "")  # 5 ms waits: over the floor of a get-next
    advice = _rules.advice(log_steps, [], {})
    assert [a.rule for a in advice] == ["input-bound"]
    assert advice[0].source == "train.py:4" and advice[0].severity == "high"
    compile(advice[0].fix.split("#")[0], "<fix>", "exec")


@pytest.mark.parametrize("op, per_step_us, cores, fix", [
    ("Map", 3000.0, 8, "ds = ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE)"),   # ~4 calls at once keep up
    ("Map", 96000.0, 2, "ds = ds.cache()"),          # ~120-way parallelism on 2 cores: no setting keeps up
    ("FlatMap", 3000.0, 8, "ds = ds.interleave(fn, num_parallel_calls=tf.data.AUTOTUNE"),  # never `map` for it
    ("Map", 600.0, 8, "ds = ds.prefetch(tf.data.AUTOTUNE)"),  # it keeps up on average: overlap it
])
def test_the_input_bound_fix_fits_the_stage_and_what_the_machine_can_do(monkeypatch, op, per_step_us, cores, fix):
    from tfplace.placement.steps._model import InputStage

    monkeypatch.setattr(_rules.os, "cpu_count", lambda: cores)
    shares = {"input": 0.6, "compute": 0.4, "transfer": 0.0, "sync": 0.0, "host": 0.0, "compile": 0.0, "idle": 0.0}
    steps = Steps(10, 1, "function", "train.py:9", 2000.0, 2100.0, 2200.0, shares,
                  input=InputStage(op, "train.py:4", 0.9, per_step_us / 32, None, False, per_step_us))
    advice = _rules.advice(steps, [], {})
    assert advice[0].fix.startswith(fix) and f"this machine has {cores} cores" in advice[0].message
    compile(advice[0].fix, "<fix>", "exec")


def test_marked_steps_win_over_function_calls():
    steps = _analysis.steps(RECORDS, _profile(marks=True), "")
    assert (steps.kind, steps.name, steps.count, steps.warmup) == ("marked", "train", 5, 1)
    assert steps.steps[1].wall_us == CALL_US  # a marked step is its marker's span


def test_marks_of_two_fits_of_two_models_are_two_loops_and_a_one_step_fit_per_model_is_none():
    def records(*ops_and_lines):
        return RECORDS[:3] + [PlacementRecord(op, "", "/device:CPU:0", "execute", line) for op, line in ops_and_lines]

    two = records(*[("__inference_step_5", "train.py:9")] * 4, *[("__inference_step_8", "train.py:12")] * 2)
    steps = _analysis.steps(two, _profile(marks=True, traced=(0, 4)), "")
    assert (steps.kind, steps.count + steps.warmup, steps.source) == ("marked", 4, "train.py:9")
    each = records(*[(f"__inference_step_{i}", "train.py:9") for i in range(6)])  # six models, one step each
    alone = _analysis.steps(each, _profile(marks=True, traced=range(6)), "")
    assert alone.kind != "marked"


def _concrete(*numbers):
    """The records of calls of `step` from train.py:9, each of the concrete function `__inference_step_<n>`."""
    return RECORDS[:3] + [PlacementRecord(f"__inference_step_{n}", "", "/device:CPU:0", "execute", "train.py:9")
                          for n in numbers]


def test_a_function_traced_again_in_steady_steps_is_compile_time_and_retracing():
    records = _concrete(1, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # each traced call is a new concrete function of `step`
    steps = _analysis.steps(records, _profile(n=10, traced=(0, 3, 5, 7), graph_building=(0, 3, 5, 7)), "")
    assert steps.warmup == 1 and steps.steps[3].phases["compile"] > 0
    assert [a.rule for a in _rules.advice(steps, [], {}, records) if a.rule != "input-bound"] == ["retracing"]
    # compile time in the steps' spans while the step function kept its one concrete function (another
    # function traced, a metric, a library's) is not the step function retracing
    other = _analysis.steps(RECORDS[:3] + [RECORDS[3]] * 10, _profile(n=10, traced=(0, 3, 5, 7),
                                                                     graph_building=(0, 3, 5, 7)), "")
    assert [a.rule for a in _rules.advice(other, [], {}, RECORDS[:3] + [RECORDS[3]] * 10)
            if a.rule != "input-bound"] == []
    once = _analysis.steps(_concrete(1, 1, 1, 2, 2, 2), _profile(traced=(0, 3), graph_building=(0, 3)), "")
    assert once.steps[3].phases["compile"] > 0 and _rules.advice(once, [], {}, _concrete(1, 1, 1, 2, 2, 2)) == []
    # a new Python value at every call traces a new concrete function each time: one warm-up step, then
    # steady steps whose tracing is compile time (retracing), never nine warm-up steps and one steady
    each = _concrete(*range(6))
    every = _analysis.steps(each, _profile(traced=range(6), graph_building=range(6)), "")
    assert (every.warmup, every.count) == (1, 5) and all(s.phases["compile"] > 0 for s in every.steps[1:])
    assert "compile-every-step" in [a.rule for a in _rules.advice(every, [], {}, each)]
    records = _concrete(0, 0, *range(2, 12))  # 10 of 11 steady steps trace anew
    again = _analysis.steps(records, _profile(n=12, traced=(0, *range(2, 12)), graph_building=range(2, 12)), "")
    assert "compile-every-step" in [a.rule for a in _rules.advice(again, [], {}, records)]


def test_one_unusual_step_is_reported_apart_and_neither_fires_nor_hides_a_rule():
    from tfplace.placement.shown import _steps_view

    records = RECORDS[:3] + [RECORDS[3]] * 20
    calm = _analysis.steps(records, _profile(n=20, stages=False), "")
    odd = _analysis.steps(records, _profile(n=20, stages=False, pause=(10, 30_000.0)), "")  # an epoch's end: 31 ms
    assert [s.index for s in odd.outliers] == [10] and calm.outliers == ()
    assert odd.shares == pytest.approx(calm.shares, abs=0.005) and odd.median_us == calm.median_us
    assert [a.rule for a in _rules.advice(odd, [], {})] == [a.rule for a in _rules.advice(calm, [], {})]
    assert "unusual step, left out of the shares: #10 31.0 ms (host 97%)" in _steps_view.text(odd, [])[1]
    assert Steps.from_json(odd.to_json()).outliers == odd.outliers


def test_calls_that_repeat_nothing_from_one_place_are_no_loop_and_fits_validation_steps_are_not_training_steps():
    def calls(*ops_and_lines):
        return RECORDS[:3] + [PlacementRecord(op, "", "/device:CPU:0", "execute", line) for op, line in ops_and_lines]

    # one function called once from each of two lines; two functions of the same name, each called once
    twice = calls(("__inference_step_5", "train.py:9"), ("__inference_step_5", "train.py:12"))
    assert _analysis.steps(twice, _profile(n=2, traced=(0,)), "").count == 0
    two = calls(("__inference_step_5", "train.py:9"), ("__inference_step_7", "train.py:9"))
    assert _analysis.steps(two, _profile(n=2, traced=(0, 1)), "").count == 0
    # fit's training calls and its validation calls, both `multi_step_on_iterator` from the fit line, take turns
    train, test = "__inference_step_10", "__inference_step_20"  # (the profile's calls are named `step`)
    order = [train] * 3 + [test] * 2 + [train] * 3 + [test] * 2
    fit = calls(*[(op, "train.py:9") for op in order])
    steps = _analysis.steps(fit, _profile(n=10, traced=(0, 3)), "")
    assert (steps.count + steps.warmup, steps.warmup) == (6, 1)
    assert [s.start_us - steps.steps[0].start_us for s in steps.steps] == [i * STEP_US for i in (0, 1, 2, 5, 6, 7)]


def test_a_read_in_every_step_is_sync_time_and_host_sync_at_its_line():
    steps = _analysis.steps(RECORDS, _profile(reads=range(5)), "")  # the last step ends with its call
    assert steps.reads == {"train.py:10": (4, 160.0)} and steps.steps[2].phases["sync"] == 40.0
    advice = [a for a in _rules.advice(steps, [], {}) if a.rule == "host-sync"]
    assert [(a.source, a.evidence["steps"]) for a in advice] == [("train.py:10", 4)]
    some = _analysis.steps(RECORDS, _profile(reads=(1, 3)), "")  # every other step: a log line, not a sync
    assert some.reads == {"train.py:10": (2, 80.0)} and "host-sync" not in [a.rule for a in _rules.advice(some, [], {})]
    assert Steps.from_json(steps.to_json()) == steps


def test_retracing_names_the_argument_whose_traced_value_changed():
    steps = _analysis.steps(RECORDS, _profile(n=10, traced=(0, 3, 5, 7), graph_building=(0, 3, 5, 7)), "")
    calls = _concrete(5, 5, 5, 9, 9, 11, 11, 13, 13, 13)
    spec = "TensorSpec(shape=(8, 4), dtype=tf.float32, name=None)"
    parameters = {"__inference_step_5": (("x", spec), ("lr", "Literal[0.1]")),
                  "__inference_step_9": (("x", spec.replace("(8, 4)", "(6, 4)")), ("lr", "Literal[0.05]")),
                  "__inference_step_11": (("x", spec.replace("(8, 4)", "(6, 4)")), ("lr", "Literal[0.01]")),
                  "__inference_step_13": (("x", spec.replace("(8, 4)", "(6, 4)")), ("lr", "Literal[0.005]"))}
    retracing = [a for a in _rules.advice(steps, [], {}, calls, parameters) if a.rule == "retracing"][0]
    assert retracing.evidence["changed"] == [["x", "float32 tensor of shape (8, 4)", "float32 tensor of shape (6, 4)"],
                                             ["lr", "0.1", "0.05"]]
    assert "argument lr was 0.1, then 0.05" in retracing.message and retracing.fix.startswith("# pass lr as a tensor")


def test_no_advice_on_a_step_that_computes():
    healthy = Steps(10, 1, "function", "train.py:9", 5000.0, 5100.0, 5200.0,
                    {"input": 0.02, "compute": 0.9, "transfer": 0.01, "sync": 0.0, "host": 0.05, "compile": 0.0,
                     "idle": 0.02}, {"/device:CPU:0": (45000.0, 0.9)})
    assert _rules.advice(healthy, [], {}) == []


def test_without_timing_steps_are_counted_from_the_records_and_carry_no_times():
    steps = _analysis.steps(RECORDS, None, "")
    assert (steps.count, steps.warmup, steps.kind, steps.median_us, steps.shares) == (5, 1, "function", None, None)
    assert "without timing" in steps.reason and len(steps.steps) == 6
    busy = _analysis.steps(RECORDS, None, "another TensorFlow profiler session was active")
    assert busy.reason == "another TensorFlow profiler session was active" and busy.median_us is None


def test_nothing_run_twice_is_no_step_and_says_why():
    steps = _analysis.steps(RECORDS[:4], None, "")
    assert steps.count == 0 and steps.reason.startswith("no step found: no tf.function ran twice")
    assert _rules.advice(steps, [], {}) == []


def test_steps_read_back_from_json():
    steps = _analysis.steps(RECORDS, _profile(), "")
    assert Steps.from_json(steps.to_json()) == steps


def test_a_long_loops_json_stays_small_with_rows_only_for_timed_steps_and_the_count_left_out():
    import json

    from tfplace.placement.steps._model import JSON_STEPS, Step

    untimed = Steps(99_999, 1, "eager-loop", "loop.py:3",
                    steps=tuple(Step(i, None, None, None) for i in range(100_000)),
                    reason="times: the block ran without timing")
    data = untimed.to_json()
    assert (data["steps"], data["steps_left_out"], data["count"]) == ([], 100_000, 99_999)
    assert len(json.dumps(data)) < 1000
    timed = Steps(4_999, 1, "function", "loop.py:3",
                  steps=tuple(Step(i, 10.0 * i, 9.0, {"compute": 9.0}) for i in range(5_000)))
    rows = timed.to_json()["steps"]
    assert [row["index"] for row in rows] == [*range(JSON_STEPS // 2), *range(5_000 - JSON_STEPS // 2, 5_000)]
    assert timed.to_json()["steps_left_out"] == 4_000 and all(row["wall_us"] is not None for row in rows)


spans = st.lists(st.tuples(st.floats(0, 1000), st.floats(0, 200)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(spans, spans, spans, spans, st.lists(st.floats(0, 1200), min_size=2, max_size=12, unique=True))
def test_phases_always_sum_to_each_steps_wall_time(compute, waits, copies, inside, cuts):
    cuts = sorted(cuts)
    windows = list(zip(cuts, cuts[1:]))
    for window, phases in zip(windows, _phases.split(windows, {"compute": compute, "input": waits,
                                                               "transfer": copies}, inside)):
        assert set(phases) == set(PHASES)
        assert all(value >= 0 for value in phases.values())
        assert sum(phases.values()) == pytest.approx(window[1] - window[0], abs=1e-6)


@settings(max_examples=200, deadline=None)
@given(spans, st.floats(0, 1200), st.floats(0, 300))
def test_a_measure_of_intervals_in_a_window_is_their_overlap(intervals, low, width):
    merged = _phases.union(intervals)
    expected = sum(max(0.0, min(end, low + width) - max(start, low)) for start, end in merged)
    assert _phases.Measure(merged).within(low, low + width) == pytest.approx(expected, abs=1e-6)


def test_on_a_gpu_each_step_has_its_kernels_idle_time_and_copies_from_pageable_or_pinned_memory():
    """A function on GPU:0 called every ms: 300 µs of kernels per call, a 64 KiB copy in from pageable memory in
    every step and a 16 KiB one from pinned memory in the odd ones; GPU planes as CUPTI's collector writes them."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from tfplace.placement.profile import _xspace

    space = xplane_pb2.XSpace()
    host, gpu = Plane(space, "/host:CPU"), Plane(space, "/device:GPU:0")
    python, stream = host.line("python"), gpu.line("Stream #7(Kernel,MemcpyH2D)")
    kernel = "regs:64 static_shared:0 dynamic_shared:0 grid:4,1,1 block:256,1,1 occ_pct:50"
    for i in range(5):
        at = i * STEP_US
        host.event(python, "step", at, CALL_US, tf_function_call="traced-nonXla" if i == 0 else "notTraced-nonXla")
        gpu.event(stream, "MemcpyH2D", at + 20, 30,
                  memcpy_details="kind_src:pageable kind_dst:device size:65536 dest:0")
        if i % 2:
            gpu.event(stream, "MemcpyH2D", at + 60, 10,
                      memcpy_details="kind_src:pinned kind_dst:device size:16384 dest:0")
        gpu.event(stream, "sgemm", at + 100, 200, kernel_details=kernel, tf_op="MatMul:MatMul")
        gpu.event(stream, "relu", at + 400, 100, kernel_details=kernel, tf_op="Relu:Relu")
    records = [PlacementRecord("__inference_step_5", "", "/device:GPU:0", "execute", "train.py:9")] * 5
    steps = _analysis.steps(records, _xspace.read_xspace(space), "")
    assert (steps.count, steps.warmup) == (4, 1)
    gpu0 = steps.gpus["/device:GPU:0"]
    assert gpu0["compute_us"] == 300.0 and gpu0["idle_us"] == pytest.approx((3 * STEP_US + CALL_US) / 4 - 300.0)
    assert gpu0["pageable_bytes"] == 65536 and gpu0["pinned_bytes"] == 16384 / 2  # two of the four steady steps
    assert gpu0["h2d_bytes"] == 65536 + 8192 and gpu0["h2d_us"] == 30 + 10 / 2
    from tfplace.placement.shown import _steps_view

    assert "  GPU:0 per step: kernels 300 us, no kernel running 675 us, from host memory 72.0 KiB in 35 us " \
           "(pageable 64.0 KiB, pinned 8.0 KiB)" in _steps_view.text(steps, [])
    assert Steps.from_json(steps.to_json()) == steps


def test_a_coordinators_steps_say_they_time_its_scheduling():
    """Under ParameterServerStrategy the coordinator's calls of the step run on a worker: its steps are the
    scheduling and the wait, and say so; the same calls run here are the steps' own."""
    import dataclasses

    from tfplace.placement.profile._model import OpTime

    worker = "/job:worker/replica:0/task:0/device:CPU:0"
    timing = dataclasses.replace(_profile(), devices={"/job:chief/replica:0/task:0/device:CPU:0": OpTime(6, 1200.0)})
    records = RECORDS[:3] + [PlacementRecord("__inference_step_5", "", worker, "execute", "train.py:9")] * 6
    remote = _analysis.steps(records, timing, "")
    assert remote.count == 5 and remote.reason == _analysis.COORDINATOR
    local = _analysis.steps(RECORDS, _profile(), "")
    assert remote.shares["sync"] > 0.1 and local.shares["sync"] == 0.0  # the wait for the worker
    from tfplace.placement.shown import _steps_view

    assert f"  ({_analysis.COORDINATOR})" in _steps_view.text(remote, [])
    assert local.reason == ""
