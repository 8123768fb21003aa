"""Timelines: `tfplace trace --perfetto` and `PlacementLog.to_perfetto` write Chrome's Trace Event Format
that Perfetto's UI and chrome://tracing open, checked against the format's rules."""

from __future__ import annotations

import dataclasses
import gzip
import json
import subprocess
import sys
from collections import Counter, defaultdict

import pytest

STEP_SCRIPT = """
import tensorflow as tf
with tf.device("CPU:0"):
    w = tf.Variable(tf.ones((64, 64)))
x = tf.ones((8, 64))

@tf.function
def step(x):
    with tf.device("CPU:1"):
        y = tf.matmul(x, w)
    return tf.reduce_sum(y)

for _ in range(3):
    with tf.device("CPU:1"):
        x2 = x * 2.0  # reads x from CPU:0: an implicit transfer per step
    total = step(x2)
"""


def check_format(trace: dict) -> dict:
    """The Trace Event Format's rules, as Perfetto and chrome://tracing read them; returns the slices by track."""
    events = trace["traceEvents"]
    assert isinstance(events, list) and events
    assert Counter(e["ph"] for e in events).keys() <= {"X", "s", "f", "C", "M"}
    tracks = defaultdict(list)
    for e in events:
        assert isinstance(e["pid"], int) and isinstance(e["name"], str)
        if e["ph"] == "M":
            assert isinstance(e["args"], dict) and e["name"] in ("process_name", "process_sort_index", "thread_name")
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] > 0 and isinstance(e["args"], dict)
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
        if e["ph"] == "C":
            assert isinstance(e["args"], dict) and all(isinstance(v, (int, float)) for v in e["args"].values())
    for track, slices in tracks.items():  # slices on one track nest or follow each other
        slices.sort(key=lambda s: (s[0], -s[1]))
        open_ends: list[float] = []
        for start, end, name in slices:
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], f"{name} overlaps a slice partly on {track}"
            open_ends.append(end)
    flows = defaultdict(list)
    for e in events:
        if e["ph"] in "sf":
            flows[e["id"]].append(e)
            enclosing = [s for s in tracks[(e["pid"], e["tid"])] if s[0] <= e["ts"] <= s[1]]
            assert enclosing, f"flow {e['id']} ({e['ph']}) has no slice to bind to"
    assert all(sorted(f["ph"] for f in pair) == ["f", "s"] for pair in flows.values()), "flow ids not paired"
    assert all(f["bp"] == "e" for pair in flows.values() for f in pair if f["ph"] == "f")
    return tracks


def names(trace: dict) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}


@pytest.mark.placement
def test_trace_writes_a_timeline_with_a_transfer_arrow_per_step_and_live_bytes(tmp_path):
    (tmp_path / "step.py").write_text(STEP_SCRIPT)
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "--logical_cpus=2", "--memory",
                           "--perfetto=step.json.gz", "step.py"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"to {tmp_path}/step.json.gz (open it in ui.perfetto.dev or chrome://tracing)" in done.stdout
    trace = json.loads(gzip.decompress((tmp_path / "step.json.gz").read_bytes()))
    tracks = check_format(trace)
    assert "sequence" in trace["otherData"]["clock"]
    device = {name: pid for pid, name in names(trace).items()}
    assert {"/device:CPU:0", "/device:CPU:1"} <= set(device)
    mul = [s for s in tracks[(device["/device:CPU:1"], 1)] if s[2] == "Mul"]
    assert len(mul) == 3  # one per step, on CPU:1, in order
    sends = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] == "send Mul input #0"]
    assert len(sends) == 3 and {e["pid"] for e in sends} == {device["/device:CPU:0"]}
    assert {e["args"]["bytes"] for e in sends} == {8 * 64 * 4} and all(e["args"]["line"].endswith("step.py:15")
                                                                        for e in sends)
    for send, step in zip(sorted(sends, key=lambda e: e["ts"]), sorted(mul)):
        assert step[0] <= send["ts"] < step[1]  # the transfer lies within the step that needed it
    calls = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "function call"]
    assert len(calls) == 3 and calls[0]["args"]["line"].endswith("step.py:16")
    live = [e["args"]["bytes"] for e in trace["traceEvents"] if e["ph"] == "C" and e["pid"] == device["/device:CPU:1"]]
    assert live and max(live) >= 8 * 64 * 4


