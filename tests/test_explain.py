"""Why an op ran where it did: requested devices, reasons, GPU readiness, lines of function nodes,
and the trace and guard that say them."""

import gzip
import json
import os
import subprocess
import sys

import pytest

from conftest import PRELUDE, result_of

# One program, one TensorFlow start: each scenario reports under its own key.
PROGRAM = """
import warnings
import keras
import tensorflow as tf
import tfplace

tfplace.configure(logical_cpus=2, soft_placement=True)
out = {}

def explained(log, op):
    return [[e.record.op, e.record.kind, e.record.requested, e.record.device, e.reason, e.message]
            for e in log.explain() if e.record.op == op]

with tf.device("CPU:0"):
    v = tf.Variable(1.0)
with tfplace.capture_placement() as log:
    with tf.device("CPU:1"):
        v.assign_add(1.0)
out["colocated"] = explained(log, "AssignAddVariableOp")

small = tf.constant([1, 2])
with tfplace.capture_placement() as log:
    with tf.device("CPU:1"):
        total = small + small
out["small_int32"] = [[r.device, r.requested] for r in log.records if r.op == "AddV2"] + [
    e.reason for e in log.explain()]

with tfplace.capture_placement() as log:
    with tf.device("GPU:0"):
        y = tf.ones((2, 2)) * 3.0
out["no_device"] = explained(log, "Mul")

@tf.function(jit_compile=True)
def compiled(x):
    with tf.device("CPU:1"):
        return x * 2.0 + 1.0

with tfplace.capture_placement() as log:
    with tf.device("CPU:0"):
        compiled(tf.ones(2))
out["xla"] = [[e.record.op, e.record.kind, e.record.requested, e.record.device, e.reason]
              for e in log.explain() if e.record.kind == "compiled"]
out["xla_nodes"] = sorted({r.op for r in log.records if r.kind == "compiled"})

with tfplace.capture_placement(sources=True) as log:
    a = tf.ones((2, 2), tf.int32)
    product = tf.matmul(a, a)  # int32 matmul
    joined = tf.strings.join(["a", "b"])  # strings
    floats = tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))  # float32 matmul
out["readiness"] = [r.to_json() for r in log.gpu_readiness()]
out["records_typed"] = [[r.op, r.dtypes] for r in log.records if r.op == "MatMul"]

layer = keras.layers.Dense(3)

@tf.function
def forward(x):
    return layer(x)  # the layer's call

with tfplace.capture_placement(sources=True) as log:
    forward(tf.ones((2, 4)))
with tfplace.capture_placement() as plain:
    forward(tf.ones((5, 4)))
out["dense"] = [[r.kind, r.name, r.source, r.requested, r.dtypes] for r in log.records if r.op == "MatMul"]
out["plain_sources"] = sorted({r.source for r in plain.records})

@tf.function
def placed(x):
    with tf.device("CPU:1"):
        z = x * 2.0  # asked for CPU:1
    return z + 1.0

with tfplace.capture_placement(sources=True) as log:
    placed(tf.ones(2))
out["placed"] = [[r.op, r.requested, r.device, r.source, r.dtypes] for r in log.records
                 if r.kind == "place" and r.op in ("Mul", "AddV2")]

doubled = tf.data.Dataset.range(3)
with tfplace.capture_placement(sources=True) as log:
    doubled = doubled.map(lambda item: item * 2)  # the map function
    list(doubled)
out["dataset"] = [[r.op, r.source, r.dtypes] for r in log.records if r.kind == "place" and r.op == "Mul"]

with tfplace.capture_placement() as log:
    try:
        tf.matmul(tf.ones((2, 3)), tf.ones((2, 3)))  # fails: shapes
    except tf.errors.InvalidArgumentError:
        pass
    try:
        tf.cast(tf.constant(["a"]), tf.float32)  # fails: strings
    except tf.errors.UnimplementedError:
        pass
out["failed"] = [[r.op, r.dtypes] for r in log.records if r.kind == "failed"]

try:
    with tfplace.device_guard("CPU:1"):
        v.assign_add(1.0)
    out["guard"] = "no error"
except tfplace.PlacementError as error:
    out["guard"] = str(error)
report(out)
"""


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    path = tmp_path_factory.mktemp("explain") / "program.py"
    path.write_text(PRELUDE + PROGRAM, encoding="utf-8")
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=path.parent, timeout=300)
    out = result_of(done)
    out["file"] = path.name
    out["lines"] = {marker: f"{path.name}:{i}" for i, line in enumerate((PRELUDE + PROGRAM).splitlines(), 1)
                    for marker in ("# the layer's call", "# asked for CPU:1", "# the map function",
                                   "# int32 matmul", "# strings")
                    if marker in line}
    return out


def test_assign_add_under_another_device_is_colocated_with_its_variable(scenarios):
    [[op, kind, requested, device, reason, message]] = scenarios["colocated"]
    assert (kind, requested, device, reason) == ("execute", "/device:CPU:1", "/device:CPU:0", "colocated")
    assert "lives on /device:CPU:0" in message and "'resource'" in message


