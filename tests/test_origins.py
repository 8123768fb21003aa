"""Who asked for each op and its device (`record.origin`, `record.requested_by`), and the reports,
guards, readiness and `tfplace diff` that lead with what the user can act on."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import line_of

# A Keras model with two Dense layers trained with fit under MirroredStrategy on a tf.data pipeline.
MIRRORED_FIT = """
import numpy as np
import tensorflow as tf
import keras

x = np.random.default_rng(0).normal(size=(128, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
dataset = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(128).batch(32)
           .map(lambda a, b: (a * 2.0, b)).prefetch(tf.data.AUTOTUNE))
model.fit(dataset, epochs=1, verbose=0)
"""

PLUMBING = {"Identity", "IdentityN", "Const", "NoOp", "_Arg", "_Retval"}


def trace(tmp_path, script: str, *options: str, name: str = "script.py") -> subprocess.CompletedProcess:
    (tmp_path / name).write_text(textwrap.dedent(script), encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "tfplace", "trace", *options, name], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)


def test_mirrored_fit_report_leads_with_compute_and_counts_the_strategy_in_one_line(tmp_path):
    done = trace(tmp_path, MIRRORED_FIT, "--logical_cpus=2", "--json=t.json")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    rows = [line for line in lines if "compute op type(s):" in line]
    assert [row.split()[0] for row in rows] == ["/device:CPU:0", "/device:CPU:1"]
    for row in rows:
        listed = [part.split()[0] for part in row.split(": ", 1)[1].split(", ") if not part.startswith("and ")]
        assert listed[0] == "MatMul" and not PLUMBING & set(listed), row
    # plumbing, input pipeline and framework: one line each per device, not rows of op types
    assert sum(line.strip().startswith("plumbing (Identity") for line in lines) == 2
    assert sum(line.strip().startswith("input pipeline (tf.data):") for line in lines) == 2
    data = json.loads((tmp_path / "t.json").read_text())
    compute = {(r["device"], r["op"]) for r in data["records"] if r["origin"] == "user"
               and r["op"] not in PLUMBING and r["kind"] != "removed"}
    for device in ("/device:CPU:0", "/device:CPU:1"):
        assert {(device, "MatMul"), (device, "BiasAdd"), (device, "Relu")} <= compute
    # GPU readiness: no tf.data or iterator op among its entries, one input-pipeline line
    assert not [e["op"] for e in data["gpu_readiness"] if "Dataset" in e["op"] or "Iterator" in e["op"]]
    assert sum("input-pipeline op(s)" in line and "run on the host by design" in line for line in lines) == 1
    # the strategy's own reads: no advice to move a resource, one line naming MirroredStrategy
    strategy = [e for e in data["explanations"] if e["record"]["requested_by"] == "MirroredStrategy"]
    assert strategy and all(e["record"]["origin"] == "framework" for e in strategy)
    assert not [e for e in strategy if "create the resource" in e["message"]]
    counted = [line for line in lines
               if line.strip().startswith("MirroredStrategy initialises each replica's variables")]
    assert counted and all("reads colocated with /device:CPU:" in line for line in counted)
    assert not [line for line in lines if "create the resource" in line]


GUARDED_FIT = """
import numpy as np
import tensorflow as tf
import keras
import tfplace

tfplace.configure(logical_cpus=2)
with tf.device("CPU:0"):
    dataset = tf.data.Dataset.from_tensor_slices((np.zeros((32, 4), "float32"), np.zeros((32, 1), "float32"))).batch(8)
with tf.device("CPU:1"):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    with tfplace.device_guard("CPU:1"):
        model.fit(dataset, epochs=1, verbose=0)
    print("DEFAULT PASSED")
    try:
        with tfplace.device_guard("CPU:1", origins=("user", "input", "framework")):
            model.fit(dataset, epochs=1, verbose=0)
    except tfplace.PlacementError as error:
        print("RAISED:", str(error).replace("\\n", " "))
"""


def test_device_guard_around_keras_fit_checks_the_users_compute_by_default(tmp_path):
    (tmp_path / "guarded.py").write_text(textwrap.dedent(GUARDED_FIT), encoding="utf-8")
    done = subprocess.run([sys.executable, "guarded.py"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert "DEFAULT PASSED" in done.stdout, done.stderr[-3000:]
    [raised] = [line for line in done.stdout.splitlines() if line.startswith("RAISED:")]
    op = raised.split()[1]
    assert "Dataset" in op or "Iterator" in op or op.startswith("Optional"), raised
    assert (f"{op} (origin 'input') ran on /device:CPU:0" in raised
            and "of origins 'user', 'input', 'framework'" in raised)
    assert "Place it with tf.device" not in raised and "not a line of yours" in raised


def test_users_own_variable_read_elsewhere_is_colocated_with_advice_and_the_users_line(python):
    code = """
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)
        with tfplace.capture_placement(sources=True) as log:
            with tf.device("CPU:0"):
                v = tf.Variable(tf.ones((2, 2)))
            with tf.device("CPU:1"):  # the user's scope
                r = v.read_value()
        [found] = [e for e in log.explain() if e.record.op == "ReadVariableOp"]
        report([found.reason, found.message, found.record.requested_by, found.record.origin])
    """
    reason, message, requested_by, origin = python(code)
    assert reason == "colocated" and origin == "user"
    assert requested_by == line_of(code, "# the user's scope")
    assert "create the resource under tf.device('/device:CPU:1')" in message


def test_origins_of_eager_ops_input_pipeline_and_keras_machinery(python):
    out = python("""
        import numpy as np, tensorflow as tf, keras, tfplace
        with tfplace.capture_placement() as log:
            y = tf.ones(2) * 2.0
            total = tf.data.Dataset.range(4).map(lambda v: v * 2).reduce(tf.constant(0, tf.int64), lambda a, b: a + b)
            model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
            model.compile(optimizer="adam", loss="mse")
            model.fit(np.zeros((8, 2), "float32"), np.zeros((8, 1), "float32"), epochs=1, verbose=0)
        origins = {}
        for r in log.records:
            origins.setdefault(r.op, set()).add(r.origin)
        report({op: sorted(found) for op, found in origins.items()})
    """)
    assert "user" in out["Mul"]
    assert out["MapDataset"] == ["input"] and out["ReduceDataset"] == ["input"]
    assert out["MatMul"] == ["user"] and "user" in out["AddV2"]  # the Dense layer: x @ kernel + bias
    assert "framework" in out["AssignAddVariableOp"]  # the optimizer's iteration count and slots


def test_device_guard_rejects_origins_it_does_not_know():
    import tfplace

    for bad in ("user", (), ("user", "keras")):
        with pytest.raises(tfplace.ConfigurationError, match=r"device_guard received origins=.* \(from argument "
                                                             r"origins\): allowed is a non-empty sequence of 'user'"):
            with tfplace.device_guard("CPU:0", origins=bad):
                pass


def test_to_json_stores_identical_events_once_and_from_json_reads_them_back():
    from tfplace import PlacementLog
    from tfplace.placement.records._records import CopyRecord, PlacementRecord

    kinds = [PlacementRecord(op, "", "/device:CPU:0", "execute", "train.py:7", origin="user") for op in
             ("MatMul", "AddV2", "Relu")]
    copy = CopyRecord("AddV2", 0, "/device:CPU:1", "/device:CPU:0", "train.py:7", dtype="float32", bytes=64)
    log = PlacementLog(kinds * 333_334, [copy] * 1000)
    text = json.dumps(log.to_json())
    assert len(text) < 1_000_000
    back = PlacementLog.from_json(text)
    assert len(back.records) == 1_000_002 and len(back.copies) == 1000
    assert sorted(back.summary()["/device:CPU:0"].items()) == [("AddV2", 333_334), ("MatMul", 333_334),
                                                                ("Relu", 333_334)]
    assert back.copies[0] == copy and back.complete
    with pytest.raises(ValueError, match=r"not JSON \(from argument text\)"):
        PlacementLog.from_json('{"records": [')
    with pytest.raises(ValueError, match="without a list of records"):
        PlacementLog.from_json('{"copies": []}')
    with pytest.raises(TypeError, match="received int"):
        PlacementLog.from_json(3)


DIFFED = """
import tensorflow as tf
x = tf.ones((4, 4))
with tf.device("CPU:1"):  # soft-placed on CPU:0 with one logical CPU
    y = tf.matmul(x, x)
