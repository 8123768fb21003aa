"""Memory against XProf's memory profile of the same kept profile (`tfplace trace --memory --profile_dir`): each
allocator's peak to the byte, and every allocation XProf names at its peak among the rows tfplace says the device
held then, by line; in both CPU allocator modes."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.placement  # (run again with oneDNN off: what the allocators report differs)

MiB = 2 ** 20
ONEDNN = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") != "0"

PROGRAMS = {
    "peak": """
        import tensorflow as tf

        @tf.function
        def step(x):
            big = tf.tile(x, [4, 1])                  # 64 MiB inside the function
            return tf.reduce_sum(big)

        keep = tf.ones((4096, 1024))
        for _ in range(3):
            s = step(keep)
    """,
    "leak": """
        import tensorflow as tf

        @tf.function
        def step(x):
            return x * 2.0

        x = tf.ones((1024, 1024))
        kept = []
        for i in range(8):
            kept.append(step(x))                      # 4 MiB kept per step
    """,
}


def _xprof_peaks(directory):
    """Per allocator XProf's peak bytes in use, and the node names of the allocations it lists at that peak."""
    from xprof.convert import raw_to_tool_data

    [path] = glob.glob(os.path.join(directory, "plugins", "profile", "*", "*.xplane.pb"))
    data, _ = raw_to_tool_data.xspace_to_tool_data([path], "memory_profile", {})
    found = {}
    for allocator, profile in json.loads(data)["memoryProfilePerAllocator"].items():
        snapshots = profile["memoryProfileSnapshots"]
        named = {snapshots[int(a["snapshotIndex"])]["activityMetadata"]["tfOpName"]
                 for a in profile.get("activeAllocations", []) if int(a["snapshotIndex"]) >= 0}
        found[allocator] = (int(profile["profileSummary"]["peakStats"]["peakBytesInUse"]), named)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bfc", "default"])
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_each_allocators_peak_and_the_rows_at_it_agree_with_xprof(tmp_path, program, mode):
    pytest.importorskip("xprof", reason="XProf is the reference: pip install xprof (.ci/run installs it)")
    if mode == "default" and not ONEDNN:
        pytest.skip("the default CPU allocator without oneDNN writes no allocator events: nothing to compare")
    (tmp_path / "program.py").write_text(textwrap.dedent(PROGRAMS[program]), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFPLACE_", "TF_CPP"))}
    env["TF_CPU_ALLOCATOR_USE_BFC"] = "1" if mode == "bfc" else "0"
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "--memory", "--profile_dir=profile",
                           "--json=t.json", "program.py"], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    memory = json.loads((tmp_path / "t.json").read_text())["memory"]
    xprof = _xprof_peaks(str(tmp_path / "profile"))
    assert {a["allocator"]: a["peak_bytes"] for a in memory["allocators"]} == {k: v[0] for k, v in xprof.items()}
    [cpu] = memory["devices"]
    nodes = {row["node"] for row in cpu["at_peak"]}
    for allocator, (_, named) in xprof.items():
        assert named <= nodes | {""}, (allocator, named, cpu["at_peak"])
    assert sum(row["bytes"] for row in cpu["at_peak"]) == cpu["peak_bytes"]
    lined = sum(row["bytes"] for row in cpu["at_peak"] if row["source"] and row["kind"] != "before")
    inside = sum(row["bytes"] for row in cpu["at_peak"] if row["kind"] != "before")
    assert lined >= 0.95 * inside  # what the block allocated, named by line
