"""Clusters on 127.0.0.1: a MultiWorkerMirroredStrategy custom loop (tests/cluster/mwms_loop.py) on two
worker processes, each traced; the names, collective groups and checks they give."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow  # slow tier: clusters: several TensorFlow processes per case

LOOP = str(ROOT / "tests" / "cluster" / "mwms_loop.py")


def line(marker: str) -> str:
    """`/.../mwms_loop.py:N` of the loop's line that holds `marker` (as shown from another folder)."""
    with open(LOOP, encoding="utf-8") as f:
        return f"{LOOP}:{next(i for i, text in enumerate(f, 1) if marker in text)}"


def _ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_workers(command: list[str], tmp_path, timeout: float = 120,
                env: dict | None = None) -> list[subprocess.CompletedProcess]:
    """Runs `command` (with `{i}` in an argument replaced by the worker's index) as two workers."""
    hosts = [f"127.0.0.1:{p}" for p in _ports(2)]
    procs = []
    for i in range(2):
        config = json.dumps({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}})
        procs.append(subprocess.Popen([a.replace("{i}", str(i)) for a in command], cwd=tmp_path,
                                      env={**(os.environ if env is None else env), "TF_CONFIG": config},
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    done = []
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """Both workers of the loop under `tfplace trace --json`."""
    folder = tmp_path_factory.mktemp("mwms")
    done = run_workers([sys.executable, "-m", "tfplace", "trace", "--json=trace-{i}.json", LOOP], folder)
    for d in done:
        assert d.returncode == 0, d.stdout[-2000:] + d.stderr[-3000:]
    return done, [json.loads((folder / f"trace-{i}.json").read_text()) for i in range(2)]


@pytest.mark.placement
def test_a_task_names_its_devices_whole_and_never_copies_between_its_own_names(traced):
    done, traces = traced
    for index, (run, trace) in enumerate(zip(done, traces)):
        prefix = f"/job:worker/replica:0/task:{index}"
        assert trace["copies"] == []  # /job:localhost and /job:worker/.../task:N are one device
        devices = {r["device"] for r in trace["records"] if r["device"]}
        assert devices == {f"{prefix}/device:CPU:0"}
        assert f"{prefix}/device:CPU:0: " in run.stdout
        assert f"{prefix}CPU:0" not in run.stdout
        assert trace["cluster"]["task"] == f"worker:{index}"
        assert trace["cluster"]["devices"] == [f"{prefix}/device:CPU:0"]


@pytest.mark.placement
def test_the_gradient_all_reduce_is_a_group_of_two_moving_the_gradient_bytes(traced):
    _, traces = traced
    for trace in traces:
        reduces = [c for c in trace["cluster"]["collectives"] if c["op"] == "CollectiveReduceV2"
                   and c["dtype"] == "float32"]
        assert len(reduces) == 1, trace["cluster"]["collectives"]
        group = reduces[0]
        assert (group["group_size"], group["bytes_per_call"], group["calls"]) == (2, 4 * 2 * 4, 3)
        # the line that made this collective: the replicas' all-reduce is made by strategy.run's merge call
        assert group["source"].endswith(line("return strategy.run("))


def _mismatch_line(done) -> list[str]:
    return [line for d in done for line in d.stderr.splitlines() if line.startswith("tfplace: ")]


def test_cluster_guard_names_a_group_size_that_differs_between_workers(tmp_path):
    start = time.monotonic()
    done = run_workers([sys.executable, LOOP, "--guard", "--group_size_for_worker_1=3"], tmp_path, timeout=90)
    lines = _mismatch_line(done)
    assert lines, [d.stderr[-2000:] for d in done]
    assert lines[0].startswith("tfplace: collective group 100 (CollectiveReduceV2) differs between worker:0 and "
                               "worker:1: group size 2 vs 3 (worker:0 at {at}, worker:1 at {at})".format(
                                   at=line("extra_all_reduce(tf.ones")))
    assert 3 in [d.returncode for d in done]
    assert time.monotonic() - start < 60


def test_cluster_guard_names_uneven_steps_with_both_workers_and_their_calls(tmp_path):
    # worker 1 reads the store every 2 s: worker 0, which hosts it, must stay until worker 1 has read its exit
    done = run_workers([sys.executable, LOOP, "--guard", "--guard_period=2", "--steps_for_worker_1=4"], tmp_path,
                       timeout=90)
    lines = _mismatch_line(done)
    assert lines, [d.stderr[-2000:] for d in done]
    assert lines[0].startswith(f"tfplace: uneven calls of collective group 1 (CollectiveReduceV2 at "
                               f"{line('train_step(batches)')}): worker:0 exited after 3 call(s), "
                               "worker:1 waits in call 4")
    assert [d.returncode for d in done] == [0, 3]
    assert "crashed" not in done[1].stderr  # stopped before TensorFlow's own late error


def _stored_peers(monkeypatch) -> dict[str, str]:
    """The cluster's key-value store as a dict (what `_tensorflow.store_set`/`store_get` reach)."""
    from tfplace import _tensorflow

    store: dict[str, str] = {}
    monkeypatch.setattr(_tensorflow, "store_set", store.__setitem__)
    monkeypatch.setattr(_tensorflow, "store_get", lambda key, timeout_ms=1: store.get(key))
    return store


def _peers(task: str, peer: str):
    from tfplace.cluster import _guard
    from tfplace.cluster._checks import Publisher

    prefix = f"/job:worker/replica:0/task:{task[-1]}"
    return _guard._Peers(Publisher(task, prefix, _guard._store_writer(task)), [peer], {"worker": 2})


def test_a_task_leaving_the_guard_stays_until_its_peer_has_read_its_exit(monkeypatch):
    # The task that hosts the coordination service takes the store with it: a peer waiting in a collective
    # that reads the store a moment later finds nothing, and the uneven-steps line above never comes.
    import threading

    store = _stored_peers(monkeypatch)
    leaving, waiting = _peers("worker:0", "worker:1"), _peers("worker:1", "worker:0")
    waiting.publisher.publish()
    reader = threading.Timer(0.4, waiting.check)
    reader.start()
    start = time.monotonic()
    leaving.leave(0, wait=5.0)
    took = time.monotonic() - start
    reader.join()
    assert 0.35 < took < 3.0, took  # (a loaded machine may start the reader late; without it: 5 s)
    assert waiting.last["worker:0"]["exit"] == 0 and "tfplace/seen/worker:0/worker:1" in store


def test_a_task_leaving_the_guard_waits_no_longer_than_it_must(monkeypatch):
    store = _stored_peers(monkeypatch)
    leaving, peer = _peers("worker:0", "worker:1"), _peers("worker:1", "worker:0")
    start = time.monotonic()
    leaving.leave(0, wait=0.3)  # a peer that never reads: at most `wait`
    assert 0.3 <= time.monotonic() - start < 1.5
    peer.publisher.exited(0)  # a peer that has left too: at once
    start = time.monotonic()
    leaving.leave(0, wait=5.0)
    assert time.monotonic() - start < 0.5  # (else 5 s)
    leaving.check()  # a peer whose exit it read, and which may have taken the store with it: at once
    store.clear()
    start = time.monotonic()
    leaving.leave(0, wait=5.0)
    assert time.monotonic() - start < 0.5  # (else 5 s)


@pytest.mark.placement
def test_a_single_process_keeps_short_names(python):
    found = python("""
        import tensorflow as tf, tfplace
        with tfplace.capture_placement() as log:
            tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
        report([log.devices_for("MatMul"), tfplace.cpu().name])
    """, env={"TF_CONFIG": ""})
    assert found == [["/device:CPU:0"], "/device:CPU:0"]


@pytest.mark.placement
def test_functions_a_server_of_this_process_places_are_said_to_be_in_this_processs_own_log(python):
    # The parameter-server tutorial's in-process cluster: TensorFlow's log of this very process holds the
    # nodes the workers placed; tfplace cannot read it and says so, with the way to a trace that has them.
    found = python("""
        import socket
        import tensorflow as tf, tfplace

        def port():
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                return s.getsockname()[1]

        spec = tf.train.ClusterSpec({"worker": [f"localhost:{port()}"], "ps": [f"localhost:{port()}"]})
        servers = [tf.distribute.Server(spec, job_name=job, task_index=0, protocol="grpc") for job in ("worker", "ps")]
        # as `tfplace trace` has it: the coordinator's threads, which call the function, start in the capture
        with tfplace.capture_placement(all_threads=True) as log:
            strategy = tf.distribute.ParameterServerStrategy(
                tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc"))
            coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
            with strategy.scope():
                v = tf.Variable(1.0)

            @tf.function
            def step():
                return strategy.run(lambda: v.assign_add(1.0))

            coordinator.schedule(step)
            coordinator.join()
        report([log.complete, log.incomplete_reason])
    """)
    complete, reason = found
    assert complete is False
    assert "__inference_step_" in reason and "/job:worker/replica:0/task:0/device:CPU:0" in reason, reason
    assert "runs in this process" in reason and "tfplace launch --workers=N --ps=M --trace" in reason, reason
    assert "not this one" not in reason, reason


@pytest.mark.placement
def test_tf_config_makes_names_full_and_asserts_accept_short_spellings(python):
    config = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": 1}}
    found = python("""
        import tensorflow as tf, tfplace
        with tfplace.capture_placement() as log:
            tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
        log.assert_placed("MatMul", "CPU:0")
        report([log.devices_for("MatMul"), len(log.copies)])
    """, env={"TF_CONFIG": json.dumps(config)})
    assert found == [["/job:worker/replica:0/task:1/device:CPU:0"], 0]


@pytest.mark.conformance
@pytest.mark.placement
def test_conformance_each_worker_says_what_its_own_tensorflow_log_says(tmp_path):
    """The MWMS custom loop scored against TensorFlow's log of each task, with job-aware names (a scorer
    that folded /job:worker/... into /device:CPU:0 would hide the copies and names this checks)."""
    from conformance import compare, tflog

    done = run_workers([sys.executable, str(compare.HARNESS), LOOP, "capture-{i}.json"], tmp_path, timeout=180,
                       env=compare.harness_env(None))
    for index, run in enumerate(done):
        assert run.returncode == 0, run.stderr[-3000:]
        report = json.loads((tmp_path / f"capture-{index}.json").read_text())
        task = f"/job:worker/replica:0/task:{index}"
        result = compare.compare_logs(compare.Result(f"mwms-worker-{index}", "-"), tflog.parse(run.stderr, task),
                                      report["capture"], report.get("sends"))
        assert result.problems() == [], compare.describe(result)
        assert result.nodes_total > 50 and result.eager_tf > 20
        devices = {r["device"] for r in report["capture"]["records"] if r["device"]}
        assert devices == {f"{task}/device:CPU:0"}


PSS_LOOP = str(ROOT / "tests" / "cluster" / "pss_loop.py")


@pytest.mark.conformance
@pytest.mark.placement
def test_conformance_a_parameter_server_cluster_each_task_says_what_its_own_log_says(tmp_path):
    """The PSS tutorial's custom loop (chief coordinating, 2 workers, 2 ps), scored against TensorFlow's log of
    every task with job-aware names: the coordinator's capture against its own log, its records of remote ops and
    scheduled steps against the logs of the tasks that ran them, each server's trace against its own log."""
    from conformance import compare, tflog
    from tfplace.cli._server import trace_json

    hosts = {job: [f"127.0.0.1:{p}" for p in _ports(n)] for job, n in (("chief", 1), ("worker", 2), ("ps", 2))}
    env = compare.harness_env(None)
    servers = {}
    for job in ("ps", "worker"):
        for i in range(2):
            config = json.dumps({"cluster": hosts, "task": {"type": job, "index": i}})
            servers[f"/job:{job}/replica:0/task:{i}"] = subprocess.Popen(
                [sys.executable, "-m", "tfplace.cli._server"], cwd=tmp_path, text=True,
                env={**env, "TF_CONFIG": config, "TFPLACE_LOG_PLACEMENT": "1"},
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        config = json.dumps({"cluster": hosts, "task": {"type": "chief", "index": 0}})
        chief = subprocess.run([sys.executable, str(compare.HARNESS), PSS_LOOP, "chief.json"], cwd=tmp_path,
                               env={**env, "TF_CONFIG": config}, capture_output=True, text=True, timeout=150)
    finally:
        logs = {}
        for task, server in servers.items():
            server.terminate()
            logs[task] = server.communicate(timeout=30)[1]
    assert chief.returncode == 0, chief.stderr[-3000:]
    capture = json.loads((tmp_path / "chief.json").read_text())["capture"]
    result = compare.compare_logs(compare.Result("pss-chief", "-"),
                                  tflog.parse(chief.stderr, "/job:chief/replica:0/task:0"), capture,
                                  json.loads((tmp_path / "chief.json").read_text()).get("sends"))
    result.complete_expected = False  # the workers place the steps it schedules, and say so in their logs
    assert result.problems() == [], compare.describe(result)
    assert "another task's device" in result.incomplete_reason
    remote_lines: Counter = Counter()
    totals = [result.nodes_total, result.nodes_matched]
    for task, text in logs.items():
        marked = f"{tflog.BEGIN} 0\n{text}\n{tflog.END} 0\n"  # a server runs no harness: its whole log counts
        parsed = tflog.parse(marked, task)
        remote_lines.update(parsed.eager_multiset())
        own = compare.compare_logs(compare.Result(f"pss-{task}", "-"), parsed, trace_json(text, 0))
        assert own.problems() == [], compare.describe(own)
        totals = [totals[0] + own.nodes_total, totals[1] + own.nodes_matched]
    assert not result.eager_remote - remote_lines, result.eager_remote - remote_lines  # each one in its task's log
    steps = {device: n for (op, device), n in result.eager_remote.items() if op.startswith("__inference_train_step")}
    assert sum(steps.values()) == 4 and set(steps) == {f"/job:worker/replica:0/task:{i}/device:CPU:0" for i in (0, 1)}
    assert totals[0] > 100 and totals[0] == totals[1]  # every function node of the cluster's logs is recorded


def test_a_functions_collectives_are_read_once_and_its_callers_keep_their_static_shapes(python):
    """A function called inside another is traced (and its call seen) before its caller runs: its
    collectives, read from its traced graph, are those its caller reports, with their static shapes, and its
    graph is not rebuilt from its `FunctionDef` for the caller."""
    out = python("""
        import tensorflow as tf
        from tensorflow.python.framework import function_def_to_graph
        from tfplace import _tensorflow

        @tf.function
        def inner(x):
            return tf.raw_ops.CollectiveReduceV2(input=x, group_size=1, group_key=7, instance_key=3, ordering_token=[],
                                                 merge_op="Add", final_op="Id")

        @tf.function
        def outer(x):
            return inner(x) * 2.0

        spec = tf.TensorSpec((4,), tf.float32)
        functions = [f.get_concrete_function(spec) for f in (inner, outer)]
        rebuilt, original = [], function_def_to_graph.function_def_to_graph
        def counting(*args, **kwargs):
            rebuilt.append(1)
            return original(*args, **kwargs)
        function_def_to_graph.function_def_to_graph = counting
        atomic = [f._inference_function for f in functions]
        known, found = {}, {}
        for which, function in zip(("inner", "outer"), atomic):
            name = _tensorflow.call_name(function)
            found[which] = [[c.op, c.group_key, c.instance_key, list(c.shape or ()), c.dtype]
                            for c in _tensorflow.collectives_in(name, _tensorflow.call_definition(function),
                                                                _tensorflow.call_graph(function), known)]
        with_known = len(rebuilt)
        alone = [c.op for c in _tensorflow.collectives_in(_tensorflow.call_name(atomic[1]),
                                                          _tensorflow.call_definition(atomic[1]))]
        report({"found": found, "rebuilt": [with_known, len(rebuilt)], "alone": alone})
    """)
    assert out["found"]["inner"] == out["found"]["outer"] == [["CollectiveReduceV2", 7, 3, [4], "float32"]]
    assert out["rebuilt"] == [0, 1]  # without what was known, the inner function's graph is rebuilt
    assert out["alone"] == ["CollectiveReduceV2"]


def launch_timed(args: list[str], cwd, tries: int = 3) -> subprocess.CompletedProcess:
    """`tfplace launch --trace --timing` with `args`, run again (up to `tries` runs) while a task dies as it
    closes its trace: TensorFlow's profiler crashes a process, as it stops, in about one run of eight of this
    loop (docs/guides/clusters.md); the figures under test need every task's profile."""
    for _ in range(tries):
        done = subprocess.run([sys.executable, "-m", "tfplace", "launch", "--trace", "--timing", *args],
                              cwd=cwd, capture_output=True, text=True, timeout=300)
        if "as it closed its trace" not in done.stderr:
            break
    return done


def test_launch_with_timing_gives_each_workers_steps_and_names_the_slower_worker_and_its_line(tmp_path):
    done = launch_timed(["--workers=2", "--json=cluster.json", LOOP, "--steps=12", "--extra_work_for_worker_1=8"],
                        tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    merged = json.loads((tmp_path / "cluster.json").read_text())
    steps = merged["steps"]
    assert sorted(steps) == ["worker:0", "worker:1"]
    assert all(s["count"] + s["warmup"] == 12 and s["kind"] == "function" for s in steps.values())
    assert all(s["source"].endswith(line("train_step(batches)")) for s in steps.values())
    assert merged["slowest"]["task"] == "worker:1" and merged["slowest"]["ratio"] >= 2
    assert steps["worker:0"]["shares"]["sync"] > steps["worker:1"]["shares"]["sync"]  # worker 0 waits for worker 1
    assert [(a["rule"], a["task"], a["source"]) for a in merged["advice"]] == \
        [("replica-skew", "worker:1", line("extra = tf.matmul(extra, extra)"))]
    report = done.stdout[done.stdout.index("what is uneven or costly"):]
    assert report.splitlines()[1].startswith("  slowest worker: worker:1, ")
    assert f"replica-skew on worker:1 at {line('extra = tf.matmul(extra, extra)')}" in report
