"""Transfers inside functions: every cross-device edge of a function that ran, per call, with bytes
and lines; `log.transfers()`, `log.cost()`; guards that watch function nodes and transfers."""

import subprocess
import sys
import textwrap

import pytest

from conftest import PRELUDE, ROOT, result_of

TWO_CPUS = f"""
import sys
sys.path.insert(0, {str(ROOT / "tests" / "conformance")!r})
import tensorflow as tf, tfplace
tfplace.configure(logical_cpus=2)
"""


def run_file(tmp_path, code: str, onednn: str = "1"):
    """Runs `code` from a file (autograph reads a function's source) and returns what it reported."""
    path = tmp_path / "program.py"
    path.write_text(PRELUDE + TWO_CPUS + textwrap.dedent(code), encoding="utf-8")
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**__import__("os").environ, "TF_ENABLE_ONEDNN_OPTS": onednn})
    return result_of(done)


def line(code: str, marker: str) -> str:
    """`program.py:N` of the line holding `marker` in the file `run_file` writes."""
    lines = (PRELUDE + TWO_CPUS + textwrap.dedent(code)).splitlines()
    return f"program.py:{next(i for i, text in enumerate(lines, 1) if marker in text)}"


FUNCTION = """
x = tf.ones((256, 256))

@tf.function
def step(x):
    with tf.device("CPU:1"):
        y = tf.matmul(x, x)  # the MatMul
    return tf.reduce_sum(y)  # the Sum

@tf.function
def explicit(x):
    with tf.device("CPU:1"):
        xi = tf.identity(x)
        y = tf.matmul(xi, xi)
    with tf.device("CPU:0"):
        y = tf.identity(y)
    return tf.reduce_sum(y)

@tf.function
def one_node_on_cpu0(v):
    w = v * 2.0
    with tf.device("CPU:0"):
        w = tf.nn.relu(w)  # the Relu
    return w + 1.0

with tfplace.capture_placement(sources=True) as log:
    for _ in range(3):
        step(x)  # the call

try:
    with tfplace.transfer_guard():
        step(x)
    guarded = None
except tfplace.ImplicitCopyError as err:
    guarded = str(err)
with tfplace.transfer_guard():
    explicit(x)
with tf.device("CPU:1"):
    v = tf.ones((2, 2))
try:
    with tf.device("CPU:1"), tfplace.device_guard("CPU:1"):
        one_node_on_cpu0(v)  # the guarded call
    misplaced = None
except tfplace.PlacementError as err:
    misplaced = str(err)
with tf.device("CPU:1"), tfplace.device_guard("CPU:1", allow_ops=("Relu",)):
    one_node_on_cpu0(v)

report({"copies": [c._asdict() for c in log.copies], "transfers": [t._asdict() for t in log.transfers()],
        "cost": log.cost().to_json(), "json": sorted(log.to_json()), "guarded": guarded, "misplaced": misplaced})
"""


@pytest.fixture(scope="module", params=["1", "0"], ids=["onednn1", "onednn0"])
def function_run(request, tmp_path_factory):
    return run_file(tmp_path_factory.mktemp("function"), FUNCTION, request.param)


def test_a_function_moves_its_argument_in_and_its_product_out_on_every_call(function_run):
    copies = function_run["copies"]
    assert len(copies) == 6 and all(c["kind"] == "function" for c in copies)
    rows = {(t["op"], t["input_index"], t["from_device"], t["to_device"]): t for t in function_run["transfers"]}
    assert set(rows) == {("MatMul", 0, "/device:CPU:0", "/device:CPU:1"), ("Sum", 0, "/device:CPU:1", "/device:CPU:0")}
    into, out = (rows[("MatMul", 0, "/device:CPU:0", "/device:CPU:1")],
                 rows[("Sum", 0, "/device:CPU:1", "/device:CPU:0")])
    for row in (into, out):
        assert row["count"] == 3 and row["bytes"] == 256 * 256 * 4 and row["total_bytes"] == 3 * 256 * 256 * 4
        assert row["dtype"] == "float32" and row["function"].startswith("__inference_step_") and not row["lower_bound"]
    assert into["source"] == line(FUNCTION, "# the MatMul") and into["tensor"] == "x:0" and into["node"] == "MatMul"
    assert out["source"] == line(FUNCTION, "# the Sum") and out["tensor"] == "MatMul:0"
    assert {c["call"] for c in copies} == {line(FUNCTION, "# the call")}


