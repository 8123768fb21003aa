"""d2l's exercises for the GPUs chapter, on whatever devices exist (logical CPUs here).

1. Large vs small work: matmul GFLOP/s at sizes 64 ... 4096 and the share of
   the machine's peak (cores x clock x FLOP per cycle).
2. 1,000 matmuls of 100 x 100 logging the Frobenius norm to the host every
   step vs keeping the log on the device and transferring once.
4. An implicit cross-device copy every step vs one explicit `to_device`.

    python benchmarks/bench_gpus_chapter.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from common import print_table, ratio, row


def peak_gflops() -> tuple[float, str]:
    """Cores x clock x FLOP per cycle, read from /proc/cpuinfo (float32, FMA counted as 2)."""
    mhz, flags = 0.0, ""
    with open("/proc/cpuinfo", encoding="utf-8") as info:
        for line in info:
            if line.startswith("cpu MHz") and not mhz:
                mhz = float(line.split(":")[1])
            elif line.startswith("flags") and not flags:
                flags = line
    lanes = 16 if " avx512f" in flags else 8 if " avx" in flags else 4
    per_cycle = lanes * (2 if " fma" in flags else 1) * 2  # two vector units per core
    cores = os.cpu_count() or 1
    return cores * mhz / 1e3 * per_cycle, f"{cores} cores x {mhz / 1e3:.2f} GHz x {per_cycle} FLOP/cycle"


def run(quick: bool = False) -> list[dict[str, str]]:
    import tensorflow as tf

    import tfplace

    tfplace.configure(logical_cpus=2)
    rows = []
    peak, how = peak_gflops()
    for kind in sorted({d.split(":")[1] for d in tfplace.configure().logical_devices}):
        for size in (64, 256, 1024) if quick else (64, 256, 1024, 2048, 4096):
            with tf.device(f"/device:{kind}:0"):
                a = tf.random.normal((size, size))
                tf.matmul(a, a).numpy()
                repeats = max(2, int(2e9 / (2 * size ** 3)))
                times = []
                for _ in range(3):
                    start = time.perf_counter()
                    for _ in range(repeats):
                        c = tf.matmul(a, a)
                    c.numpy()
                    times.append((time.perf_counter() - start) / repeats)
            gflops = 2 * size ** 3 / statistics.median(times) / 1e9
            rows.append(row(f"matmul {size}x{size} on {kind}:0", f"{gflops:.1f} GFLOP/s",
                            "", f"{100 * gflops / peak:.0f}% of peak {peak:.0f} GFLOP/s ({how})"))

    a = tf.random.normal((100, 100))

    def host_every_step():
        norms = []
        x = a
        for _ in range(1000):
            x = tf.matmul(a, x) / 10.0
            norms.append(float(tf.norm(x)))
        return norms

    def device_then_once():
        norms = []
        x = a
        for _ in range(1000):
            x = tf.matmul(a, x) / 10.0
            norms.append(tf.norm(x))
        return tf.stack(norms).numpy()

    host_ratio = ratio(host_every_step, device_then_once, calls=1, rounds=3 if quick else 5)[0]
    rows.append(row("1000 matmuls 100x100: norm to host every step vs once", f"{host_ratio:.2f}x", "",
                    "host-every-step time / on-device-log time; on CPUs the 'transfer' is a sync, not a copy"))

    with tf.device("/device:CPU:0"):
        x = tf.random.normal((256, 256))
    with tf.device("/device:CPU:1"):
        w = tf.random.normal((256, 256))

    def implicit():
        with tf.device("/device:CPU:1"):
            for _ in range(200):
                y = tf.matmul(x, w)  # x is copied to CPU:1 every step
        return y.numpy()

    def explicit():
        x1 = tfplace.to_device(x, "CPU:1")
        with tf.device("/device:CPU:1"):
            for _ in range(200):
                y = tf.matmul(x1, w)
        return y.numpy()

    copy_ratio = ratio(implicit, explicit, calls=1, rounds=5)[0]
    rows.append(row("implicit copy every step vs to_device once (200 matmuls 256^2)",
                    f"{copy_ratio:.2f}x", "", "between logical CPUs the copy is a host memcpy"))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    print_table(run(parser.parse_args().quick))
