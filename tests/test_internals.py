"""The TensorFlow internals that capture_placement() relies on (BUILD.md, "TensorFlow internals").

If a TensorFlow upgrade removes or changes one, this test says which, before users meet it.
"""

import importlib

import pytest

INTERNALS = [
    ("tensorflow.python.framework.op_callbacks", "add_op_callback", "eager ops: the op callback"),
    ("tensorflow.python.eager.context", "Context.remove_op_callback", "eager ops: removing the op callback"),
    ("tensorflow.python.eager.context", "Context.op_callbacks", "eager ops: the thread's callbacks"),
    ("tensorflow.python.eager.execute", "execute_with_callbacks", "eager ops: the callback path other threads keep"),
    ("tensorflow.python.eager.execute", "quick_execute", "eager ops: the fast path restored after the last capture"),
    ("tensorflow.python.eager.context", "Context.enable_graph_collection", "functions: graph collection"),
    ("tensorflow.python.eager.context", "Context.disable_graph_collection", "functions: graph collection"),
    ("tensorflow.python.eager.context", "Context.export_run_metadata", "functions: placed graphs"),
    ("tensorflow.python.framework.kernels", "get_registered_kernels_for_op", "copies: host-memory arguments"),
    ("tensorflow.python.framework.op_def_registry", "get", "op types of kernel variants"),
    ("tensorflow.python.util._pywrap_util_port", "IsMklEnabled", "tfplace env: whether oneDNN is on"),
    ("tensorflow.python.ops.summary_ops_v2", "_current_trace_context", "functions: TensorBoard's graph trace"),
    ("tensorflow.python.eager.context", "Context.get_function_def", "functions: tf.data and XLA function bodies"),
    ("tensorflow.python.eager.core", "_status_to_exception", "failed records: every eager op error passes here"),
    ("tensorflow.python.ops.script_ops", "FuncRegistry.__call__", "threads: tf.py_function on TensorFlow's threads"),
    ("tensorflow.python.data.ops.dataset_ops", "DatasetV2._functions", "tf.data functions of an iterator's dataset"),
    ("tensorflow.python.data.ops.dataset_ops", "DatasetV2._inputs", "tf.data functions of an iterator's dataset"),
    ("tensorflow.python.framework.ops", "_EagerTensorBase.backing_device", "copies: where a tensor's memory is"),
    ("tensorflow.python.data.ops.dataset_ops", "DatasetV2.options", "tf.data: whether the graph rewrites run"),
    ("tensorflow.python.eager.polymorphic_function.concrete_function", "ConcreteFunction",
     "tf.data: a MultiDeviceIterator's per-device generator functions"),
    ("tensorflow.python.eager.context", "Context._set_device",
     "requested devices: every tf.device scope of a thread (mirrored while a capture listens)"),
    ("tensorflow.python.eager.polymorphic_function.atomic_function", "from_func_graph",
     "sources: every traced function passes here (wrapped while a sources capture is open)"),
    ("tensorflow.python.framework.ops", "Operation.traceback", "sources: the stack that created a graph op"),
    ("tensorflow.python.framework.kernels", "get_all_registered_kernels", "scripts/gpu_kernel_table.py: the CUDA build's kernels"),
]


@pytest.mark.parametrize("module, name, use", INTERNALS, ids=[f"{m.rsplit('.', 1)[1]}.{n}" for m, n, _ in INTERNALS])
def test_internal_is_still_there(module, name, use):
    found = importlib.import_module(module)
    missing = object()
    for part in name.split("."):
        found = getattr(found, part, missing)
        if found is missing:
            pytest.fail(f"TensorFlow no longer has {module}.{name}, which tfplace uses for {use}: "
                        "see BUILD.md, 'TensorFlow internals', and adapt tfplace/placement/_hooks.py, graphs.py or kernels.py")


def test_internals_still_behave_as_relied_on(python):
    out = python("""
        import tensorflow as tf
        from tensorflow.python.eager import context
        from tensorflow.python.framework import kernels, op_callbacks
        seen = []
        def callback(op_type, inputs, attrs, outputs, op_name=None, graph=None):
            if graph is None:
                seen.append([op_type if isinstance(op_type, str) else op_type.decode(), outputs[0].device])
        x = tf.ones((2, 2))
        op_callbacks.add_op_callback(callback)
        context.context().enable_graph_collection()
        tf.function(lambda a: tf.matmul(a, a))(x)
        metadata = context.context().export_run_metadata()
        context.context().disable_graph_collection()
        op_callbacks.remove_op_callback(callback)
        nodes = [n.op for f in metadata.function_graphs for n in f.post_optimization_graph.node]
        fill = [list(k.host_memory_arg) for k in kernels.get_registered_kernels_for_op("Fill").kernel
                if k.device_type == "CPU"]
        report({"seen": seen, "nodes": nodes, "fill": fill[0]})
    """)
    (op, device), = out["seen"]
    assert op.startswith("__inference_") and device.endswith("/device:CPU:0"), out
    assert "MatMul" in out["nodes"] or "_MklMatMul" in out["nodes"], out
    assert out["fill"] == ["dims"], out


def test_datasets_keep_their_variant_tensor_where_tfplace_looks(python):
    out = python("""
        import tensorflow as tf
        ds = tf.data.Dataset.range(3).map(lambda x: x + 1)
        report({"attr": ds.__dict__.get("_variant_tensor_attr") is ds._variant_tensor,
                "functions": len(ds._functions()), "inputs": len(ds._inputs())})
    """)
    assert out == {"attr": True, "functions": 1, "inputs": 1}