def test_cost_counts_executions_and_bytes_per_direction_without_timing(function_run):
    cost = function_run["cost"]
    assert not cost["timed"] and cost["missing"] == ""
    ops = {(o["device"], o["op"]): o for o in cost["ops"]}
    assert ops[("/device:CPU:1", "MatMul")]["executions"] == 3 and ops[("/device:CPU:1", "MatMul")]["time_us"] is None
    assert ops[("/device:CPU:0", "Sum")]["executions"] == 3
    directions = {(d["from_device"], d["to_device"]): d for d in cost["directions"]}
    assert directions[("/device:CPU:0", "/device:CPU:1")] == {
        "from_device": "/device:CPU:0", "to_device": "/device:CPU:1", "count": 3, "bytes": 3 * 262144, "time_us": None}
    assert {"transfers", "cost"} <= set(function_run["json"])


def test_transfer_guard_stops_a_function_transfer_and_lets_explicit_copies_pass(function_run):
    message = function_run["guarded"]
    assert message is not None and message.startswith("implicit transfer inside function __inference_step_")
    assert f"node MatMul (MatMul, made at {line(FUNCTION, '# the MatMul')}) input #0 (x:0)" in message
    assert "produced on /device:CPU:0, but MatMul runs on /device:CPU:1" in message
    # `explicit` ran under transfer_guard() without raising: the run reached the report.


def test_device_guard_stops_a_function_node_on_another_device(function_run):
    message = function_run["misplaced"]
    assert message is not None and message.startswith("Relu (node Relu of function __inference_one_node_on_cpu0_")
    assert f"(called at {line(FUNCTION, '# the guarded call')})) ran on /device:CPU:0 at " \
           f"{line(FUNCTION, '# the Relu')}" in message
    assert "asked for: /device:CPU:0" in message and "allow_ops=('Relu',)" in message


def test_transfers_in_a_loop_body_count_per_call_as_a_lower_bound(tmp_path):
    out = run_file(tmp_path, """
        x = tf.ones((64, 64))

        @tf.function
        def loop(x):
            def body(i, acc):
                with tf.device("CPU:1"):
                    y = tf.matmul(acc, x)
                return i + 1, y / 64.0
            return tf.while_loop(lambda i, a: i < 5, body, (tf.constant(0), x))[1]

        with tfplace.capture_placement() as log:
            loop(x)
            loop(x)
        report([[t.op, t.count, t.lower_bound, t.from_device, t.to_device] for t in log.transfers()])
    """)
    assert sorted(map(tuple, out)) == [("MatMul", 2, True, "/device:CPU:0", "/device:CPU:1")] * 2 + [
        ("RealDiv", 2, True, "/device:CPU:1", "/device:CPU:0")]


