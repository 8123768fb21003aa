"""Reading and analysing the profile of N steps: seconds and peak memory beside the XSpace file, for N = 1,000
and 10,000 (it grows linearly with steps).

    python benchmarks/bench_steps.py
"""

from __future__ import annotations

import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from xspace import Plane  # (tests/xspace.py: profiles written as TensorFlow's profiler writes them)


def profile(steps: int) -> bytes:
    """A Keras-like run: per step a tf.function call, its function call, a get-next, a tf.data stage and
    twelve nodes on two executor threads."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    host = Plane(space, "/host:CPU")
    python, pools = host.line("python"), [host.line("tf_Compute/1"), host.line("tf_Compute/2")]
    getnext, producer = host.line("tf_data_iterator_get_next/3"), host.line("tf_data_iterator_resource/4")
    for i in range(steps):
        at = i * 1000.0
        host.event(python, "multi_step_on_iterator", at, 900, tf_function_call="notTraced-nonXla", tracing_count=1)
        host.event(python, "EagerLocalExecute: __inference_multi_step_on_iterator_5", at + 50, 840)
        host.event(getnext, "IteratorGetNextOp::DoCompute", at + 100, 300, id=i)
        host.event(producer, "Iterator::Root::Map", at + 120, 250, name="MapDataset:1")
        for node in range(12):
            host.event(pools[node % 2], f"dense_{node}/MatMul:MatMul", at + 420 + 35 * node, 30)
    return space.SerializeToString()


def measure(steps: int) -> tuple[float, float, int]:
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from tfplace.placement.steps import _analysis
    from tfplace.placement.profile import _xspace

    data = profile(steps)
    nodes = {f"dense_{n}/MatMul": "/device:CPU:0" for n in range(12)}

    def run():
        return _analysis.steps([], _xspace.read_xspace(xplane_pb2.XSpace.FromString(data), nodes), "")

    start = time.perf_counter()
    found = run()
    seconds = time.perf_counter() - start  # timed alone: tracemalloc slows Python's allocations several times
    tracemalloc.start()
    run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert found.count + found.warmup == steps
    return seconds, peak / 2**20, len(data)


if __name__ == "__main__":
    for n in (1_000, 10_000):
        seconds, mib, size = measure(n)
        print(f"{n:>6} steps: {seconds:.2f} s, peak {mib:.0f} MiB of Python memory beside the "
              f"{size / 2**20:.1f} MiB XSpace")
