"""tfplace's own work per eager op, without TensorFlow's: the capture's op callback replayed on one real op's
arguments, in microseconds, beside a do-nothing callback called the same way.

A whole-op ratio (`bench_overhead.py`) divides this work by the op's time, which on a shared 2-core
machine moves by a third between runs; the replay measures the numerator alone, the best of 15 rounds,
each normalised by a fixed pure-Python workload timed just before it (so that a slower moment of the
machine slows both). Cases: a capture, `sources=True`, `memory=True`, `transfer_guard()`, and an op with
two inputs.

    python benchmarks/bench_callback.py
"""

from __future__ import annotations

import time

from common import print_table, row

CALLS = 20_000


def _reference() -> float:
    start = time.perf_counter()
    table = {i: i for i in range(64)}
    total = 0
    for i in range(CALLS):
        total += table[i & 63] + len(str(i))
    return time.perf_counter() - start


def _replayed(block, make) -> tuple[float, float]:
    """(best µs per call, reference µs per call in that round) of the hook a block installs, on `make()`'s op."""
    from tfplace import _tensorflow
    from tfplace.placement.taking import _callback

    grabbed = []
    with block:
        hook = _callback.thread_hooks()[0]
        callbacks = _tensorflow.op_callbacks()  # the thread's list holds the hook's bound `callback`
        index = callbacks.index(hook.callback)

        def grab(*args, **kwargs):
            grabbed.append((args, kwargs))
            return hook.callback(*args, **kwargs)

        callbacks[index] = grab
        try:
            make()
        finally:
            callbacks[index] = hook.callback
        args, kwargs = grabbed[0]
        best = None
        for _ in range(15):
            reference = _reference()
            start = time.perf_counter()
            for _ in range(CALLS):
                hook(*args, **kwargs)
            spent = time.perf_counter() - start
            if best is None or spent / reference < best[0] / best[1]:
                best = (spent, reference)
    return best[0] / CALLS * 1e6, best[1] / CALLS * 1e6


def run() -> list[dict[str, str]]:
    import tensorflow as tf

    import tfplace

    x, z = tf.ones((2, 2)), tf.ones((2, 2))
    rows = []
    nothing_us, nothing_ref = _nothing(lambda: tf.identity(x))
    for name, block, make in (
            ("capture_placement()", lambda: tfplace.capture_placement(), lambda: tf.identity(x)),
            ("capture_placement(sources=True)", lambda: tfplace.capture_placement(sources=True),
             lambda: tf.identity(x)),
            ("capture_placement(memory=True)", lambda: tfplace.capture_placement(memory=True), lambda: tf.identity(x)),
            ("transfer_guard()", lambda: tfplace.transfer_guard(), lambda: tf.identity(x)),
            ("capture_placement(), two inputs (x + z)", lambda: tfplace.capture_placement(), lambda: x + z)):
        spent, reference = _replayed(block(), make)
        rows.append(row(f"callback of {name}", f"{spent:.2f} us",
                        note=f"{spent / reference:.2f} reference units; a do-nothing callback "
                             f"{nothing_us:.2f} us ({nothing_us / nothing_ref:.2f} units)"))
    return rows


def _nothing(make) -> tuple[float, float]:
    """A do-nothing callable called as the replay calls the hook."""
    def nothing(*args, **kwargs):
        return None

    best = None
    for _ in range(15):
        reference = _reference()
        start = time.perf_counter()
        for _ in range(CALLS):
            nothing("Identity", (), (), (), op_name=None, graph=None)
        spent = time.perf_counter() - start
        if best is None or spent / reference < best[0] / best[1]:
            best = (spent, reference)
    return best[0] / CALLS * 1e6, best[1] / CALLS * 1e6


if __name__ == "__main__":
    print_table(run())
