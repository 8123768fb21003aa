"""`tfplace merge`: the traces of a cluster's tasks merged into one JSON and one report; `tfplace diff` between
two tasks of a merged cluster and between two merged clusters."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tfplace.cluster._merge import FORMAT, MergeError, merge, merge_files, trace_task
from tfplace.cluster import _checks
from tfplace.cluster._report import render

W = "/job:worker/replica:0/task:{}/device:CPU:0"
PS = "/job:ps/replica:0/task:{}/device:CPU:0"
CHIEF = "/job:chief/replica:0/task:0/device:CPU:0"


def record(op, device, *, kind="execute", count=1, source="train.py:9", name=""):
    return {"op": op, "name": name, "device": device, "kind": kind, "source": source, "requested": "", "dtypes": [],
            "line": "", "requested_by": "", "origin": "user", "count": count}


def reduce(index, calls, *, size=2, each=32, op="CollectiveReduceV2", instance=3):
    return {"op": op, "group_key": 1, "group_size": size, "instance_key": instance, "dtype": "float32",
            "shape": [each // 4], "bytes_per_call": each, "calls": calls, "device": W.format(index), "hint": "auto",
            "function": "__inference_step_52", "source": "train.py:20"}


def trace(records, cluster=None, *, status=0, copies=(), executions=None):
    """A trace as `tfplace trace --json` writes it (with a "cluster" section where given)."""
    executions = executions or {}
    data = {"format": "tfplace-log/2", "script": "train.py", "args": ["--steps=3"], "exit_status": status,
            "summary": {}, "complete": True, "incomplete_reason": "", "incomplete_reasons": [],
            "records": list(records), "copies": list(copies), "runs": [], "transfers": [],
            "cost": {"timed": False, "missing": "", "directions": [], "ops": [],
                     "devices": [{"device": d, "executions": n, "busy_us": None, "share": None}
                                 for d, n in executions.items()]},
            "memory": None, "explanations": [], "gpu_readiness": None, "gpu_readiness_source": ""}
    if cluster is not None:
        data["cluster"] = {"variables": [], "remote": [], "collectives": [], **cluster}
    return data


def worker(index, calls=3, *, status=0, executions=6, collectives=None):
    return trace([record("MatMul", W.format(index), count=executions)],
                 {"task": f"worker:{index}", "device_prefix": f"/job:worker/replica:0/task:{index}",
                  "devices": [W.format(index)],
                  "collectives": [reduce(index, calls)] if collectives is None else collectives},
                 status=status, executions={W.format(index): executions})


VARIABLES = [{"name": "emb:0", "shape": [10, 4], "dtype": "float32", "bytes": 160, "device": PS.format(0)},
             {"name": "dense/kernel:0", "shape": [4, 2], "dtype": "float32", "bytes": 32, "device": PS.format(1)},
             {"name": "dense/bias:0", "shape": [2], "dtype": "float32", "bytes": 8, "device": PS.format(1)}]


def coordinator():
    """A ParameterServerStrategy chief: variables on two ps tasks, remote reads, a tensor from ps:0 to worker:1."""
    copy = {"op": "MatMul", "input_index": 0, "from_device": PS.format(0), "to_device": W.format(1),
            "source": "train.py:14", "line": "", "kind": "function", "function": "__inference_step_7", "node": "MatMul",
            "tensor": "ReadVariableOp:0", "dtype": "float32", "bytes": 32, "call": "train.py:30", "in_loop": False,
            "count": 5}
    local = dict(copy, from_device=CHIEF, to_device=CHIEF.replace("CPU:0", "CPU:1"), count=7)  # same task: not traffic
    remote = [{"from_device": PS.format(0), "to_device": W.format(0), "count": 6, "bytes": 192,
               "what": "ReadVariableOp", "per_step": True}]
    return trace([record("AddV2", CHIEF, count=3), record("ReadVariableOp", PS.format(0))],
                 {"task": "chief", "device_prefix": "/job:chief/replica:0/task:0", "devices": [CHIEF],
                  "variables": VARIABLES, "remote": remote}, copies=[copy, local], executions={CHIEF: 3})


def test_merged_json_has_the_contract_keys_and_tasks_in_order():
    merged = merge([("worker:1", worker(1)), ("chief", coordinator()), ("worker:0", worker(0))])
    assert merged["format"] == FORMAT == "tfplace-cluster/1"
    assert {"tasks", "collectives", "variables", "ps_bytes", "ps_imbalance", "traffic", "matrix"} <= set(merged)
    assert [t["task"] for t in merged["tasks"]] == ["chief", "worker:0", "worker:1"]
    first = merged["tasks"][1]
    assert set(first) >= {"task", "device_prefix", "exit_status", "trace"}
    assert first["device_prefix"] == "/job:worker/replica:0/task:0" and first["trace"]["script"] == "train.py"
    assert set(merged["collectives"][0]) >= {"op", "group_key", "group_size", "dtype", "bytes_per_call", "calls",
                                             "tasks", "devices", "source"}
    assert set(merged["variables"][0]) == {"name", "shape", "dtype", "bytes", "device"}
    assert set(merged["traffic"][0]) >= {"from_task", "to_task", "count", "bytes", "what"}
    assert set(merged["matrix"]) == {"tasks", "bytes"}
    json.dumps(merged)  # JSON-ready
    without_ps = merge([("worker:0", worker(0)), ("worker:1", worker(1))])
    assert without_ps["ps_bytes"] == {} and "ps_imbalance" not in without_ps


def test_collectives_of_two_workers_merge_into_one_group_and_flag_uneven_calls():
    even = merge([("worker:0", worker(0, 3)), ("worker:1", worker(1, 3))])["collectives"]
    assert len(even) == 1
    group = even[0]
    assert (group["op"], group["group_key"], group["group_size"], group["dtype"]) == (
        "CollectiveReduceV2", 1, 2, "float32")
    assert (group["bytes_per_call"], group["calls"], group["tasks"]) == (32, 3, ["worker:0", "worker:1"])
    assert group["devices"] == [W.format(0), W.format(1)] and group["source"] == "train.py:20"
    assert group["uneven"] == []
    uneven = merge([("worker:0", worker(0, 3)), ("worker:1", worker(1, 2))])["collectives"][0]
    assert uneven["calls"] == 3 and uneven["uneven"] == ["worker:1"]
    assert uneven["calls_per_task"] == {"worker:0": 3, "worker:1": 2}
    # two collectives of one group (a step's gradient all-reduce and its loss's): a row each, its own bytes and line
    two = [reduce(0, 3), dict(reduce(0, 3, instance=4, each=4), source="train.py:21")]
    merged = merge([("worker:0", worker(0, collectives=two)),
                    ("worker:1", worker(1, collectives=[reduce(1, 3), dict(reduce(1, 3, instance=4, each=4),
                                                                          source="train.py:21")]))])
    assert [(c["instance_keys"], c["bytes_per_call"], c["source"]) for c in merged["collectives"]] == [
        ([3], 32, "train.py:20"), ([4], 4, "train.py:21")]


def test_variables_per_ps_task_with_bytes_and_imbalance():
    chief = coordinator()
    seen_twice = worker(0)
    seen_twice["cluster"]["variables"] = [VARIABLES[0]]  # a variable two traces list counts once
    merged = merge([("chief", chief), ("worker:0", seen_twice)])
    assert [v["name"] for v in merged["variables"]] == ["emb:0", "dense/bias:0", "dense/kernel:0"]
    assert merged["ps_bytes"] == {"/job:ps/replica:0/task:0": 160, "/job:ps/replica:0/task:1": 40}
    assert merged["ps_imbalance"] == pytest.approx(160 / 100)
    balanced = dict(chief, cluster=dict(chief["cluster"], variables=[dict(VARIABLES[0], bytes=40)] + VARIABLES[1:]))
    assert merge([("chief", balanced)])["ps_imbalance"] == 1.0


def test_traffic_rows_and_matrix_between_tasks():
    merged = merge([("chief", coordinator()), ("worker:0", worker(0, 3)), ("worker:1", worker(1, 2))])
    rows = {(r["from_task"], r["to_task"], r["kind"]): r for r in merged["traffic"]}
    # ring all-reduce of 2 members: each sends 2(n-1)/n = 1 x 32 B per call to the other
    ring = rows[("worker:0", "worker:1", "collective")]
    assert (ring["count"], ring["bytes"]) == (3, 96) and "all-reduce estimate (ring)" in ring["what"]
    assert rows[("worker:1", "worker:0", "collective")]["bytes"] == 64
    read = rows[("ps:0", "worker:0", "remote")]
    assert (read["count"], read["bytes"], read["per_step"]) == (6, 192, True) and "ReadVariableOp" in read["what"]
    tensor = rows[("ps:0", "worker:1", "tensor")]
    assert (tensor["count"], tensor["bytes"]) == (5, 160) and "MatMul input #0" in tensor["what"]
    # the chief's CPU:0 -> CPU:1 is no traffic
    assert not any(r["from_task"] == r["to_task"] for r in merged["traffic"])
    assert [r["bytes"] for r in merged["traffic"]] == sorted((r["bytes"] for r in merged["traffic"]), reverse=True)
    tasks = merged["matrix"]["tasks"]
    assert tasks == ["chief", "worker:0", "worker:1", "ps:0"]
    cell = {(a, b): merged["matrix"]["bytes"][i][j] for i, a in enumerate(tasks) for j, b in enumerate(tasks)}
    assert (cell[("worker:0", "worker:1")], cell[("worker:1", "worker:0")]) == (96, 64)
    assert (cell[("ps:0", "worker:0")], cell[("ps:0", "worker:1")], cell[("chief", "worker:0")]) == (192, 160, 0)


def test_ring_estimate_of_three_members_and_a_broadcast_to_each_receiver():
    three = [worker(i, 1, collectives=[reduce(i, 1, size=3, each=30)]) for i in range(3)]
    merged = merge([(f"worker:{i}", t) for i, t in enumerate(three)])
    ring = {(r["from_task"], r["to_task"]): r["bytes"] for r in merged["traffic"]}
    assert ring == {("worker:0", "worker:1"): 40, ("worker:1", "worker:2"): 40, ("worker:2", "worker:0"): 40}
    def gpus(index):  # two replicas a worker, instance keys not static: a member device's bytes count once
        found = [dict(reduce(index, 1, size=4, each=32), device=W.format(index).replace("CPU:0", f"GPU:{g}"),
                      instance_key=None, node=f"replica_{g}/CollectiveReduceV2") for g in (0, 1)]
        return worker(index, collectives=found)

    merged = merge([("worker:0", gpus(0)), ("worker:1", gpus(1))])
    assert (merged["collectives"][0]["bytes_per_call"], len(merged["collectives"][0]["devices"])) == (32, 4)
    assert {(r["from_task"], r["to_task"]): r["bytes"] for r in merged["traffic"]} == {
        ("worker:0", "worker:1"): 48, ("worker:1", "worker:0"): 48}  # 2 x 3/4 x 32 B, once per task boundary
    send = dict(reduce(0, 2, size=3, each=8, op="CollectiveBcastSendV2"))
    received = [worker(i, collectives=[reduce(i, 2, size=3, each=8, op="CollectiveBcastRecvV2")]) for i in (1, 2)]
    merged = merge([("worker:0", worker(0, collectives=[send])), ("worker:1", received[0]), ("worker:2", received[1])])
    assert {(r["from_task"], r["to_task"]): r["bytes"] for r in merged["traffic"]} == {
        ("worker:0", "worker:1"): 16, ("worker:0", "worker:2"): 16}


def test_task_comes_from_device_names_without_a_cluster_section():
    from tfplace.cli._trace import Findings, to_json
    from tfplace.placement.api._log import PlacementLog

    log = PlacementLog.from_text(
        f"Executing op MatMul in device {W.format(1)}\n"
        f"Executing op MatMul in device {W.format(1)}\n"
        f"Executing op ReadVariableOp in device {PS.format(0)}\n"
        f"before computing MatMul input #0 was expected to be on {W.format(1)} but is actually on {PS.format(0)} "
        f"(operation running on {W.format(1)}). This triggers a copy which can be a performance bottleneck.\n")
    data = json.loads(json.dumps(to_json(log, Findings(gpus_visible=False), script="train.py", args=[], exit_status=0)))
    assert "cluster" not in data and trace_task(data) == ("worker:1", "/job:worker/replica:0/task:1")
    merged = merge([("worker:1", data), ("worker:0", worker(0))])
    tensor = next(r for r in merged["traffic"] if r["kind"] == "tensor")
    assert (tensor["from_task"], tensor["to_task"], tensor["count"], tensor["bytes"]) == ("ps:0", "worker:1", 1, 0)
    assert "unknown size" in tensor["what"]
    assert list(merged["ps_bytes"]) == ["/job:ps/replica:0/task:0"]
    text = render(merged)
    assert f"{PS.format(0)}: 1 op execution(s) (recorded by worker:1)" in text
    assert trace_task(trace([record("MatMul", "/device:CPU:0")])) is None  # a single process names no task
    reads = trace([record("ReadVariableOp", PS.format(0), count=5), record("AddV2", CHIEF)])
    assert trace_task(reads) == ("chief", "/job:chief/replica:0/task:0")  # a coordinator, not the ps it reads from


def test_report_leads_with_what_is_uneven_then_per_task_figures_and_prints_names_whole():
    merged = merge([("chief", coordinator()), ("worker:0", worker(0, 3)), ("worker:1", worker(1, 2, status=1,
                                                                                              executions=2))])
    text = render(merged, top=5)
    lines = text.splitlines()
    order = [next(i for i, line in enumerate(lines) if line.startswith(title)) for title in (
        "what is uneven or costly", "where the time and bytes went, per task and device", "traffic between tasks",
        "== chief", "== worker:0", "== worker:1")]
    assert order == sorted(order) and order[0] == 1
    uneven = "\n".join(lines[order[0]:order[1]])
    assert "worker:1 exited with status 1" in uneven
    assert "uneven calls of CollectiveReduceV2 group 1 at train.py:20: worker:0 made 3, worker:1 made 2" in uneven
    assert "ps tasks hold uneven bytes: /job:ps/replica:0/task:0 holds 160 B of 200 B (1.60 x the mean)" in uneven
    assert "uneven work among worker tasks: worker:0 6 op executions, worker:1 2 op executions" in uneven
    figures = lines[order[1] + 1:order[2]]
    assert figures[0].startswith("  chief (exit status 0): 3 op execution(s) on 1 device(s)")
    assert f"    {W.format(0)}: 6 op execution(s)" in figures
    assert any(line.startswith("  worker:0 (exit status 0): 6 op execution(s)") and "sent 96 B to other tasks" in line
               for line in figures)
    traffic = "\n".join(lines[order[2]:order[3]])
    assert "CollectiveReduceV2 group 1: size 2, float32, 32 B per call, 3 call(s) (worker:1 made 2)" in traffic
    assert "/job:ps/replica:0/task:0: 1 variable(s), 160 B" in traffic
    assert "ps:0 -> worker:0: ReadVariableOp: remote variable read, x6 per step, 192 B per step" in traffic
    assert "from \\ to" in traffic
    assert f"  {W.format(1)}  1 compute op type(s): MatMul 2" in text
    assert "task:0CPU" not in text and "task:1CPU" not in text and "replica:0/task:0/device:CPU:0" in text


def test_each_task_has_its_single_process_sections_read_from_its_json():
    data = worker(0)
    data["records"].append(record("AddV2", W.format(0), kind="failed", source="train.py:40"))
    asked = dict(record("MatMul", W.format(0)), requested="/job:worker/replica:0/task:0/device:GPU:0")
    strategy = dict(record("ReadVariableOp", W.format(0), source=""), requested=PS.format(0),
                    requested_by="MirroredStrategy", origin="framework")
    data["explanations"] = [{"record": asked, "reason": "no-device", "message": "GPU:0 does not exist here."},
                            {"record": strategy, "reason": "colocated", "message": "it reads a variable there"}]
    data["gpu_readiness"] = [{"op": "Unique", "dtypes": [["T", "string"]], "gpu_dtypes": [], "sources": ["train.py:5"],
                              "message": "no GPU kernel for string"}]
    data["memory"] = {"note": "", "tracked": 1, "devices": [{"device": W.format(0), "peak_bytes": 2048, "live_bytes": 0,
                                                             "top": [["train.py:3", 2048]]}]}
    data["incomplete_reason"] = "a thread ran ops outside the capture"
    text = render(merge([("worker:0", data)]))
    section = text[text.index("== worker:0: train.py --steps=3 (exit status 0): 7 op placement(s) "
                              "(eager ops run, function nodes placed: each once)"):]
    assert f"  {W.format(0)}  2 compute op type(s): MatMul 6, AddV2 1" in section
    assert f"not where asked, and why (by source line):\n  train.py:9  MatMul x1 on {W.format(0)}: no-device" in section
    assert f"    MirroredStrategy: 1 x ReadVariableOp ran on {W.format(0)} (colocated)" in section
    assert f"failed ops:\n  train.py:40  AddV2 x1 on {W.format(0)}" in section
    assert "  Unique T=string at train.py:5: no GPU kernel for string" in section
    assert f"  {W.format(0)}: peak 2.0 KiB, live at the end 0 B\n      train.py:3  2.0 KiB" in section
    assert section.endswith("incomplete log: a thread ran ops outside the capture")
    assert "  worker:0's log is incomplete: a thread ran ops outside the capture" in text[:text.index("where the time")]


def test_merge_files_names_tasks_from_paths_statuses_and_traces(tmp_path):
    paths = {}
    for name, data in (("worker:0", worker(0)), ("worker:1", worker(1))):
        paths[name] = str(tmp_path / f"{name.replace(':', '-')}.json")
        with open(paths[name], "w", encoding="utf-8") as out:
            json.dump(data, out)
    merged = merge_files(paths, {"worker:0": 0, "worker:1": 137, "ps:0": None})
    assert [(t["task"], t["exit_status"], t["trace"] is None) for t in merged["tasks"]] == [
        ("worker:0", 0, False), ("worker:1", 137, False), ("ps:0", None, True)]
    text = render(merged)
    assert "ps:0: no trace (exit status None)" in text and "worker:1 was stopped by signal 9 (exit status 137)" in text
    assert [t["task"] for t in merge_files(list(paths.values()))["tasks"]] == ["worker:0", "worker:1"]
    with pytest.raises(MergeError, match="are both traces of task worker:0"):
        merge_files([paths["worker:0"]] * 2)
    with pytest.raises(MergeError, match="are both traces of task worker:0"):
        merge_files({"worker": paths["worker:0"], "worker:0": paths["worker:1"]})
    single = write(tmp_path / "single.json", trace([record("MatMul", "/device:CPU:0")]))
    with pytest.raises(MergeError, match="cannot tell which task .*single.json is: it has no \"cluster\" section"):
        merge_files([paths["worker:0"], single])
    with pytest.raises(MergeError, match="task 'worker one'.*allowed is job:index"):
        merge_files({"worker one": paths["worker:0"]})


def tfplace(*args, cwd=None):
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    return subprocess.run([sys.executable, "-m", "tfplace", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env=env)


def imported(stderr):
    return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def messages(stderr):
    return "".join(line for line in stderr.splitlines(keepends=True) if not line.startswith("import time:"))


def write(path, data):
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")
    return str(path)


def test_merge_command_exit_codes(tmp_path):
    a, b = write(tmp_path / "w0.json", worker(0, 3)), write(tmp_path / "w1.json", worker(1, 2))
    out = str(tmp_path / "cluster.json")
    done = tfplace("merge", a, b, f"--json={out}", "--top=3")
    assert done.returncode == 0, messages(done.stderr)
    assert done.stdout.startswith("== tfplace merge: 2 task(s) (worker:0, worker:1)")
    assert "uneven calls of CollectiveReduceV2 group 1" in done.stdout
    assert "tensorflow" not in imported(done.stderr)  # reading JSON needs no TensorFlow
    with open(out, encoding="utf-8") as handle:
        merged = json.load(handle)
    assert merged["format"] == "tfplace-cluster/1" and [t["task"] for t in merged["tasks"]] == ["worker:0", "worker:1"]
    missing = tfplace("merge", a, str(tmp_path / "nowhere.json"))
    assert missing.returncode == 2 and "cannot read" in messages(missing.stderr)
    assert str(tmp_path / "nowhere.json") in messages(missing.stderr) and missing.stdout == ""
    other = write(tmp_path / "other.json", {"format": "something/1", "records": []})
    wrong = tfplace("merge", a, other)
    assert wrong.returncode == 2 and f"{other} is not a tfplace trace: its \"format\" is 'something/1'" in wrong.stderr
    broken = tfplace("merge", a, write(tmp_path / "broken.json", '{"format": "tfplace-log/2", "rec'))
    assert broken.returncode == 2 and "broken.json is not JSON" in broken.stderr
    twice = tfplace("merge", a, write(tmp_path / "again.json", worker(0)))
    assert twice.returncode == 2
    assert f"{a} and {tmp_path / 'again.json'} are both traces of task worker:0" in messages(twice.stderr)
    assert len(messages(twice.stderr).strip().splitlines()) == 1
    helped = tfplace("merge", "--help")
    assert helped.returncode == 0 and "TRACE.json" in helped.stdout and "tensorflow" not in imported(helped.stderr)


def test_diff_between_two_tasks_of_a_cluster_and_two_clusters(tmp_path):
    same = merge([("worker:0", worker(0)), ("worker:1", worker(1))])
    moved_trace = worker(1)
    moved_trace["records"].append(record("AddV2", PS.format(0), source="train.py:12"))
    base = worker(0)
    base["records"].append(record("AddV2", W.format(0), source="train.py:12"))
    moved = merge([("worker:0", base), ("worker:1", moved_trace)])
    c, d = write(tmp_path / "c.json", same), write(tmp_path / "d.json", moved)
    even = tfplace("diff", f"{c}:worker:0", f"{c}:worker:1")
    assert even.returncode == 0, messages(even.stderr)  # each task's MatMul on its own CPU:0: no move
    assert "no change" in even.stdout
    apart = tfplace("diff", f"{d}:worker:0", f"{d}:worker:1")
    assert apart.returncode == 1
    assert f"train.py:12  AddV2: CPU:0 -> {PS.format(0)}" in apart.stdout
    before = worker(1)
    before["records"].append(record("AddV2", W.format(1), source="train.py:12"))
    e = write(tmp_path / "e.json", merge([("worker:0", base), ("worker:1", before), ("worker:2", worker(2))]))
    clusters = tfplace("diff", e, d)
    assert clusters.returncode == 1, messages(clusters.stderr)
    assert clusters.stdout.startswith(f"tfplace diff {e} -> {d} (clusters, task by task): 1 task(s) changed: worker:1; "
                                      "worker:2 only in A")
    assert f"== worker:1\ntfplace diff {e}:worker:1 -> {d}:worker:1: 1 compute op(s) moved" in clusters.stdout
    assert tfplace("diff", c, c).returncode == 0
    absent = tfplace("diff", f"{c}:worker:7", f"{c}:worker:0")
    assert absent.returncode == 2 and "has no trace of task worker:7" in absent.stderr
    mixed = tfplace("diff", c, write(tmp_path / "t.json", worker(0)))
    assert mixed.returncode == 2 and "merged cluster" in mixed.stderr


def test_functions_another_traced_task_placed_are_one_line_not_an_incomplete_log_to_act_on():
    from tfplace.placement.shown._report import remote_function

    chief = coordinator()
    chief["records"].append(record("__inference_step_7", W.format(0), count=2))
    chief["records"].append(record("__inference_step_7", W.format(1), count=2))
    reasons = [remote_function("__inference_step_7", W.format(1)), "the block ran function __inference_f_3, which "
               "TensorFlow placed before the block opened"]
    chief.update(complete=False, incomplete_reasons=reasons, incomplete_reason="; ".join(reasons))
    merged = merge([("chief", chief), ("worker:0", worker(0)), ("worker:1", worker(1))])
    findings = render(merged, top=5).split("where the time and bytes went")[0]
    assert ("(chief ran 1 function(s) that worker:0, worker:1 placed: __inference_step_7; their nodes are in those "
            "tasks' sections)") in findings
    assert findings.count("chief's log is incomplete") == 1 and "placed before the block opened" in findings
    untraced = render(merge([("chief", chief), ("worker:0", worker(0))]), top=5)  # worker:1's trace is missing
    assert "chief's log is incomplete: the block ran function __inference_step_7 on" in untraced


def test_a_task_whose_script_ended_but_whose_trace_was_never_written_says_so(tmp_path):
    # the launcher reads what each task published when its script ended (before its trace closes: under
    # --timing, TensorFlow's profiler can crash the process as it stops)
    for task, ended in (("worker:0", True), ("worker:1", False)):
        publisher = _checks.Publisher(task, f"/job:worker/replica:0/task:{task[-1]}",
                                      _checks._file_writer(str(tmp_path), task))
        publisher.exited(0) if ended else publisher.publish()
    assert _checks.script_statuses(str(tmp_path)) == {"worker:0": 0}
    merged = merge_files({}, {"worker:0": 139, "worker:1": 137}, _checks.script_statuses(str(tmp_path)))
    assert [t.get("script_exit_status") for t in merged["tasks"]] == [0, None]
    text = render(merged)
    assert ("  worker:0: no trace: its script ended (status 0), then the process was killed by signal 11 as it "
            "closed its trace (with --timing, TensorFlow's profiler can crash as it stops: run again, or leave out "
            "--timing)") in text
    assert "  worker:1: no trace (exit status 137): it ended before writing one" in text
    # a peer's trace shows the run was not timed: the profiler is not what crashed it
    tasks = ([entry for entry in merged["tasks"] if entry["task"] == "worker:0"]
             + merge([("worker:1", worker(1))])["tasks"])
    untimed = render({**merged, "tasks": tasks})
    assert ("  worker:0: no trace: its script ended (status 0), then the process was killed by signal 11 as it "
            "closed its trace; its figures below are what its peers saw") in untimed


def test_a_group_with_fewer_traced_members_than_its_size_names_the_tasks_without_a_trace(tmp_path):
    path = tmp_path / "worker-0.json"
    path.write_text(json.dumps(worker(0)))
    missing = render(merge_files({"worker:0": str(path)}, {"worker:0": 0, "worker:1": 134}, {"worker:1": 0}))
    assert (f"  collective group 1 has size 2, but the traces show 1 member device(s) ({W.format(0)}): worker:1 left "
            "no trace") in missing
    alone = render(merge([("worker:0", worker(0))]))  # every task traced: one that ran elsewhere, or never ran it
    assert (f"  collective group 1 has size 2, but the traces show 1 member device(s) ({W.format(0)}): a task was "
            "not traced, or never ran it") in alone
