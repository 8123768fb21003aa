"""DTensor: ops and functions on DTensor's device recorded there, with the per-device functions
DTensor runs on the mesh's devices, their transfers, and its threads no reason for incompleteness.
(Each program runs in a fresh process: two logical CPUs must be set before the runtime starts.)"""

from __future__ import annotations

import pytest
from tensorflow.core.framework import graph_pb2

from conftest import result_of, run_python
from tfplace.placement.functions import _instances

placement = pytest.mark.placement

_D0 = "/job:localhost/replica:0/task:0/device:CPU:0"
_D1 = "/job:localhost/replica:0/task:0/device:CPU:1"

MESH = """
    import tensorflow as tf, tfplace
    from tensorflow.experimental import dtensor
    tfplace.configure(logical_cpus=2)
    mesh = dtensor.create_mesh([("batch", 2)], devices=["CPU:0", "CPU:1"])
    replicated = dtensor.Layout.replicated(mesh, rank=2)
    sharded = dtensor.Layout.batch_sharded(mesh, "batch", rank=2)
    def rows(log):
        return [[r.kind, r.op, r.name, r.device] for r in log.records]
"""


def _entry(graphs: list[list[tuple[str, str, str]]], placed: list[list[tuple[str, str, str]]],
           partitions: list[list[tuple[str, str, str]]]):
    """A collected entry as TensorFlow's collection hands it: raw graph, placed graph, partitions."""
    class Entry:
        pre_optimization_graph = graph_pb2.GraphDef()
        post_optimization_graph = graph_pb2.GraphDef()
        partition_graphs: list = []

    entry = Entry()
    entry.pre_optimization_graph = graph_pb2.GraphDef()
    entry.post_optimization_graph = graph_pb2.GraphDef()
    entry.partition_graphs = []
    for name, op, device in [n for g in graphs for n in g]:
        entry.pre_optimization_graph.node.add(name=name, op=op, device=device)
    for name, op, device in [n for g in placed for n in g]:
        entry.post_optimization_graph.node.add(name=name, op=op, device=device)
    for nodes in partitions:
        partition = graph_pb2.GraphDef()
        for name, op, device in nodes:
            partition.node.add(name=name, op=op, device=device)
        entry.partition_graphs.append(partition)
    return entry


def _instance(device: str, with_id: bool = False) -> list[tuple[str, str, str]]:
    nodes = [("op_input_0", "_Arg", device), ("tf.StatefulPartitionedCall/eager_operation", "MatMul", device),
             ("op_output_0_RetVal", "_Retval", device)]
    return ([("device_id", "_Arg", _D0)] if with_id else []) + nodes


def test_merged_instances_are_taken_apart_one_per_device():
    raw = [("op_input_0", "_Arg", ""), ("tf.StatefulPartitionedCall", "StatefulPartitionedCall", ""),
           ("op_output_0_RetVal", "_Retval", "")]
    merged = _entry([raw, raw], [_instance(_D0, True), _instance(_D1, True)],
                    [_instance(_D0, True), [("device_id", "_Arg", _D0), ("x/_0", "_Send", _D0)],
                     _instance(_D1) + [("x/_1", "_Recv", _D1)]])
    found = _instances.split([merged])
    assert [i.device for i in found] == [_D0, _D1]
    assert [[n.name for n in i.pre_optimization_graph.node] for i in found] == [[n[0] for n in raw]] * 2
    assert [len(i.post_optimization_graph.node) for i in found] == [4, 4]
    # the CPU:1 instance has its device_id on CPU:0: both of its partitions, and only the full one for CPU:0
    assert [sorted(len(p.node) for p in i.partition_graphs) for i in found] == [[4], [2, 4]]


def test_an_instance_whose_raw_graph_went_into_another_entry_keeps_its_placed_graph():
    raw = [("op_input_0", "_Arg", ""), ("tf.StatefulPartitionedCall", "StatefulPartitionedCall", "")]
    first = _entry([raw, raw], [_instance(_D0)], [_instance(_D0)])
    second = _entry([], [_instance(_D1)], [_instance(_D1)])
    found = _instances.split([first, second])
    assert [i.device for i in found] == [_D0, _D1]
    assert all(len(i.pre_optimization_graph.node) == 2 for i in found)