def test_to_perfetto_of_a_log_in_a_program(python, tmp_path):
    path = tmp_path / "block.json"
    out = python(f"""
        import json, tensorflow as tf, tfplace
        with tfplace.capture_placement(sources=True) as log:
            y = tf.ones(3) + 1.0
            try:
                tf.matmul(tf.ones((2, 3)), tf.ones((2, 3)))
            except tf.errors.InvalidArgumentError:
                pass
        log.to_perfetto({str(path)!r})
        trace = json.load(open({str(path)!r}))
        report([[e["name"], e["cat"], e["args"].get("kind")] for e in trace["traceEvents"] if e["ph"] == "X"])
    """)
    assert ["AddV2", "op", "execute"] in out and ["MatMul", "failed op", "failed"] in out
    check_format(json.loads(path.read_text()))


@pytest.mark.placement
def test_a_timed_trace_puts_ops_at_the_profilers_times_and_keeps_the_profile(tmp_path):
    (tmp_path / "step.py").write_text(STEP_SCRIPT)
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "--logical_cpus=2", "--timing", "--memory",
                           "--profile_dir=profile", "--perfetto=timed.json", "step.py"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    trace = json.loads((tmp_path / "timed.json").read_text())
    tracks = check_format(trace)
    assert trace["otherData"]["clock"].startswith("TensorFlow's profiler: microseconds")
    device = {name: pid for pid, name in names(trace).items()}
    muls = [s for (pid, _), slices in tracks.items() if pid == device["/device:CPU:1"] for s in slices if s[2] == "Mul"]
    assert len(muls) == 3 and len({s[0] for s in muls}) == 3  # three runs, at three times
    lines = {e["args"].get("line") for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] == "Mul"}
    assert lines == {"step.py:15"}
    calls = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "function call"]
    assert len(calls) == 3 and {e["args"]["line"] for e in calls} == {"step.py:16"}
    assert {e["pid"] for e in calls} == {device["/device:CPU:0"]}
    assert any(e["ph"] == "s" for e in trace["traceEvents"]) and any(e["ph"] == "C" for e in trace["traceEvents"])
    # one clock: the live-bytes counters lie among the slices, not at epoch microseconds
    end = max(e["ts"] + e["dur"] for e in trace["traceEvents"] if e["ph"] == "X")
    assert all(0 <= e["ts"] <= end for e in trace["traceEvents"] if e["ph"] == "C")
    # every transfer the log knows carries its bytes and line, even where the profile saw more
    sends = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] == "send Mul input #0"]
    assert len(sends) == 3 and all(e["args"]["bytes"] == 8 * 64 * 4 and e["args"]["line"] == "step.py:15"
                                   for e in sends)
    assert list((tmp_path / "profile" / "plugins" / "profile").glob("*/*.xplane.pb"))  # for TensorBoard
    # the steps first: a slice per call of step (the first warm-up), its phases end to end below it
    assert names(trace)[min(names(trace))] == "steps"
    steps = sorted(tracks[(device["steps"], 1)])
    assert [s[2] for s in steps] == ["warm-up step 0", "step 1", "step 2"]
    phases = sorted(tracks[(device["steps"], 2)])
    assert {s[2] for s in phases} <= {"input", "compute", "transfer", "sync", "host", "compile", "idle"}
    assert all(any(a <= p[0] and p[1] <= b for a, b, _ in steps) for p in phases)


def test_profile_dir_needs_timing(tmp_path):
    (tmp_path / "ran.py").write_text("open('ran.txt', 'w').close()\n")
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "--profile_dir=p", "ran.py"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == (
        "tfplace trace: error: --profile_dir='p' (from option --profile_dir) needs --timing or --memory: allowed is "
        "tfplace trace --timing --profile_dir=p ...")
    assert not (tmp_path / "ran.txt").exists()