def test_a_control_edge_across_devices_is_a_transfer_of_no_bytes(tmp_path):
    code = """
        x = tf.ones((2, 2))
        with tf.device("CPU:1"):
            y = tf.ones((2, 2))

        @tf.function
        def waits(x, y):
            with tf.device("CPU:0"):
                a = tf.sin(x)
            with tf.device("CPU:1"):
                with tf.control_dependencies([a]):
                    b = tf.cos(y)  # waits for a
            return a, b

        with tfplace.capture_placement(sources=True) as log:
            waits(x, y)
            waits(x, y)
        try:
            with tfplace.transfer_guard():
                waits(x, y)
        except tfplace.ImplicitCopyError as error:
            message = str(error)
        report({"copies": [c._asdict() for c in log.copies if c.tensor.startswith("^")], "message": message,
                "rows": [[t.op, t.input_index, t.count, t.bytes, t.total_bytes] for t in log.transfers()]})
    """
    out = run_file(tmp_path, code)
    controls = out["copies"]
    assert len(controls) == 2  # one per call
    assert {(c["op"], c["input_index"], c["from_device"], c["to_device"], c["tensor"], c["bytes"], c["node"],
             c["source"]) for c in controls} == {
        ("Cos", -1, "/device:CPU:0", "/device:CPU:1", "^Sin", 0, "Cos", line(code, "waits for a"))}
    assert out["rows"] == [["Cos", -1, 2, 0, 0]]
    assert "control edge" in out["message"] and "waits for Sin on /device:CPU:0" in out["message"]


def test_eager_copies_carry_dtype_and_bytes(tmp_path):
    out = run_file(tmp_path, """
        x = tf.ones((4, 8), tf.float64)
        with tfplace.capture_placement() as log:
            with tf.device("CPU:1"):
                y = x * 2.0
        report([c._asdict() for c in log.copies])
    """)
    assert [(c["kind"], c["op"], c["dtype"], c["bytes"], c["function"]) for c in out] == [
        ("eager", "Mul", "float64", 4 * 8 * 8, "")]


@pytest.mark.parametrize("onednn", ["1", "0"])
def test_keras_fit_under_mirrored_strategy_has_every_cross_device_edge(tmp_path, onednn):
    out = run_file(tmp_path, """
        import keras, numpy as np
        from sends import SendOracle
        strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
        data = tf.data.Dataset.from_tensor_slices(
            (np.ones((64, 8), "float32"), np.ones((64, 1), "float32"))).batch(16)
        oracle = SendOracle()
        with oracle, tfplace.capture_placement() as log, oracle.calls():
            with strategy.scope():
                model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                          keras.layers.Dense(1)])
                model.compile("adam", "mse")
            model.fit(data, epochs=2, verbose=0)
        functions = [c for c in log.copies if c.kind == "function"]
        report({"edges": oracle.finish(), "copies": len(functions),
                "sizes": [[c.tensor, c.bytes, oracle.sizes.get(c.tensor)] for c in functions
                          if c.tensor in oracle.sizes],
                "into_replica": [[t.count, t.dtype, t.tensor] for t in log.transfers()
                                 if t.kind == "function" and t.to_device == "/device:CPU:1"]})
    """, onednn)
    assert out["edges"] > 0 and out["copies"] == out["edges"]
    assert all(ours == theirs for _, ours, theirs in out["sizes"])
    # The replica on CPU:1 gets its batch from the input iterator on CPU:0, on every step (8 steps).
    assert any(count == 8 and dtype == "float32" for count, dtype, _ in out["into_replica"])