def test_small_int32_ops_run_where_asked_in_eager_mode(scenarios):
    assert scenarios["small_int32"] == [["/device:CPU:1", "/device:CPU:1"]], \
        "TensorFlow pins small integer ops to the host only with TF_EAGER_ENABLE_SMALL_TENSOR_CPU_PINNING"


def test_missing_gpu_under_soft_placement_is_no_device(scenarios):
    [[op, kind, requested, device, reason, message]] = scenarios["no_device"]
    assert (requested, device, reason) == ("/device:GPU:0", "/device:CPU:0", "no-device")
    assert "does not exist here (devices: /device:CPU:0, /device:CPU:1)" in message


def test_tf_device_inside_a_jit_compiled_function_is_xla(scenarios):
    assert {"Mul", "AddV2"} <= set(scenarios["xla_nodes"])
    explained = {op: (requested, device, reason) for op, kind, requested, device, reason in scenarios["xla"]}
    assert explained["Mul"] == ("/device:CPU:1", "/device:CPU:0", "xla")
    assert explained["AddV2"] == ("/device:CPU:1", "/device:CPU:0", "xla")


def test_gpu_readiness_names_int32_matmul_and_string_join_from_the_shipped_table(scenarios):
    readiness = {entry["op"]: entry for entry in scenarios["readiness"]}
    matmul = readiness["MatMul"]
    assert matmul["dtypes"] == [["T", "int32"]]
    [[attr, allowed]] = matmul["gpu_dtypes"]
    assert attr == "T" and {"float16", "float32", "float64", "bfloat16"} <= set(allowed) and "int32" not in allowed
    assert "T=int32" in matmul["message"] and "float32" in matmul["message"]
    assert matmul["sources"] == [scenarios["lines"]["# int32 matmul"]]
    join = readiness["StringJoin"]
    assert join["gpu_dtypes"] == [] and "no GPU kernel for any dtype" in join["message"]
    assert join["sources"] == [scenarios["lines"]["# strings"]]
    assert [e["dtypes"] for e in scenarios["readiness"] if e["op"] == "MatMul"] == [[["T", "int32"]]], \
        "float32 MatMul has a GPU kernel: not in the readiness list"
    assert sorted(scenarios["records_typed"]) == [["MatMul", [["T", "float32"]]], ["MatMul", [["T", "int32"]]]]


def test_dense_layer_traced_in_a_sources_capture_has_the_users_line(scenarios):
    [[kind, name, source, requested, dtypes]] = [row for row in scenarios["dense"] if row[0] == "place"]
    assert source == scenarios["lines"]["# the layer's call"]
    assert dtypes == [["T", "float32"]] and name.endswith("MatMul")
    assert scenarios["plain_sources"] == [""], "a capture without sources=True keeps no lines"


def test_function_nodes_carry_the_requested_device_and_their_line(scenarios):
    rows = {op: rest for op, *rest in scenarios["placed"]}
    assert rows["Mul"] == ["/device:CPU:1", "/device:CPU:1", scenarios["lines"]["# asked for CPU:1"],
                           [["T", "float32"]]]
    assert rows["AddV2"][0] == "" and rows["AddV2"][3] == [["T", "float32"]]


def test_dataset_function_nodes_traced_in_a_sources_capture_have_lines(scenarios):
    assert scenarios["dataset"] == [["Mul", scenarios["lines"]["# the map function"], [["T", "int64"]]]]


def test_failed_ops_carry_their_dtypes(scenarios):
    assert scenarios["failed"] == [["MatMul", [["T", "float32"]]], ["Cast", [["DstT", "float32"], ["SrcT", "string"]]]]


def test_device_guard_error_says_why(scenarios):
    message = scenarios["guard"]
    assert message.startswith("AssignAddVariableOp ran on /device:CPU:0")
    assert "Why it ran there: colocated:" in message and "lives on /device:CPU:0" in message


# The explainer as a pure function over a device inventory and a kernel table.

def _table():
    from tfplace.placement.ops import _kernel_table
    return _kernel_table.shipped()


GPU_MACHINE = ("/device:CPU:0", "/device:GPU:0")


def test_pure_no_kernel_for_int32_matmul_asked_on_a_gpu():
    from tfplace.placement.shown import _explain
    from tfplace.placement.records._records import PlacementRecord
    record = PlacementRecord("MatMul", "", "/device:CPU:0", "execute", requested="/device:GPU:0",
                             dtypes=(("T", "int32"),))
    [found] = _explain.explain([record], devices=GPU_MACHINE, table=_table())
    assert found.reason == "no-kernel" and found.record is record
    assert "no GPU kernel for T=int32" in found.message and "float32" in found.message
    assert "int32," not in found.message.split("exist for")[1]


def test_pure_host_memory_for_an_int32_shape_tensor():
    from tfplace.placement.shown import _explain
    from tfplace.placement.records._records import PlacementRecord
    record = PlacementRecord("Shape", "model/Shape", "/device:CPU:0", "place", requested="/device:GPU:0",
                             dtypes=(("T", "float32"), ("out_type", "int32")))
    [found] = _explain.explain([record], devices=GPU_MACHINE, table=_table())
    assert found.reason == "host-memory" and "int32" in found.message and "model/Shape" in found.message


