"""Memory per device: `capture_placement(memory=True)`, `log.memory()`, `live_tensors()`, the
out-of-memory note, `assert_memory_below` and `tfplace trace --memory`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import line_of

TWO_DEVICES = """
    import tensorflow as tf, tfplace
    tfplace.configure(logical_cpus=2)
    with tfplace.capture_placement(memory=True, sources=True) as log:
        with tf.device("CPU:1"):
            third = tf.zeros((500, 500))       # the third, freed
        del third
        with tf.device("CPU:0"):
            a = tf.zeros((1000, 1000))         # 4 MB on CPU:0
        with tf.device("CPU:1"):
            b = tf.zeros((2000, 1000))         # 8 MB on CPU:1
    found = log.memory()
    try:
        log.assert_memory_below("CPU:1", "1 MiB")
        failed = ""
    except AssertionError as error:
        failed = str(error)
    log.assert_memory_below("CPU:0", "5 MB")
    report({"devices": {d: [m.peak_bytes, m.live_bytes, [list(t) for t in m.top]] for d, m in found.devices.items()},
            "tracked": found.tracked, "failed": failed, "json": log.to_json()["memory"]["devices"]})
"""


def test_peak_and_live_bytes_per_device_with_their_lines(python):
    out = python(TWO_DEVICES)
    third, a, b = (line_of(TWO_DEVICES, marker) for marker in ("# the third", "# 4 MB", "# 8 MB"))
    assert out["devices"]["/device:CPU:0"] == [4_000_000, 4_000_000, [[a, 4_000_000]]]
    assert out["devices"]["/device:CPU:1"] == [8_000_000, 8_000_000, [[b, 8_000_000]]]  # the third freed by then
    assert out["tracked"] == 3
    assert out["failed"].startswith("expected the block's memory on /device:CPU:1 to stay below 1.0 MiB (1048576 "
                                    "bytes), but it peaked at 7.6 MiB (8000000 bytes; 7.6 MiB still live at the end)")
    assert f"       7.6 MiB  {b}\n" in out["failed"] and third not in out["failed"]
    assert [d["device"] for d in out["json"]] == ["/device:CPU:0", "/device:CPU:1"]


def test_mirrored_variables_are_counted_on_each_replica(python):
    out = python("""
        import tensorflow as tf, keras, tfplace
        tfplace.configure(logical_cpus=2)
        strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
        with tfplace.capture_placement(memory=True) as log:
            with strategy.scope():
                model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16)])
        with tfplace.capture_placement(memory=True) as kept:
            with tf.device("CPU:1"):
                only_here = tf.ones((10, 10))
        report({d: m.live_bytes for d, m in log.memory().devices.items()}
               | {"kept": kept.memory().devices["/device:CPU:1"].live_bytes})
    """)
    weights = (8 * 16 + 16) * 4
    assert out["/device:CPU:0"] == out["/device:CPU:1"] == weights
    assert out["kept"] == 400


@pytest.mark.slow  # TensorFlow's CPU allocator waits 10 s for memory before it gives up
def test_out_of_memory_error_names_the_largest_live_tensor_and_its_line(python):
    code = """
        import tensorflow as tf, tfplace
        try:
            with tfplace.capture_placement(memory=True, sources=True):
                kept = tf.ones((1000, 1000))   # the largest
                small = tf.ones((10,))
                tf.zeros((2**40,))
        except tf.errors.ResourceExhaustedError as error:
            report(error.__notes__)
    """
    [note] = python(code)
    lines = note.splitlines()
    assert lines[0].startswith("tfplace (memory=True): out of memory on /device:CPU:0: 4096.0 GiB requested for "
                               f"float32[1099511627776] by Fill at {line_of(code, 'tf.zeros((2**40,))')}"), note
    assert lines[0].endswith("the device held 3.8 MiB, largest first:"), note
    assert lines[1].split()[:4] == ["3.8", "MiB", line_of(code, "# the largest"), "returned"], note


def test_an_out_of_memory_error_raised_in_the_block_gets_the_note_of_the_device_it_names(python):
    # The fast tier's twin of the test above: the error as TensorFlow words it, raised without the allocator's wait.
    code = """
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)
        try:
            with tfplace.capture_placement(memory=True, sources=True):
                with tf.device("CPU:1"):
                    kept = tf.ones((100, 100))   # the largest
                small = tf.ones((10,))
                raise tf.errors.ResourceExhaustedError(None, None,
                    "OOM when allocating tensor with shape[1099511627776] "
                    "and type float on /job:localhost/replica:0/task:0/device:CPU:1 by allocator cpu")
        except tf.errors.ResourceExhaustedError as error:
            report(error.__notes__)
    """
    [note] = python(code)
    lines = note.splitlines()
    assert lines[0] == ("tfplace (memory=True): out of memory on /device:CPU:1: 4096.0 GiB requested for "
                        "float32[1099511627776] by an op at an unknown line (allocator cpu); the device held 39.1 KiB, "
                        "largest first:"), note
    assert lines[1].split() == ["39.1", "KiB", line_of(code, "# the largest"), "returned", "float32"], note
    assert len(lines) == 2, note  # the small tensor is on another device


def test_live_tensors_lists_a_tensor_where_its_memory_is_until_it_is_freed(python):
    code = """
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)
        with tfplace.capture_placement(memory=True, sources=True):
            with tf.device("CPU:1"):
                x = tf.zeros((123, 45))   # made here
        before = [(t.kind, t.device, t.bytes, t.source) for t in tfplace.live_tensors("CPU:1") if t.shape == (123, 45)]
        del x
        after = [t for t in tfplace.live_tensors("CPU:1") if t.shape == (123, 45)]
        report([before, len(after)])
    """
    before, after = python(code)
    assert before == [["tensor", "/device:CPU:1", 123 * 45 * 4, line_of(code, "# made here")]] and after == 0


def test_sizes_and_logs_without_memory():
    from tfplace import PlacementLog
    from tfplace.placement.records._memory_figures import parse_size

    assert [parse_size(v, "limit") for v in (0, 1024, "2 GiB", "512MiB", "1.5 GB", "100 kB", "7")] == [
        0, 1024, 2 * 2**30, 512 * 2**20, 1_500_000_000, 100_000, 7]
    for bad in ("two GiB", "5 parsecs", -1, True):
        with pytest.raises(ValueError, match=r"limit received .*: allowed are a number of bytes >= 0 or a string"):
            parse_size(bad, "limit")
    log = PlacementLog()
    assert log.memory().devices == {} and "capture_placement(memory=True)" in log.memory().note
    with pytest.raises(ValueError, match=r"memory was not counted: capture with capture_placement\(memory=True\)"):
        log.assert_memory_below("CPU:0", "1 GiB")


def test_trace_memory_prints_peak_and_live_per_device(tmp_path):
    # a module that imports __main__ while the script runs (Python 3.13's rlcompleter, through absl's pdb)
    (tmp_path / "holder.py").write_text("import __main__\n", encoding="utf-8")
    (tmp_path / "grow.py").write_text(textwrap.dedent("""
        import tensorflow as tf
        big = tf.zeros((512, 512))
        parts = [tf.ones((64, 64)) for _ in range(3)]
        import holder
    """), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "--memory", "--json=t.json", "grow.py"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    start = lines.index("memory per device (each device's peak, what it held then by line, what grew step after step, "
                        "what was not seen):")
    # the script's globals are gone at the end
    assert lines[start + 1] == "  /device:CPU:0: peak 1.0 MiB (reached by Fill at grow.py:4), held at the end 0 B"
    assert lines[start + 2:start + 5] == ["    held at the peak:",
                                          "       1.0 MiB  grow.py:3  returned Fill float32[512,512]",
                                          "      48.0 KiB  grow.py:4  returned Fill float32[64,64] x3"]
    memory = json.loads((tmp_path / "t.json").read_text())["memory"]
    # the tensors the script kept, and (every CPU allocation reported under --memory's BFC allocator) the few bytes
    # of the ops' own small allocations (a shape, a scalar) at that moment
    assert 0 <= memory["devices"][0]["peak_bytes"] - (512 * 512 * 4 + 3 * 64 * 64 * 4) < 1024


def test_threads_making_and_freeing_tensors_at_once_leave_exact_live_and_peak_bytes(python):
    # the census takes no lock on an op's path: each change is one row appended at once, replayed when read
    out = python("""
        import threading, tensorflow as tf, tfplace
        x = tf.ones((8, 8))  # 256 bytes
        kept = []
        def work():
            mine = [tf.identity(x) for _ in range(300)]  # each thread holds 300 at its peak
            for _ in range(300):
                mine.pop()
                mine.append(tf.identity(x))
            kept.extend(mine[:100])
        with tfplace.capture_placement(memory=True, all_threads=True) as log:
            threads = [threading.Thread(target=work) for _ in range(4)]
            for t in threads: t.start()
            for t in threads: t.join()
        figures = log.memory().devices["/device:CPU:0"]
        report([figures.live_bytes, figures.peak_bytes, log.memory().tracked])
    """)
    live, peak, tracked = out
    assert live == 4 * 100 * 256  # what the threads kept
    assert 300 * 256 <= peak <= 4 * 301 * 256 and tracked == 4 * 600


def test_trace_memory_counts_every_cpu_allocation_with_a_bfc_allocator(tmp_path):
    """`tfplace trace --memory` sets TF_CPU_ALLOCATOR_USE_BFC=1 for the script (unless set), so that the CPU's
    allocator reports every allocation, inside functions too."""
    (tmp_path / "inside.py").write_text(textwrap.dedent("""
        import os
        import tensorflow as tf
        print("bfc", os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"))
        f = tf.function(lambda x: tf.reduce_sum(tf.tile(x, [4, 1])))
        f(tf.ones((1024, 1024)))
    """), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "--memory", "--json=t.json", "inside.py"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bfc 1" in done.stdout
    memory = json.loads((tmp_path / "t.json").read_text())["memory"]
    assert [a["allocator"] for a in memory["allocators"]] == ["bfc_cpu_allocator_for_gpu"]
    assert memory["devices"][0]["peak_bytes"] >= 16 * 2 ** 20  # the tile inside the function
