"""What a capture costs a `tf.compat.v1.Session` loop, beside what it costs eager ops, as ratios measured
side by side.

* `Session.run` of TF1's "Using GPUs" graph (a fed 64x64 placeholder, a `MatMul` on the second logical
  CPU, an `AddN` back on the first: two transfers per run) inside a capture vs without tfplace, after the
  first run (the Session placed its graph; the capture asked that run for its partitions once).
* The same figure for an eager `MatMul` + `AddN` on the same devices: the op-callback path's cost.
* The capture's memory over 20,000 runs: what the process holds after 10,000 more runs (the log keeps
  one reference per transfer per run, as for function calls).

    python benchmarks/bench_sessions.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from common import print_table, row

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = """
import json, time, tracemalloc, numpy as np, tensorflow as tf, tfplace
from common import ratio
tfplace.configure(logical_cpus=2)
graph = tf.Graph()
with graph.as_default():
    with tf.device("/cpu:0"):
        x = tf.compat.v1.placeholder(tf.float32, (64, 64))
    with tf.device("/cpu:1"):
        c = tf.matmul(x, x)
    d = tf.add_n([c, x])
value = np.ones((64, 64), "float32")
with tfplace.capture_placement():
    sess = tf.compat.v1.Session(graph=graph)
    sess.run(d, feed_dict={x: value})  # placed, partitions read
plain = lambda: sess.run(d, feed_dict={x: value})
def in_capture():
    with tfplace.capture_placement():
        for _ in range(500):
            plain()
def outside():
    for _ in range(500):
        plain()
session_ratio, session_s, plain_s = ratio(in_capture, outside, calls=2)
with tf.device("/cpu:0"):
    ex = tf.ones((64, 64))
def eager_once():
    with tf.device("/cpu:1"):
        ec = tf.matmul(ex, ex)
    return tf.add_n([ec, ex])
def eager_in_capture():
    with tfplace.capture_placement():
        for _ in range(500):
            eager_once()
def eager_outside():
    for _ in range(500):
        eager_once()
eager_ratio, _, _ = ratio(eager_in_capture, eager_outside, calls=2)
with tfplace.capture_placement() as long:
    for _ in range(10_000):
        plain()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(10_000):
        plain()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
print("RESULT" + json.dumps([session_ratio, eager_ratio, session_s / 500, (after - before) / 10_000, len(long.copies)]))
"""


def run() -> list[dict[str, str]]:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=1200,
                          cwd=Path(__file__).resolve().parent, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    line = next((text for text in done.stdout.splitlines() if text.startswith("RESULT")), None)
    if line is None:
        raise RuntimeError(f"bench_sessions: the program reported nothing (exit {done.returncode}):\n"
                           f"{done.stderr[-3000:]}")
    session_ratio, eager_ratio, per_run, growth, copies = json.loads(line[len("RESULT"):])
    return [
        row("Session.run in a capture / without tfplace", f"{session_ratio:.2f}x",
            f"<= eager ops' ratio ({eager_ratio:.2f}x)",
            f"{per_run * 1e6:.0f} us per captured run; two transfers per run"),
        row("eager MatMul + AddN in a capture / without tfplace", f"{eager_ratio:.2f}x", "", "the op-callback path"),
        row("memory per run of a long Session loop in a capture", f"{growth:.0f} B",
            "flat beside the transfers kept", f"{copies} transfer records after 20,000 runs"),
    ]


if __name__ == "__main__":
    print_table(run())