def test_pure_cpu_op_with_a_gpu_visible_and_nothing_asked():
    from tfplace.placement.shown import _explain
    from tfplace.placement.records._records import PlacementRecord
    join = PlacementRecord("StringJoin", "", "/device:CPU:0", "execute", dtypes=())
    matmul = PlacementRecord("MatMul", "", "/device:CPU:0", "execute", dtypes=(("T", "float32"),))
    on_gpu = PlacementRecord("MatMul", "", "/device:GPU:0", "execute", dtypes=(("T", "float32"),))
    found = _explain.explain([join, matmul, on_gpu], devices=GPU_MACHINE, table=_table())
    assert [(e.record.op, e.reason) for e in found] == [("StringJoin", "no-kernel"), ("MatMul", "unknown")]
    assert _explain.explain([join], devices=("/device:CPU:0",), table=_table()) == [], "no GPU visible: nothing to say"


def test_pure_records_where_asked_or_removed_are_not_explained():
    from tfplace.placement.shown import _explain
    from tfplace.placement.records._records import PlacementRecord
    records = [PlacementRecord("MatMul", "", "/device:CPU:1", "execute", requested="/device:CPU:1"),
               PlacementRecord("Const", "c", "", "removed", requested="/device:GPU:0"),
               PlacementRecord("_Arg", "x", "/device:CPU:0", "place", requested="/device:GPU:0")]
    assert _explain.explain(records, devices=GPU_MACHINE, table=_table()) == []


def test_shipped_table_from_another_tensorflow_version_is_said(tmp_path):
    from tfplace.placement.ops import _kernel_table
    with gzip.open(_kernel_table.table_path(), "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    data["tensorflow_version"] = "2.0.0"
    path = tmp_path / "old.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump(data, handle)
    with pytest.warns(RuntimeWarning, match=r"made from TensorFlow 2\.0\.0's CUDA build, but this is TensorFlow"):
        table = _kernel_table.gpu_table(str(path))
    assert "gpu_kernel_table.py --tensorflow-version" in table.mismatch
    assert table.supports("MatMul", "GPU", (("T", "float32"),))


def test_a_file_that_is_not_a_kernel_table_is_refused_naming_it(tmp_path):
    from tfplace.placement.ops import _kernel_table
    path = tmp_path / "bad.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump({"format": "something else"}, handle)
    with pytest.raises(ValueError,
                       match=r"bad\.json\.gz has format 'something else': expected 'tfplace-gpu-kernels/1'"):
        _kernel_table.shipped(str(path))
    (tmp_path / "plain.json.gz").write_text("not gzip")
    with pytest.raises(ValueError, match=r"plain\.json\.gz could not be read"):
        _kernel_table.shipped(str(tmp_path / "plain.json.gz"))


TRACED = """\
import tensorflow as tf

v = tf.Variable(1.0)
with tf.device("CPU:1"):
    v.assign_add(1.0)
a = tf.ones((2, 2), tf.int32)
b = tf.matmul(a, a)
print("result", int(b[0, 0]))
"""


def test_trace_names_the_lines_of_a_colocated_assign_and_an_int32_matmul(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(TRACED, encoding="utf-8")
    out = tmp_path / "trace.json"
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "--logical_cpus=2", f"--json={out}", str(script)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=240,
                          env={k: v for k, v in os.environ.items() if not k.startswith("TFPLACE_")})
    assert done.returncode == 0, done.stderr[-3000:]
    text = done.stdout
    asked = text.split("not where asked, and why (by source line):\n", 1)[1].split("\nops on the CPU", 1)[0]
    assert asked.startswith("  script.py:5  AssignAddVariableOp x1: colocated: ")
    readiness = text.split("GPU readiness: ", 1)[1]
    assert "  MatMul T=int32 at script.py:7: MatMul has no GPU kernel for T=int32" in readiness
    data = json.loads(out.read_text())
    assert [e["reason"] for e in data["explanations"] if e["record"]["op"] == "AssignAddVariableOp"] == ["colocated"]
    assert [(r["op"], r["sources"]) for r in data["gpu_readiness"]] == [("MatMul", ["script.py:7"])]
    assert "CUDA build" in data["gpu_readiness_source"]


def test_readiness_of_string_ops_advises_no_cast(python):
    messages = python("""
        from tfplace.placement.shown._explain import gpu_readiness
        from tfplace.placement.ops._kernel_table import gpu_table
        from tfplace.placement.records._records import PlacementRecord
        records = [PlacementRecord("Reshape", "", "/device:CPU:0", "execute",
                                   dtypes=(("T", "string"), ("Tshape", "int32"))),
                   PlacementRecord("MatMul", "", "/device:CPU:0", "execute", dtypes=(("T", "int32"),))]
        report({entry.op: entry.message for entry in gpu_readiness(records, gpu_table())})
    """)
    assert "no cast turns them into numbers" in messages["Reshape"] and "cast its inputs" not in messages["Reshape"]
    assert messages["MatMul"].endswith("cast its inputs to one of those dtypes to run it on GPU.")