def test_tf_data_functions_transfers_are_recorded_per_instantiation_and_guarded(tmp_path):
    code = """
        def scale(i):
            x = tf.cast(i, tf.float32)
            with tf.device("CPU:1"):
                y = x * 2.0  # the Mul
            return y + 1.0  # the AddV2

        @tf.function
        def total(dataset):
            return dataset.reduce(0.0, lambda a, b: a + b)

        with tfplace.capture_placement(sources=True) as log:
            dataset = tf.data.Dataset.range(4).map(scale)  # traced in the block: its lines are known
            for epoch in range(2):
                for value in dataset:  # the loop
                    pass
            total(dataset)  # the call
        try:
            with tfplace.transfer_guard():
                for value in dataset:  # the guarded loop
                    pass
            message = None
        except tfplace.ImplicitCopyError as error:
            message = str(error)
        report({"copies": [c._asdict() for c in log.copies],
                "rows": [[t.op, t.count, t.lower_bound] for t in log.transfers()], "message": message})
    """
    out = run_file(tmp_path, code)
    copies = out["copies"]
    assert all(c["kind"] == "function" and c["function"].startswith("__inference_Dataset_map_scale_") for c in copies)
    edges = {(c["op"], c["node"], c["input_index"], c["tensor"], c["from_device"], c["to_device"], c["dtype"],
              c["source"]) for c in copies}
    assert edges == {("Mul", "mul", 0, "Cast:0", "/device:CPU:0", "/device:CPU:1", "float32", line(code, "# the Mul")),
                     ("AddV2", "add", 0, "mul:0", "/device:CPU:1", "/device:CPU:0", "float32",
                      line(code, "# the AddV2"))}
    assert {c["bytes"] for c in copies} == {4}  # a float32 scalar per element: the arguments' shapes are known
    # each iterator instantiates the function once (two eager loops, one inside the function): three each
    calls = sorted(c["call"] for c in copies)
    assert calls == sorted([line(code, "# the loop")] * 4 + [line(code, "# the call")] * 2)
    assert sorted(map(tuple, out["rows"])) == [("AddV2", 3, True), ("Mul", 3, True)]  # it runs once per element
    assert out["message"] is not None and "__inference_Dataset_map_scale_" in out["message"]
    assert line(code, "# the Mul") in out["message"] and "/device:CPU:0" in out["message"]


def test_prefetch_to_device_instantiates_its_input_pipeline_on_the_source_device(tmp_path):
    out = run_file(tmp_path, """
        def scale(i):
            x = tf.cast(i, tf.float32)
            with tf.device("CPU:1"):
                y = x * 2.0
            return y + 1.0

        pipeline = tf.data.Dataset.range(4).map(scale)
        prefetched = pipeline.apply(tf.data.experimental.prefetch_to_device("/CPU:1"))
        with tfplace.capture_placement() as log:
            devices = [value.device for value in prefetched]
        report({"devices": sorted(set(devices)), "complete": log.complete,
                "map": sorted((r.op, r.device) for r in log.records
                              if r.kind == "place" and r.op in ("Cast", "Mul", "AddV2")),
                "copies": sorted((c.op, c.from_device, c.to_device) for c in log.copies if c.kind == "function")})
    """)
    assert out["devices"] == ["/job:localhost/replica:0/task:0/device:CPU:1"] and out["complete"]
    # the copy's generator (on CPU:1) makes the pipeline's iterator on CPU:0, through a remote call
    assert list(map(tuple, out["map"])) == [("AddV2", "/device:CPU:0"), ("Cast", "/device:CPU:0"),
                                            ("Mul", "/device:CPU:1")]
    assert list(map(tuple, out["copies"])) == [("AddV2", "/device:CPU:1", "/device:CPU:0"),
                                               ("Mul", "/device:CPU:0", "/device:CPU:1")]


def test_static_shapes_of_a_graphs_tensors_are_read_with_their_dtypes(python):
    """Bytes per transfer come from a placed graph's static shapes: each wanted tensor's dtype and elements;
    ("", None) for a tensor the graph lacks or an output its node does not have."""
    out = python("""
        import tensorflow as tf
        from tfplace import _tensorflow

        @tf.function
        def f(x):
            return tf.matmul(x, x) + 1.0, tf.unstack(tf.ones((3, 2), tf.int32)), tf.reshape(x, [-1, 2])[:, :1]

        graph = f.get_concrete_function(tf.TensorSpec((4, 4))).graph.as_graph_def()
        names = ["MatMul:0", "add:0", "unstack:1", "x:0", "missing:0", "nocolon"]
        report([_tensorflow.static_tensors(graph, names), _tensorflow.static_tensors(graph, names + ["MatMul:7"])])
    """)
    expected = {"MatMul:0": ["float32", 16], "add:0": ["float32", 16], "unstack:1": ["int32", 2],
                "x:0": ["float32", 16], "missing:0": ["", None], "nocolon": ["", None]}
    assert out == [expected, {**expected, "MatMul:7": ["", None]}]
