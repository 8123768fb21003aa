"""What a capture costs a program, beside what any op callback costs it (TensorFlow's floor), side by side.

* Per eager op, in place (one process, 4000 ops a round, 15 rounds in alternating order, medians): a
  `tf.identity` of a 2x2 tensor and an `x + z` (two inputs) outside any hook, under a do-nothing op
  callback (the floor: TensorFlow's own callback path), inside `capture_placement()`, with `sources=True`,
  with `memory=True`, and inside `transfer_guard()`; beside them, the least a callback that records an op
  reads (the op's device and the thread's scope, appended; then its input's memory device too).
* Keras `fit` with a fresh model each time (2 epochs of 16 steps, best of 6 rounds in alternating order):
  plain, under a do-nothing op callback, inside a capture.
* `tfplace trace` on a Keras `fit` under `MirroredStrategy` (2 logical CPUs, fresh model, 2 epochs): the
  fit's own time, as the script measures it, and the process's wall time, against the same script run
  plainly on the same devices (5 process pairs in alternating order, the best of each: a process's first
  `fit` traces its functions, and its time moves by a fifth between processes).
* Python memory per tensor a `memory=True` capture tracks (`bench_memory.census_bytes`).

    python benchmarks/bench_overhead.py
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from common import print_table, row

ROOT = Path(__file__).resolve().parents[1]
OPS = 4000
ROUNDS = 15

MIRRORED_FIT = """
import sys, time, numpy as np, keras, tensorflow as tf
if len(sys.argv) > 1:  # run plainly: the same two logical CPUs `tfplace trace --logical_cpus=2` makes
    tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                               [tf.config.LogicalDeviceConfiguration()] * 2)
x, y = np.random.default_rng(0).normal(size=(512, 16)).astype("float32"), np.ones((512, 1), "float32")
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    model.compile("adam", "mse")
start = time.perf_counter()
model.fit(x, y, epochs=2, batch_size=32, verbose=0)
print("FIT_SECONDS", time.perf_counter() - start)
"""


def _nothing(*args: object, **kwargs: object) -> None:
    return None


@contextlib.contextmanager
def _floor(callback: Callable[..., None] = _nothing) -> Iterator[None]:
    """The block under an op callback: by default one that does nothing, TensorFlow's own callback path,
    what any hook pays."""
    from tensorflow.python.framework import op_callbacks

    op_callbacks.add_op_callback(callback)
    try:
        yield
    finally:
        op_callbacks.remove_op_callback(callback)


class _Least:
    """The least a callback that records an eager op reads at the op (references beside the capture: what
    1.10 leaves): the op's device and the thread's `tf.device` scope, appended as a tuple; with `copies`,
    each input's memory device too (an implicit copy is seen at the op, while its input lives)."""

    def __init__(self, copies: bool) -> None:
        self.scope, self.log, self.copies = threading.local(), [], copies
        self.scope.name = None

    def __call__(self, op_type: object, inputs: Any, attrs: object, outputs: Any, op_name: object = None,
                 graph: object = None) -> None:
        if graph is None:
            device = outputs[0].device
            if self.copies:
                for tensor in inputs:
                    if tensor.backing_device != device:
                        break
            self.log.append((op_type, device, self.scope.name))


def per_op() -> dict[str, float]:
    """Median µs per op of each case (see the module's docstring), measured in place."""
    import tensorflow as tf

    import tfplace

    x, z = tf.ones((2, 2)), tf.ones((2, 2))

    def identities() -> float:
        start = time.perf_counter()
        for _ in range(OPS):
            tf.identity(x)
        return (time.perf_counter() - start) / OPS * 1e6

    def additions() -> float:
        start = time.perf_counter()
        for _ in range(OPS):
            x + z  # pylint: disable=pointless-statement
        return (time.perf_counter() - start) / OPS * 1e6

    def under(block, loop):
        def run() -> float:
            with block():
                return loop()
        return run

    least, least_copies = _Least(copies=False), _Least(copies=True)
    cases = {
        "plain": identities, "floor": under(_floor, identities),
        "capture": under(tfplace.capture_placement, identities),
        "least": under(lambda: _floor(least.__call__), identities),
        "least copies": under(lambda: _floor(least_copies.__call__), identities),
        "sources": under(lambda: tfplace.capture_placement(sources=True), identities),
        "memory": under(lambda: tfplace.capture_placement(memory=True), identities),
        "transfer_guard": under(tfplace.transfer_guard, identities),
        "two plain": additions, "two floor": under(_floor, additions),
        "two capture": under(tfplace.capture_placement, additions),
    }
    for run in cases.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for index in range(ROUNDS):
        for name in (names if index % 2 else names[::-1]):
            times[name].append(cases[name]())
    return {name: statistics.median(values) for name, values in times.items()}


