"""`tfplace diff` compares each device's memory peak when both traces counted memory (`tfplace trace --memory`):
the text's memory section, the `--json` output's "memory", and the exit status a peak change leaves alone.
The traces are hand-written JSON, as `tfplace trace --json=FILE --memory` writes them."""

from __future__ import annotations

import json
import subprocess
import sys

from tfplace.cli._diff import Peak, diff, render, to_json

MIB = 1 << 20
NOT_COUNTED = "memory was not counted: capture with capture_placement(memory=True)"


def trace(peaks=None, *, device="/device:CPU:0"):
    """A trace whose MatMul ran on `device`; `peaks` (device -> peak bytes) its memory figures, None when the run
    did not count memory (the "memory" key as a trace without `--memory` writes it)."""
    found = {"records": [{"op": "MatMul", "name": "", "device": device, "kind": "execute", "source": "train.py:9",
                          "origin": "user", "count": 3}], "transfers": []}
    devices = [{"device": name, "peak_bytes": peak, "live_bytes": peak // 2, "top": [["train.py:9", peak]],
                "allocator_current_bytes": None, "allocator_peak_bytes": None} for name, peak in (peaks or {}).items()]
    found["memory"] = {"note": NOT_COUNTED if peaks is None else "tfplace's count", "tracked": len(devices),
                       "devices": devices, "allocators": []}
    return found


def tfplace_diff(tmp_path, a, b, *args):
    (tmp_path / "a.json").write_text(json.dumps(a), encoding="utf-8")
    (tmp_path / "b.json").write_text(json.dumps(b), encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "tfplace", "diff", "a.json", "b.json", *args], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)


def test_each_devices_peak_side_by_side_with_the_change_in_bytes_and_as_a_ratio():
    a = trace({"/device:CPU:0": 2 * MIB, "/device:GPU:0": 1 << 30, "/device:GPU:1": 0, "/device:GPU:2": 512})
    b = trace({"/device:CPU:0": 3 * MIB, "/device:GPU:0": 1 << 29, "/device:GPU:1": 4096, "/device:GPU:2": 512,
               "/device:GPU:3": 640})
    found = diff(a, b)
    assert found.status == 0 and found.memory_only_in == ""
    assert found.memory == (Peak("/device:CPU:0", 2 * MIB, 3 * MIB, MIB),
                            Peak("/device:GPU:0", 1 << 30, 1 << 29, -(1 << 29)), Peak("/device:GPU:1", 0, 4096, 4096),
                            Peak("/device:GPU:2", 512, 512, 0), Peak("/device:GPU:3", None, 640, None))
    text = render(found, "a.json", "b.json").splitlines()
    assert text[0] == ("tfplace diff a.json -> b.json: no change in where your compute ops ran or what moved between "
                       "devices")
    at = text.index("memory peak per device (A -> B):")
    assert text[at + 1:at + 6] == ["  CPU:0: 2.0 MiB -> 3.0 MiB (+1.0 MiB, x1.50)",
                                   "  GPU:0: 1.0 GiB -> 512.0 MiB (-512.0 MiB, x0.50)",
                                   "  GPU:1: 0 B -> 4.0 KiB (+4.0 KiB)",
                                   "  GPU:2: 512 B -> 512 B (no change)",
                                   "  GPU:3: 640 B in B only (no peak for it in A)"]
    only_a = render(diff(b, a), "b.json", "a.json")
    assert "  GPU:3: 640 B in A only (no peak for it in B)" in only_a.splitlines()


def test_a_trace_without_memory_is_one_line_saying_which_run_counted_it_and_how_to_count_the_other():
    counted = trace({"/device:CPU:0": MIB})
    for uncounted in (trace(), {key: value for key, value in trace().items() if key != "memory"}):
        found = diff(counted, uncounted)
        assert found.memory == () and found.memory_only_in == "A"
        lines = [line for line in render(found, "a.json", "b.json").splitlines() if "memory" in line]
        assert lines == ["memory: only A (a.json) counted memory per device; trace B (b.json) again with tfplace "
                         "trace --memory --json=FILE to compare each device's peak"]
        assert diff(uncounted, counted).memory_only_in == "B"
        assert "memory: only B (b.json) counted memory" in render(diff(uncounted, counted), "a.json", "b.json")
        neither = diff(uncounted, uncounted)
        assert (neither.memory, neither.memory_only_in) == ((), "")
        assert "memory" not in render(neither, "a.json", "b.json")
        assert to_json(neither, "a.json", "b.json")["memory"] == []


def test_the_command_prints_the_memory_section_and_json_and_a_peak_change_alone_leaves_the_status_at_0(tmp_path):
    a, b = trace({"/device:CPU:0": 2 * MIB}), trace({"/device:CPU:0": 6 * MIB})
    done = tfplace_diff(tmp_path, a, b)
    assert done.returncode == 0, done.stderr
    assert "memory peak per device (A -> B):\n  CPU:0: 2.0 MiB -> 6.0 MiB (+4.0 MiB, x3.00)" in done.stdout
    machine = tfplace_diff(tmp_path, a, b, "--json")
    assert machine.returncode == 0, machine.stderr
    data = json.loads(machine.stdout)
    assert data["status"] == 0 and data["memory_only_in"] is None
    assert data["memory"] == [{"device": "/device:CPU:0", "a_peak_bytes": 2 * MIB, "b_peak_bytes": 6 * MIB,
                               "change_bytes": 4 * MIB}]
    moved = tfplace_diff(tmp_path, a, trace({"/device:CPU:0": 2 * MIB}, device="/device:CPU:1"))
    assert moved.returncode == 1 and "CPU:0: 2.0 MiB -> 2.0 MiB (no change)" in moved.stdout  # the move sets it
    one_sided = tfplace_diff(tmp_path, a, trace(), "--json")
    assert one_sided.returncode == 0
    assert json.loads(one_sided.stdout)["memory"] == [] and json.loads(one_sided.stdout)["memory_only_in"] == "A"


def test_two_tasks_of_a_cluster_compare_the_peaks_of_their_own_devices(tmp_path):
    def task(index, peak):
        prefix = f"/job:worker/replica:0/task:{index}"
        return {"task": f"worker:{index}", "device_prefix": prefix,
                "trace": trace({f"{prefix}/device:CPU:0": peak}, device=f"{prefix}/device:CPU:0")}

    cluster = {"format": "tfplace-cluster/1", "tasks": [task(0, MIB), task(1, 3 * MIB)], "traffic": []}
    (tmp_path / "c.json").write_text(json.dumps(cluster), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "tfplace", "diff", "c.json:worker:0", "c.json:worker:1"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "memory peak per device (A -> B):\n  CPU:0: 1.0 MiB -> 3.0 MiB (+2.0 MiB, x3.00)" in done.stdout
