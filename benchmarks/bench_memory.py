"""Cost of counting memory per device, as ratios measured side by side.

* An eager op inside `capture_placement(memory=True)` vs outside a capture, and vs a capture
  without memory (one process, alternating rounds).
* Keras `fit` (2 epochs, small model, fresh model each) inside `capture_placement(memory=True)`
  vs without tfplace.
* Keras `fit` inside `capture_placement(memory=True)` vs inside `capture_placement(timing=True)` (one profiler
  session serves both: what memory adds is the census and the allocators' events' replay).
* Replaying 100,000 allocator events (50,000 allocations and their frees, 5,000 function calls) into each device's
  peak, the rows at it and growth.
* The census's own memory per tracked tensor: 20,000 live tensors made in a `memory=True` block
  vs the same in a block without memory (tracemalloc, Python allocations only).

    python benchmarks/bench_memory.py
"""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path

from common import print_table, ratio, row

ROOT = Path(__file__).resolve().parents[1]
KERAS_FIT = """
import sys, time, numpy as np, keras, tfplace
x, y = np.random.default_rng(0).normal(size=(512, 16)).astype("float32"), np.ones((512, 1), "float32")
def fit():
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    model.compile("adam", "mse")
    start = time.perf_counter()
    model.fit(x, y, epochs=2, batch_size=32, verbose=0)
    return time.perf_counter() - start
fit()  # warm up Keras and TensorFlow
BASELINE = {"plain": None, "timing": {"timing": True}}[sys.argv[1]]
times = {"base": [], "memory": []}
for round in range(4):
    for mode in (("base", "memory") if round % 2 else ("memory", "base")):
        if mode == "memory":
            with tfplace.capture_placement(memory=True) as log:
                times[mode].append(fit())
        elif BASELINE is None:
            times[mode].append(fit())
        else:
            with tfplace.capture_placement(**BASELINE):
                times[mode].append(fit())
print(min(times["memory"]), min(times["base"]), len(log.memory().devices))
"""


def keras_fit_cost(baseline: str = "plain") -> tuple[float, float, float]:
    """Keras fit inside capture_placement(memory=True) vs without tfplace ("plain") or inside
    capture_placement(timing=True) ("timing"): (ratio, with s, baseline s)."""
    done = subprocess.run([sys.executable, "-c", KERAS_FIT, baseline], capture_output=True, text=True, check=True,
                          cwd=ROOT)
    counted, plain, _ = done.stdout.split()[-3:]
    return float(counted) / float(plain), float(counted), float(plain)


def replay_seconds(events: int = 100_000) -> float:
    """Seconds to replay `events` allocator events (half allocations, half their frees) of 5,000 function calls
    into each device's peak, the rows held at it, growth and what it held last (best of 3)."""
    import time

    from tfplace.placement.profile._model import Allocation
    from tfplace.placement.records._memory_held import Places, replay

    calls, per_call = 5_000, events // 2 // 5_000
    allocations, runs, nodes = [], [], {}
    for call in range(calls):
        start = call * 100.0
        runs.append((start, start + 90.0, "__inference_train_step_7", "train.py:30"))
        for k in range(per_call):
            node = f"dense_{k}/MatMul"
            nodes[node] = ("/device:GPU:0", f"model.py:{10 + k}", "MatMul")
            address = call * 1000 + k if k else 10**9 + call  # each call's first allocation kept: growth
            allocations.append(Allocation("GPU_0_bfc", start + 1 + k, False, 0, 0, 0, 4096, 4096, address, node,
                                          "output", 1, "[32,32]"))
        for k in range(1, per_call):
            allocations.append(Allocation("GPU_0_bfc", start + 50 + k, True, 0, 0, 0, 4096, 4096, call * 1000 + k,
                                          "", "", None, ""))
    places = Places(nodes=nodes, calls=runs)
    best = float("inf")
    for _ in range(3):
        began = time.perf_counter()
        replay(allocations, places, [run[0] for run in runs])
        best = min(best, time.perf_counter() - began)
    return best


def census_bytes(tensors: int = 20_000) -> tuple[float, int]:
    """Python bytes per live tensor the census tracks: (bytes per tensor, tensors tracked)."""
    import tensorflow as tf

    import tfplace

    x = tf.ones(1)
    peaks = {}
    for memory in (False, True):
        kept = []
        tracemalloc.start()
        with tfplace.capture_placement(memory=memory) as log:
            for _ in range(tensors):
                kept.append(tf.identity(x))
        peaks[memory] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        tracked = log.memory().tracked if memory else 0
        del kept
    return (peaks[True] - peaks[False]) / tensors, tracked


def run(ops: int = 20_000) -> list[dict[str, str]]:
    import tensorflow as tf

    import tfplace

    x = tf.ones((4, 4))

    def block():
        for _ in range(ops):
            tf.identity(x)

    def inside(**kwargs):
        def call():
            with tfplace.capture_placement(**kwargs):
                block()
        return call

    counted = ratio(inside(memory=True), block, calls=1, rounds=7)
    versus_capture = ratio(inside(memory=True), inside(), calls=1, rounds=7)
    fitted, fitted_s, plain_s = keras_fit_cost()
    over_timing, memory_s, timing_s = keras_fit_cost("timing")
    replayed = replay_seconds()
    per_tensor, tracked = census_bytes()
    return [
        row("eager op inside capture_placement(memory=True) vs outside", f"{counted[0]:.2f}", "<= 1.3",
            f"{counted[1] / ops * 1e6:.1f} vs {counted[2] / ops * 1e6:.1f} us per tf.identity of a 4x4 float32"),
        row("eager op: capture_placement(memory=True) vs capture_placement()", f"{versus_capture[0]:.2f}", "",
            f"{versus_capture[1] / ops * 1e6:.1f} vs {versus_capture[2] / ops * 1e6:.1f} us per op"),
        row("Keras fit inside capture_placement(memory=True) vs outside", f"{fitted:.2f}", "<= 1.15",
            f"{fitted_s:.2f} vs {plain_s:.2f} s, 2 epochs of 16 steps, fresh model each, best of 4"),
        row("Keras fit: capture_placement(memory=True) vs capture_placement(timing=True)", f"{over_timing:.2f}",
            "<= 1.05", f"{memory_s:.2f} vs {timing_s:.2f} s, best of 4, alternating"),
        row("replay of 100,000 allocator events (peak, rows at it, growth)", f"{replayed:.2f} s", "< 1 s",
            "5,000 calls of 10 allocations, 9 freed in the call"),
        row("census memory per live tensor it tracks", f"{per_tensor:.0f} B", "",
            f"tracemalloc peak of 20,000 live tensors, memory=True minus memory=False; {tracked} tracked"),
    ]


if __name__ == "__main__":
    print_table(run())