z = y + 1.0
"""


def test_tfplace_diff_names_the_op_that_moved_and_the_transfer_that_appeared(tmp_path):
    for cpus in (1, 2):
        done = trace(tmp_path, DIFFED, f"--logical_cpus={cpus}", f"--json=cpus{cpus}.json")
        assert done.returncode == 0, done.stderr[-3000:]

    def diff(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tfplace", "diff", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=60)

    moved = diff("cpus1.json", "cpus2.json")
    assert moved.returncode == 1, moved.stderr
    assert "compute ops that moved device (1):\n  script.py:5  MatMul: CPU:0 -> CPU:1" in moved.stdout
    assert "  script.py:5  MatMul input #0 CPU:0 -> CPU:1, 64 B each, x1" in moved.stdout
    machine = json.loads(diff("cpus1.json", "cpus2.json", "--json").stdout)
    assert machine["status"] == 1 and [m["op"] for m in machine["moved"]] == ["MatMul"]
    same = diff("cpus2.json", "cpus2.json")
    assert same.returncode == 0 and "no change" in same.stdout.splitlines()[0]
    (tmp_path / "cut.json").write_text((tmp_path / "cpus2.json").read_text()[:200])
    broken = diff("cpus1.json", "cut.json")
    assert broken.returncode == 2 and broken.stdout == ""
    assert broken.stderr.strip().startswith("tfplace diff: cut.json is not JSON")
    assert len(broken.stderr.strip().splitlines()) == 1


def test_diff_reads_changed_bytes_readiness_explanations_and_time_shares_from_the_json():
    from tfplace.cli._diff import diff, render

    def trace(device, each, share, readiness, reason):
        return {
            "records": [{"op": "MatMul", "name": "dense/MatMul", "device": device, "kind": "place",
                         "source": "train.py:9", "origin": "user", "count": 4},
                        {"op": "Identity", "name": "dense/Identity", "device": "/device:CPU:5", "kind": "place",
                         "source": "train.py:9", "origin": "user", "count": 1}],  # plumbing: never a move
            "transfers": [{"kind": "function", "function": f"__inference_step_{each}", "node": "dense/MatMul",
                           "op": "MatMul", "input_index": 1, "from_device": "/device:CPU:0", "to_device": device,
                           "source": "train.py:9", "count": 4, "bytes": each, "total_bytes": 4 * each}],
            "gpu_readiness": [{"op": op, "dtypes": [["T", "int32"]]} for op in readiness],
            "explanations": [{"record": {"op": "MatMul", "source": "train.py:9", "origin": "user"}, "reason": reason}],
            "cost": {"devices": [{"device": "/device:CPU:0", "share": share}, {"device": device, "share": 1 - share}]},
        }

    a = trace("/device:CPU:1", 64, 0.25, ["MatMul"], "no-device")
    b = trace("/device:CPU:1", 256, 0.5, [], "colocated")
    found = diff(a, b)
    assert found.status == 0 and not found.moved and not found.appeared  # function numbers differ: one transfer
    assert [(old["bytes"], new["bytes"]) for old, new in found.changed] == [(64, 256)]
    assert found.readiness == (("disappeared", "MatMul", "T=int32"),)
    assert found.explanations == (("appeared", "train.py:9", "MatMul", "colocated"),
                                  ("disappeared", "train.py:9", "MatMul", "no-device"))
    assert found.shares == {"/device:CPU:0": (0.25, 0.5), "/device:CPU:1": (0.75, 0.5)}
    text = render(found, "a.json", "b.json")
    assert text.splitlines()[0] == ("tfplace diff a.json -> b.json: no change in where your compute ops ran or what "
                                    "moved between devices")
    assert "  CPU:0: 25.0% -> 50.0%" in text and "transfers whose bytes changed (1):" in text
    moved = diff(a, trace("/device:CPU:2", 64, 0.25, ["MatMul"], "no-device"))
    assert moved.status == 1 and [(m.op, m.before, m.after) for m in moved.moved] == [
        ("MatMul", {"/device:CPU:1": 4}, {"/device:CPU:2": 4})]


def test_traced_nodes_origins_read_as_each_op_is_made_equal_those_of_their_saved_stacks(python, tmp_path):
    # the origin of a traced node is read from the live stack as TensorFlow makes the op; a maker that
    # differs only deep in the stack (tf.data's code inside a loop's body) must not take another's verdict
    script = tmp_path / "step.py"  # a file: autograph reads the loop's source
    script.write_text(textwrap.dedent("""
        import numpy as np, tensorflow as tf, keras, tfplace
        from tfplace.placement.functions import _function_sources
        from tfplace.placement.records import _origins
        tfplace.configure(logical_cpus=2)
        strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
        layer = keras.layers.Dense(2)
        optimizer = keras.optimizers.Adam()
        dataset = tf.data.Dataset.from_tensor_slices(np.ones((4, 3), "float32")).batch(2)

        @tf.function
        def step(dataset):
            total = tf.constant(0.0)
            for batch in dataset:
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(layer(batch))
                optimizer.apply_gradients(zip(tape.gradient(loss, layer.trainable_variables),
                                              layer.trainable_variables))
                total += loss
            return total

        @tf.function
        def replicated(dist_dataset):  # TensorFlow's custom training tutorial: the loop inside the function
            total = 0.0
            for batch in dist_dataset:
                total += strategy.reduce("SUM", strategy.run(lambda x: tf.reduce_sum(x * 2.0), args=(batch,)),
                                         axis=None)
            return total

        dist_dataset = strategy.experimental_distribute_dataset(dataset)
        saved_stacks_read = []  # ops whose origin was read from their saved stack, not as they were made
        read_saved_stack = _origins.frames_of
        _origins.frames_of = lambda stack: saved_stacks_read.append(1) or read_saved_stack(stack)
        with tfplace.capture_placement() as log:
            step(dataset)
            replicated(dist_dataset)
        _origins.frames_of = read_saved_stack
        graphs = [step.get_concrete_function(dataset).graph, replicated.get_concrete_function(dist_dataset).graph]
        for graph in graphs:  # and the functions they call (loop bodies), found as the list grows
            graphs += [f.graph for f in graph._functions.values() if f.graph not in graphs]
        compared, differ = 0, []
        for function, notes in _function_sources._session.runtime().lines.items():
            for graph in graphs:
                ops = {op.name: op for op in graph.get_operations()}
                if set(notes) != set(ops):
                    continue
                for name, note in notes.items():
                    stack = ops[name].traceback
                    said = _origins.of_frames(_origins.frames_of(stack)) if stack else ""
                    truth = _origins.of_op(ops[name].type, said)
                    compared += 1
                    if note.origin != truth:
                        differ.append((name, note.origin, truth))
        every = _function_sources._session.runtime().lines.values()
        origins = sorted({note.origin for notes in every for note in notes.values()})
        report([compared, differ, len(saved_stacks_read), origins])
    """))
    out = python(f"import runpy; runpy.run_path({str(script)!r}, init_globals={{'report': report}})")
    compared, differ, saved_stacks_read, origins = out
    assert compared > 200 and differ == []
    assert saved_stacks_read < compared / 10  # nearly every origin was read as its op was made
    assert origins == ["framework", "input", "user"]


def test_traced_nodes_lines_read_as_each_op_is_made_equal_those_of_their_saved_stacks(python, tmp_path):
    # with sources, a traced node's line is read from the live stack as TensorFlow makes the op, except in
    # autograph's generated code, which only the op's saved stack maps back to the user's source
    script = tmp_path / "fit.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, tensorflow as tf, keras, tfplace
        from tfplace.placement.functions import _function_sources
        from tfplace.placement.session._sources import stack_user_line
        tfplace.configure(logical_cpus=2)
        strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
        with strategy.scope():
            model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
            model.compile("adam", "mse")

        @tf.function
        def converted(x):  # autograph's code: lines from the saved stack
            for i in tf.range(2):
                x = x + tf.cast(i, tf.float32)
            return x

        @tf.function(autograph=False)
        def plain(x):
            with tf.device("CPU:1"):
                copied = tf.identity(x)  # the user's explicit copy
            return model(copied) * 2.0

        traced, remember = [], _function_sources._remember
        _function_sources._remember = lambda name, graph: traced.append((name, graph)) or remember(name, graph)
        saved_stacks_read = []
        read_saved_stack = _function_sources.stack_user_line
        _function_sources.stack_user_line = lambda frames: saved_stacks_read.append(1) or read_saved_stack(frames)
        with tfplace.capture_placement(sources=True) as log:
            model.fit(np.ones((8, 3), "float32"), np.ones((8, 2), "float32"), epochs=1, batch_size=4, verbose=0)
            converted(tf.ones(2))
            plain(tf.ones((1, 3)))
        _function_sources._remember, _function_sources.stack_user_line = remember, read_saved_stack
        compared, differ, lines, identities = 0, [], set(), {"user's": 0, "machinery's": 0}
        for name, graph in traced:
            notes = _function_sources.notes(name)
            for op in graph.get_operations():
                if op.traceback is None:
                    continue
                truth = stack_user_line(op.traceback.get_user_frames())
                if op.type in ("Identity", "IdentityN"):  # its line says whether the user made it
                    truth = truth if _function_sources._made_by_caller(op.traceback) else ""
                    identities["user's" if truth else "machinery's"] += 1
                compared += 1
                lines.add(truth.rpartition(":")[2])
                if notes[op.name].line != truth:
                    differ.append((name, op.name, notes[op.name].line, truth))
        report([compared, differ[:5], len(saved_stacks_read), sorted(lines), identities])
    """))
    out = python(f"import runpy; runpy.run_path({str(script)!r}, init_globals={{'report': report}})")
    compared, differ, saved_stacks_read, lines, identities = out
    assert compared > 200 and differ == []
    assert identities["user's"] >= 1 and identities["machinery's"] >= 10
    assert saved_stacks_read < compared / 5  # most lines were read as their ops were made
    text = script.read_text().splitlines()
    expected = {str(next(n for n, line in enumerate(text, 1) if marker in line))
                for marker in ("x = x + tf.cast", "return model(copied)", "model.fit(", "copied = tf.identity(x)")}
    assert expected <= set(lines)  # in the converted loop, the model's call, the fit