@pytest.mark.placement
def test_a_memory_capture_draws_bytes_in_use_per_device_on_the_profilers_clock(python, tmp_path):
    path = tmp_path / "memory.json"
    peak = python(f"""
        import json, tensorflow as tf, tfplace

        @tf.function
        def step(x):
            return tf.reduce_sum(tf.tile(x, [4, 1]))  # a 64 MiB intermediate

        with tfplace.capture_placement(memory=True, timing=True) as log:
            x = tf.ones((4096, 1024))  # 16 MiB
            total = step(x)
        log.to_perfetto({str(path)!r})
        report(log.memory().devices["/device:CPU:0"].peak_bytes)
    """, env={"TF_CPU_ALLOCATOR_USE_BFC": "1"})
    trace = json.loads(path.read_text())
    tracks = check_format(trace)
    device = {name: pid for pid, name in names(trace).items()}
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["pid"] == device["/device:CPU:0"]]
    in_use = [(e["ts"], e["args"]["bytes"]) for e in counters if e["name"] == "bytes in use"]
    assert in_use and not [e for e in counters if e["name"] == "live bytes"]  # replaced: the allocators saw all
    assert 64 * 2**20 <= max(level for _, level in in_use) <= (64 + 20) * 2**20 + 64 * 2**10
    assert max(level for _, level in in_use) == peak  # the level log.memory() reads its peak from
    times = [at for at, _ in in_use]
    assert times == sorted(times) and len(set(times)) == len(times)  # one point per time, in order
    slices = [s for found in tracks.values() for s in found]
    assert min(s[0] for s in slices) <= times[0] and times[-1] <= max(s[1] for s in slices)  # the slices' clock


def test_bytes_in_use_replays_the_allocators_events_to_the_byte():
    from tfplace.placement.profile._model import Allocation, OpRun, Runs, Timing
    from tfplace.placement.shown._perfetto import trace_events

    def event(allocator, at, freed, requested, chunk, address, in_use):
        return Allocation(allocator, at, freed, in_use, 0, 0, requested, chunk, address, "MatMul", "output", 1, "[4]")

    runs = Runs()
    runs.append(OpRun("/device:GPU:0", "MatMul", 100.0, 50.0, 0, -1))  # the slices: 0 to 50 µs
    allocations = (event("GPU_0_bfc", 90.0, False, 100, 256, 0xA, 1280),  # 1024 held before; drawn at 0
                   event("GPU_0_bfc", 110.0, False, 4000, 4096, 0xB, 5376),
                   event("GPU_0_bfc", 110.0, True, 0, 256, 0xA, 5120),  # the same µs: one point, the level after
                   event("GPU_0_bfc", 120.0, True, 0, 512, 0xC, 4608),  # allocated before the block
                   event("mklcpu", 125.0, False, 3000, 3072, 0xB, 3072),  # another allocator: its own 0xB
                   event("GPU_0_bfc", 130.0, False, 64, 256, 0xD, 4864),
                   event("unknown_allocator", 135.0, False, 8, 256, 0xE, 256),  # no device: not drawn
                   event("mklcpu", 140.0, True, 0, 3072, 0xB, 0),
                   event("GPU_0_bfc", 200.0, True, 0, 4096, 0xB, 768))  # after the last slice: at its end
    timing = dataclasses.replace(Timing.empty(), runs=runs, allocations=allocations)
    census = [(0, "/device:GPU:0", 4096, 0), (0, "/device:CPU:1", 512, 0), (0, "/device:CPU:0", 9000, 0)]
    trace = trace_events([], [], [], census, timing, counted=True)
    check_format(trace)
    process = names(trace)
    counters = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "C":
            counters[(process[e["pid"]], e["name"])].append((e["ts"], e["args"]["bytes"]))
    assert counters[("/device:GPU:0", "bytes in use")] == [(0.0, 1124), (10.0, 5024), (20.0, 4512), (30.0, 4576),
                                                          (50.0, 576)]
    assert counters[("/device:CPU:0", "bytes in use")] == [(25.0, 3000), (40.0, 0)]  # on the first CPU
    assert ("/device:CPU:1", "bytes in use") not in counters and "/device:CPU:1" in process.values()
    assert ("/device:GPU:0", "live bytes") not in counters  # replaced: the allocators reached the census's peak
    assert counters[("/device:CPU:0", "live bytes")] == [(0.0, 9000)]  # kept: the allocators saw less
    assert counters[("/device:CPU:1", "live bytes")] == [(0.0, 512)]
    without = trace_events([], [], [], census, timing)  # no memory capture: no allocator counter
    assert {e["name"] for e in without["traceEvents"] if e["ph"] == "C"} == {"live bytes"}