def keras_fit() -> dict[str, float]:
    """Best seconds of a fresh-model Keras fit: plain, under a do-nothing op callback, inside a capture."""
    import numpy as np
    import keras

    import tfplace

    x, y = np.random.default_rng(0).normal(size=(512, 16)).astype("float32"), np.ones((512, 1), "float32")

    def fit() -> float:
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
        model.compile("adam", "mse")
        start = time.perf_counter()
        model.fit(x, y, epochs=2, batch_size=32, verbose=0)
        return time.perf_counter() - start

    def floor() -> float:
        with _floor():
            return fit()

    def captured() -> float:
        with tfplace.capture_placement():
            return fit()

    cases = {"plain": fit, "floor": floor, "capture": captured}
    fit()  # Keras and TensorFlow warm up
    times: dict[str, list[float]] = {name: [] for name in cases}
    for index in range(6):
        for name in (list(cases) if index % 2 else list(cases)[::-1]):
            times[name].append(cases[name]())
    return {name: min(values) for name, values in times.items()}


def trace_mirrored_fit(pairs: int = 5) -> dict[str, float]:
    """The best of the fit's own seconds and of the wall seconds: `tfplace trace` vs a plain run."""
    script = Path(tempfile.mkdtemp()) / "mirrored_fit.py"
    script.write_text(MIRRORED_FIT)
    commands = {"trace": [sys.executable, "-m", "tfplace", "trace", "--logical_cpus=2", str(script)],
                "plain": [sys.executable, str(script), "plain"]}
    found: dict[str, list[float]] = {"trace fit": [], "plain fit": [], "trace wall": [], "plain wall": []}
    for index in range(pairs):
        for mode in (("trace", "plain") if index % 2 else ("plain", "trace")):
            start = time.perf_counter()
            done = subprocess.run(commands[mode], capture_output=True, text=True, check=True, cwd=ROOT)
            found[f"{mode} wall"].append(time.perf_counter() - start)
            found[f"{mode} fit"].append(float(done.stdout.split("FIT_SECONDS")[1].split()[0]))
    return {name: min(values) for name, values in found.items()}


def run() -> list[dict[str, str]]:
    from bench_memory import census_bytes

    op = per_op()
    fit = keras_fit()
    traced = trace_mirrored_fit()
    per_tensor, tracked = census_bytes()

    def versus(case: str, plain: str = "plain", floor: str = "floor") -> str:
        return (f"{op[case]:.2f} vs {op[plain]:.2f} us per op; floor (a do-nothing op callback) "
                f"{op[floor] / op[plain]:.3f}")

    rows = [row(f"eager op: {label} vs outside", f"{op[case] / op['plain']:.3f}", goal, versus(case))
            for label, case, goal in (("capture_placement()", "capture", "<= 1.10"),
                                      ("capture_placement(sources=True)", "sources", "<= 1.25"),
                                      ("capture_placement(memory=True)", "memory", "<= 1.35"),
                                      ("transfer_guard()", "transfer_guard", "<= 1.12"))]
    rows += [row(f"reference: a callback that reads the op's device and scope{more} and appends a tuple",
                 f"{op[case] / op['plain']:.3f}", "", versus(case))
             for more, case in (("", "least"), (", and its input's memory device", "least copies"))]
    rows.insert(1, row("eager op with two inputs (x + z): capture_placement() vs outside",
                       f"{op['two capture'] / op['two plain']:.3f}", "<= 1.12",
                       versus("two capture", "two plain", "two floor")))
    rows += [
        row("Keras fit, fresh model: capture_placement() vs outside", f"{fit['capture'] / fit['plain']:.3f}", "<= 1.10",
            f"{fit['capture']:.3f} vs {fit['plain']:.3f} s, 2 epochs of 16 steps, best of 6; floor "
            f"{fit['floor'] / fit['plain']:.3f}"),
        row("tfplace trace on a MirroredStrategy fit vs plain run (the fit's time)",
            f"{traced['trace fit'] / traced['plain fit']:.3f}", "<= 1.10",
            f"{traced['trace fit']:.2f} vs {traced['plain fit']:.2f} s for 2 epochs on 2 logical CPUs; whole "
            f"process {traced['trace wall']:.1f} vs {traced['plain wall']:.1f} s wall "
            f"({traced['trace wall'] / traced['plain wall']:.3f}); best of 5 process pairs"),
        row("Python memory per tensor a memory=True capture tracks", f"{per_tensor:.0f} B", "<= 300 B",
            f"{tracked} tensors alive at once"),
    ]
    return rows


if __name__ == "__main__":
    print_table(run())