@placement
def test_an_op_on_dtensors_device_records_the_per_device_functions_and_their_calls():
    done = run_python(MESH + """
    a = dtensor.call_with_layout(tf.ones, sharded, shape=(4, 3))
    b = tf.transpose(a)  # sharded on its second dimension: the product needs an all-gather
    with tfplace.capture_placement() as log:
        c = tf.matmul(a, b)
        c = tf.matmul(a, b)
    copies = [[c.from_device, c.to_device, c.bytes, c.function or c.op, c.kind, c.input_index, c.source]
              for c in log.copies]
    report({"rows": rows(log), "complete": log.complete, "reason": log.incomplete_reason, "copies": copies,
            "summary": {d: dict(ops) for d, ops in log.summary().items()}})
    """)
    got = result_of(done)
    rows = got["rows"]
    assert got["complete"], got["reason"]
    assert [r[3] for r in rows if r[0] == "execute" and r[1] == "MatMul"] == ["/device:CUSTOM:0"] * 2
    calls = [r for r in rows if r[0] == "execute" and "__func_" in r[1]]
    assert sorted(r[3] for r in calls) == ["/device:CPU:0", "/device:CPU:0", "/device:CPU:1", "/device:CPU:1"]
    assert all(r[1].startswith("MatMul__func_") for r in calls)
    # each device's function was placed once, with the MatMul of its shard
    placed = sorted(r[3] for r in rows if r[0] == "place" and r[1] == "MatMul")
    assert placed == ["/device:CPU:0", "/device:CPU:1"]
    # the device id DTensor keeps on the host moves to CPU:1 for that device's function, at every call
    moved = [c for c in got["copies"] if c[4] == "function"]
    assert moved and all(c[:2] == ["/device:CPU:0", "/device:CPU:1"] and c[3].startswith("MatMul__func_")
                         for c in moved)
    assert len(moved) % 2 == 0 and [c[:6] for c in moved[:len(moved) // 2]] == [c[:6] for c in moved[len(moved) // 2:]]
    # before each call, TensorFlow copies the CPU:1 function's device id (made on CPU:1) to the host, where
    # that function's argument is placed: the "warn" policy logs "MatMul__func_... input #0 was expected to be on
    # .../CPU:0 but is actually on .../CPU:1"
    arguments = [c for c in got["copies"] if c[4] == "eager"]
    assert [c[:2] + [c[2], c[5]] for c in arguments] == [["/device:CPU:1", "/device:CPU:0", 4, 0]] * 2
    assert all(c[3].startswith("MatMul__func_") for c in arguments)
    first, second = (int(c[6].rpartition(":")[2]) for c in arguments)
    assert second == first + 1  # each call's own line


@placement
def test_an_op_dtensor_runs_on_the_host_is_recorded_there():
    done = run_python(MESH + """
    with tfplace.capture_placement() as log:
        z = dtensor.call_with_layout(tf.zeros, replicated, shape=(3, 1))
    report({"rows": rows(log), "complete": log.complete})
    """)
    got = result_of(done)
    fills = [r for r in got["rows"] if r[1] == "Fill"]
    assert [r[3] for r in fills] == ["/device:CUSTOM:0", "/device:CPU:0"]
    assert not [r for r in got["rows"] if "__func_" in r[1]] and got["complete"]


@placement
def test_a_function_on_dtensors_device_is_recorded_on_every_mesh_device_and_complete():
    done = run_python(MESH + """
    w = dtensor.DVariable(dtensor.call_with_layout(tf.zeros, replicated, shape=(3, 1)))

    @tf.function
    def step(x):
        loss = tf.reduce_sum(tf.matmul(x, w))
        w.assign_sub(0.1 * tf.ones_like(w) * loss)
        return loss

    with tfplace.capture_placement() as log:
        for i in range(2):
            x = dtensor.pack([tf.ones((2, 3)), tf.ones((2, 3))], sharded)
            step(x)
    report({"rows": rows(log), "complete": log.complete, "reason": log.incomplete_reason,
            "report": [r.op for r in log.records if r.kind == "execute"]})
    """)
    got = result_of(done)
    assert got["complete"], got["reason"]
    steps = [r for r in got["rows"] if r[0] == "execute" and r[1].startswith("__inference_step_")]
    assert sorted(r[3] for r in steps) == ["/device:CPU:0"] * 2 + ["/device:CPU:1"] * 2 + ["/device:CUSTOM:0"] * 2
    assert {r[3] for r in got["rows"] if r[0] == "place" and r[1] == "MatMul"} == {"/device:CPU:0", "/device:CPU:1"}
