"""Overheads of tfplace's device helpers, as ratios measured side by side.

    python benchmarks/bench_devices.py
"""

from __future__ import annotations

import subprocess
import sys
import time

from common import print_table, ratio, row


def import_and_configure_ms() -> tuple[float, float]:
    """Median extra ms of `import tfplace` (TensorFlow already imported) and of `configure()`."""
    code = (
        "import time, tensorflow as tf\n"
        "t = time.perf_counter(); import tfplace; t1 = time.perf_counter()\n"
        "tfplace.configure(logical_cpus=2, soft_placement=True); t2 = time.perf_counter()\n"
        "print((t1 - t) * 1000, (t2 - t1) * 1000)\n"
    )
    runs = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        runs.append(tuple(float(x) for x in out.split()))
    runs.sort()
    return runs[1]


def run() -> list[dict[str, str]]:
    import tensorflow as tf

    import tfplace

    x = tf.ones((4, 4))

    def under_tfplace():
        with tfplace.device("CPU:0"):
            return x + 1.0

    def under_tf():
        with tf.device("/CPU:0"):
            return x + 1.0

    op_ratio, op_c, op_b = ratio(under_tfplace, under_tf, 2000)
    with tf.device("/CPU:0"):
        identity = lambda: tf.identity(x)  # noqa: E731
        copy_ratio, copy_c, copy_b = ratio(lambda: tfplace.to_device(x, "CPU:0"), identity, 5000)
    import_ms, configure_ms = import_and_configure_ms()
    return [
        row("eager op under tfplace.device vs tf.device", f"{op_ratio:.3f}", "<= 1.05",
            f"{op_c * 1e6:.1f} vs {op_b * 1e6:.1f} us per op"),
        row("to_device(x, own device) vs tf.identity", f"{copy_ratio:.3f}", "<= 0.1",
            f"{copy_c * 1e6:.2f} vs {copy_b * 1e6:.1f} us"),
        row("import tfplace after tensorflow", f"{import_ms:.0f} ms", "<= 50 ms", "median of 3 processes"),
        row("configure(logical_cpus=2, soft_placement=True)", f"{configure_ms:.1f} ms", "<= 50 ms",
            "median of 3 processes"),
    ]


if __name__ == "__main__":
    start = time.time()
    print_table(run())
    print(f"({time.time() - start:.0f} s)")
