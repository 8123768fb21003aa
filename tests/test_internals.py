"""The TensorFlow internals tfplace relies on (BUILD.md, "TensorFlow internals"), all reached
through `tfplace/_tensorflow/`.

If a TensorFlow upgrade removes or changes one, these tests say which, before users meet it;
and they fail when a module outside `tfplace/_tensorflow/` reaches into TensorFlow, or when
that package uses an internal that is not listed here.
"""

import ast
import importlib

import pytest

from conftest import ROOT

from tfplace import _tensorflow

# (module, attribute path, what it is for); "()" in a path calls what comes before it.
INTERNALS = [
    ("tensorflow.python.framework.op_callbacks", "add_op_callback", "eager ops: the op callback"),
    ("tensorflow.python.eager.context", "context().remove_op_callback", "eager ops: removing the op callback"),
    ("tensorflow.python.eager.context", "context().op_callbacks", "eager ops: the thread's callbacks"),
    ("tensorflow.python.eager.execute", "execute", "eager ops: the execute path, replaced while hooks listen"),
    ("tensorflow.python.eager.execute", "execute_with_callbacks", "eager ops: the callback path other threads keep"),
    ("tensorflow.python.eager.execute", "quick_execute", "eager ops: the fast path restored after the last capture"),
    ("tensorflow.python.eager.context", "context()._context_handle", "configure: whether the runtime has started"),
    ("tensorflow.python.eager.context", "context().log_device_placement", "configure: placement logging in force"),
    ("tensorflow.python.eager.context", "context().device_name", "requested devices: the thread's tf.device scope"),
    ("tensorflow.python.eager.context", "context()._thread_local_data.device_name",
     "requested devices: the scope read without a call into TensorFlow"),
    ("tensorflow.python.eager.context", "context().enable_graph_collection", "functions: graph collection"),
    ("tensorflow.python.eager.context", "context().disable_graph_collection", "functions: graph collection"),
    ("tensorflow.python.eager.context", "context().export_run_metadata", "functions: placed graphs"),
    ("tensorflow.python.eager.context", "context().get_function_def", "functions: tf.data and XLA function bodies"),
    ("tensorflow.python.framework.kernels", "get_registered_kernels_for_op", "copies: host-memory arguments"),
    ("tensorflow.python.framework.op_def_registry", "get", "op types of kernel variants, argument names"),
    ("tensorflow.python.util._pywrap_util_port", "IsMklEnabled", "tfplace env: whether oneDNN is on"),
    ("tensorflow.python.ops.summary_ops_v2", "_current_trace_context", "functions: TensorBoard's graph trace"),
    ("tensorflow.python.eager.core", "_status_to_exception", "failed records: every eager op error passes here"),
    ("tensorflow.python.ops.script_ops", "FuncRegistry.__call__", "threads: tf.py_function on TensorFlow's threads"),
    ("tensorflow.python.client.session", "BaseSession._call_tf_sessionrun",
     "a tf.compat.v1.Session's runs: what a capture cannot record"),
    ("tensorflow.python.client.session", "BaseSession.run", "a tf.compat.v1.Session's runs: what each placed and ran"),
    ("tensorflow.python.client.session", "BaseSession._call_tf_sessionprun",
     "a tf.compat.v1.Session's partial runs: what a capture cannot record"),
    ("tensorflow.python.client.session", "BaseSession.__init__", "a tf.compat.v1.Session made: its first run places"),
    ("tensorflow.python.client.session", "BaseSession._Callable.__call__",
     "a tf.compat.v1.Session's callables made from options: what a capture cannot record"),
    ("tensorflow.python.data.ops.dataset_ops", "DatasetV2._functions", "tf.data functions of an iterator's dataset"),
    ("tensorflow.python.data.ops.dataset_ops", "DatasetV2._inputs", "tf.data functions of an iterator's dataset"),
    ("tensorflow.python.data.ops.map_op", "_MapDataset", "tf.data: the datasets map() makes"),
    ("tensorflow.python.data.ops.from_generator_op", "_GeneratorDataset",
     "tf.data: generator datasets, which tf.data's rewrites skip (its _init_func, _next_func, _finalize_func)"),
    ("tensorflow.python.data.ops.map_op", "_ParallelMapDataset", "tf.data: the datasets map() makes"),
    ("tensorflow.python.data.ops.cache_op", "CacheDataset",
     "tf.data: the dataset cache() makes, known by its class name"),
    ("tensorflow.python.data.ops.interleave_op", "_ParallelInterleaveDataset",
     "tf.data: interleave with num_parallel_calls, known by its class name"),
    ("tensorflow.python.data.experimental.ops.distribute", "_AutoShardDataset",
     "tf.data: auto-sharding rewrites its input's graph, known by its class name"),
    ("tensorflow.python.data.experimental.ops.prefetching_ops", "_CopyToDeviceDataset",
     "tf.data: prefetch_to_device's copy, whose input is iterated on its _source_device_string"),
    ("tensorflow.python.client.pywrap_tf_session", "TF_NewImportGraphDefOptions",
     "transfers: a placed graph imported for its static shapes, without a Python op per node"),
    ("tensorflow.python.client.pywrap_tf_session", "TF_ImportGraphDefOptionsAddReturnOutput",
     "transfers: static shapes"),
    ("tensorflow.python.client.pywrap_tf_session", "TF_GraphImportGraphDefWithResults", "transfers: static shapes"),
    ("tensorflow.python.client.pywrap_tf_session", "TF_ImportGraphDefResultsReturnOutputs", "transfers: static shapes"),
    ("tensorflow.python.client.pywrap_tf_session", "TF_DeleteImportGraphDefResults", "transfers: static shapes"),
    ("tensorflow.python.client.pywrap_tf_session", "TF_DeleteImportGraphDefOptions", "transfers: static shapes"),
    ("tensorflow.python.framework.c_api_util", "tf_buffer", "transfers: static shapes (the serialized graph)"),
    ("tensorflow.python.framework.ops", "Graph._create_op_from_tf_operation",
     "transfers: static shapes (a Python op for each wanted tensor's op alone)"),
    ("tensorflow.python.framework.ops", "EagerTensor._datatype_enum", "copies: an input's dtype, in the op callback"),
    ("tensorflow.python.framework.ops", "EagerTensor._num_elements", "memory: the size of each tensor a block makes"),
    ("tensorflow.python.framework.ops", "EagerTensor.backing_device", "copies: where a tensor's memory is"),
    ("tensorflow.python.distribute.coordinator.cluster_coordinator", "Closure.__init__",
     "steps: the user's line of a closure a ClusterCoordinator schedules, replaced while hooks listen"),
    ("tensorflow.python.distribute.coordinator.cluster_coordinator", "Closure",
     "steps: the closure a coordinator's thread runs, found from its execute_on frame"),
    ("tensorflow.python.eager.context", "context().host_address_space",
     "records: the host CPU's full name, where a conversion's Cast runs"),
    ("tensorflow.python.data.experimental.ops.data_service_ops", "_DataServiceDatasetV2",
     "records: a dataset read through the tf.data service, whose uncompress function every iterator instantiates"),
    ("tensorflow.python.data.experimental.ops.data_service_ops", "HashableElementSpec",
     "records: the key of the tf.data service's cache of uncompress functions"),
    ("tensorflow.python.data.experimental.ops.data_service_ops", "_get_uncompress_func",
     "records: the uncompress function of a tf.data service dataset (the module keeps it per element spec)"),
    ("tensorflow.python.framework.constant_op", "convert_to_eager_tensor",
     "records: the Cast TensorFlow's C++ runs converting a Python value, replaced while hooks listen"),
    ("tensorflow.python.autograph.pyct.transpiler", "_PythonFnFactory",
     "sources: the source map of a converted function, for a line autograph's code left unmapped"),
    ("tensorflow.python.framework.ops", "_EagerTensorBase._numpy",
     "steps: every read of an eager tensor's value in Python, replaced while a timed capture listens"),
    ("tensorflow.python.ops.resource_variable_ops", "BaseResourceVariable",
     "eager ops: the variables whose _dtype and _handle the eager fast path reads in C++ "
     "(watched while a capture listens)"),
    ("tensorflow.python.eager.execute", "execute_with_cancellation",
     "eager ops: function calls under a cancellation manager (ClusterCoordinator closures) reach no op callback"),
    ("tensorflow.python.eager.context", "Context.ensure_initialized",
     "functions: graph collection starts right after the runtime does (wrapped while collection waits for it)"),
    ("tensorflow.python.eager.context", "context().list_function_names",
     "DTensor: the names of the per-device functions DTensor registers"),
    ("tensorflow.dtensor.python.api", "fetch_layout", "DTensor: an input's layout, part of what a call runs"),
    ("tensorflow.dtensor.python.api", "_dtensor_singleton",
     "DTensor: the program's DTensor device, read only where the program made one"),
    ("tensorflow.dtensor.python.dtensor_device", "DTensorDevice._get_stats",
     "DTensor: whether an op ran eagerly on the host (eager_pure_optimization.hit) and on which device"),
    ("tensorflow.python.eager.context", "Context._set_device",
     "requested devices: every tf.device scope of a thread (mirrored while a capture listens)"),
    ("tensorflow.python.eager.polymorphic_function.atomic_function", "from_func_graph",
     "sources and explicit copies: every traced function passes here (wrapped while a capture or guard is open)"),
    ("tensorflow.python.framework.ops", "Operation.traceback", "sources: the stack that created a graph op"),
    ("tensorflow.python.framework.ops", "Operation._device_assignments",
     "requested_by: where the tf.device scopes in force when a graph op was made were entered"),
    ("tensorflow.python.framework.ops", "get_default_graph", "requested_by: the graph being traced"),
    ("tensorflow.python.framework.ops", "get_default_graph()._device_function_stack",
     "requested_by: the tf.device scopes of the graph being traced"),
    ("tensorflow.python.framework.ops", "get_default_graph()._device_function_stack.peek_traceable_objs",
     "requested_by: the innermost scope, whose location is set to the code that entered it"),
    ("tensorflow.python.framework.ops", "EagerTensor", "live_tensors: which objects are eager tensors"),
    ("tensorflow.python.util.tf_stack", "extract_stack",
     "requested_by: the stack while a function is traced, autograph's code mapped to the user's source"),
    ("tensorflow.tsl.profiler.protobuf.xplane_pb2", "XSpace", "timing: the profile TensorFlow's profiler writes"),
    ("tensorflow.python.framework.kernels", "get_all_registered_kernels",
     "scripts/gpu_kernel_table.py: the CUDA build's kernels"),
    ("tensorflow.python.eager.polymorphic_function.atomic_function", "AtomicFunction.call_flat",
     "clusters: each function call as it starts (the collective groups it joins)"),
    ("tensorflow.python.framework.function_def_to_graph", "function_def_to_graph",
     "clusters: a function's collective ops with their groups and shapes"),
    ("tensorflow.python.eager.context", "context().get_config_key_value",
     "cluster_guard: the coordination service's key-value store"),
    ("tensorflow.python.eager.context", "context().set_config_key_value", "cluster_guard: publishing a task's state"),
    ("tensorflow.python.eager.context", "context().delete_config_key_value", "cluster_guard: replacing it"),
    ("tensorflow.python.eager.context", "context()._server_def", "cluster names: the cluster a coordinator joined"),
    ("tensorflow.python.eager.context", "context()._collective_ops_server_def",
     "cluster names: the cluster a MultiWorkerMirroredStrategy task joined"),
]
# Attributes of objects rather than of modules, checked on real objects by the tests below.
OBJECT_INTERNALS = ["_variant_tensor_attr", "_init_func", "_next_func", "_finalize_func", "_shape_tuple",
                    "_cached_graph", "_server_def", "_collective_ops_server_def", "_dtype", "_handle",
                    "_source_device_string", "_c_graph", "_session"]
# Python's own private names `tfplace._tensorflow` uses (frames), and the tag it sets on an error it recorded.
PYTHON_INTERNALS = ["_getframe", "_tfplace_recorded", "_replace"]  # Python's own (`_replace`: a named tuple's, public)
STATE_PACKAGE = ROOT / "tfplace" / "_tensorflow"  # the one place: tfplace/_tensorflow/*.py


def _walk(module, path):
    found = importlib.import_module(module)
    for part in path.split("."):
        call = part.endswith("()")
        found = getattr(found, part[:-2] if call else part)
        found = found() if call else found
    return found


@pytest.mark.parametrize("module, name, use", INTERNALS, ids=[f"{m.rsplit('.', 1)[1]}.{n}" for m, n, _ in INTERNALS])
def test_internal_is_still_there(module, name, use):
    try:
        _walk(module, name)
    except (AttributeError, ImportError) as error:
        pytest.fail(f"TensorFlow no longer has {module}.{name} ({error}), which tfplace uses for {use}: "
                    "see BUILD.md, 'TensorFlow internals', and adapt tfplace/_tensorflow/")


def _chains(tree, aliases):
    """Each attribute path `tfplace._tensorflow` takes from an imported internal module, as (module, path)."""
    found = set()

    def path_of(node):
        if isinstance(node, ast.Name):
            return (aliases[node.id], "") if node.id in aliases else None
        if isinstance(node, ast.Call):
            inner = path_of(node.func)
            return inner and (inner[0], inner[1] + "()")
        if isinstance(node, ast.Attribute):
            inner = path_of(node.value)
            return inner and (inner[0], f"{inner[1]}.{node.attr}".lstrip("."))
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            found.add(path_of(node))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Patch":
            owner, name = node.args
            chain = path_of(owner)  # None for Python's own objects (threading.Thread)
            if chain:
                found.add((chain[0], f"{chain[1]}.{name.value}".lstrip(".")))
    return {chain for chain in found if chain}


def test_every_internal_used_is_listed_and_only_the_state_package_uses_any():
    def parts(path):
        return tuple(part.removesuffix("()") for part in path.split("."))

    listed = {(m, parts(n)) for m, n, _ in INTERNALS}
    known = {part.rstrip("()") for _, n, _ in INTERNALS for part in n.split(".")} | set(OBJECT_INTERNALS)
    known |= set(PYTHON_INTERNALS)
    known |= _tensorflow._data._READ_WHOLE  # dataset class names, checked by the test below
    own = {node.name for path in STATE_PACKAGE.glob("*.py") for node in ast.walk(ast.parse(path.read_text("utf-8")))
           if isinstance(node, (ast.FunctionDef, ast.ClassDef))} | {path.stem for path in STATE_PACKAGE.glob("*.py")}
    for state in sorted(STATE_PACKAGE.glob("*.py")):
        tree = ast.parse(state.read_text(encoding="utf-8"))
        aliases = {alias.asname or alias.name: f"{node.module}.{alias.name}" for node in ast.walk(tree)
                   if isinstance(node, ast.ImportFrom) and node.module.startswith("tensorflow.python")
                   for alias in node.names}
        unlisted = [c for c in _chains(tree, aliases)  # covered: one path starts the other
                    if not any(c[0] == m and min(len(n), len(parts(c[1]))) > 0
                               and parts(c[1])[:len(n)] == n[:len(parts(c[1]))] for m, n in listed)]
        assert not unlisted, f"{state.relative_to(ROOT)} uses internals missing from INTERNALS: {sorted(unlisted)}"
        private = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)} | {
            node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        private = {name for name in private
                   if name.startswith("_") and not name.startswith("__") and name.isidentifier()}
        assert private <= known | own, (f"private names in {state.relative_to(ROOT)} not listed: "
                                        f"{sorted(private - known - own)}")
    for path in sorted((ROOT / "tfplace").rglob("*.py")):
        if path.parent == STATE_PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            imported = [node.module or ""] if isinstance(node, ast.ImportFrom) else [
                a.name for a in node.names] if isinstance(node, ast.Import) else []
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            assert not any(m.startswith("tensorflow.python") for m in imported), (
                f"{where} imports a TensorFlow internal")
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "tf":
                assert node.attr not in ("config", "sysconfig"), f"{where} uses tf.{node.attr}: go through _tensorflow"


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


def test_datasets_keep_what_tfplace_reads_where_it_looks(python):
    out = python("""
        import tensorflow as tf
        from tfplace import _tensorflow
        ds = tf.data.Dataset.range(3).map(lambda x: x + 1)
        report({"attr": _tensorflow.variant_tensor_of(ds.__dict__) is ds._variant_tensor,
                "functions": len(_tensorflow.dataset_functions(ds)), "inputs": len(_tensorflow.dataset_inputs(ds)),
                "map": [_tensorflow.is_map_dataset(d) for d in (ds, ds.batch(2))],
                "generator": _tensorflow.is_generator_dataset(ds)})
    """)
    assert out == {"attr": True, "functions": 1, "inputs": 1, "map": [True, False], "generator": False}


def test_generator_datasets_keep_their_functions_where_tfplace_looks(python):
    out = python("""
        import tensorflow as tf
        from tensorflow.python.data.ops import from_generator_op
        from tfplace import _tensorflow
        made = []
        original = from_generator_op._GeneratorDataset.__init__
        def init(self, *args, **kwargs):
            original(self, *args, **kwargs)
            made.append(self)
        from_generator_op._GeneratorDataset.__init__ = init
        tf.data.Dataset.from_generator(lambda: iter([1]), output_signature=tf.TensorSpec((), tf.int32))
        report([_tensorflow.is_generator_dataset(d) for d in made])
    """)
    assert out == [True]


def test_a_copy_to_another_device_says_its_source_device_where_tfplace_looks(python):
    out = python("""
        import tensorflow as tf, tfplace
        from tfplace import _tensorflow
        tfplace.configure(logical_cpus=2)
        copied = tf.data.Dataset.range(2).apply(tf.data.experimental.prefetch_to_device("/CPU:1"))
        found = [_tensorflow.copied_from(d) for d in [copied] + _tensorflow.dataset_inputs(copied)]
        report([found, _tensorflow.copied_from(tf.data.Dataset.range(2))])
    """)
    assert out == [[None, "/cpu:0"], None]  # the prefetch over the copy; the copy, from CPU:0


def test_the_datasets_read_whole_are_named_as_tensorflow_names_them():
    """`reads_inputs_to_end` knows datasets by class name: each name is one a transformation makes."""
    import tensorflow as tf

    d = tf.data.Dataset.range(8)
    whole = [d.map(abs), d.map(abs, num_parallel_calls=2), d.batch(2), d.batch(2, num_parallel_calls=2),
             d.padded_batch(2), d.prefetch(1), d.shuffle(4), d.cache(), d.with_options(tf.data.Options()),
             d.filter(lambda x: True), d.batch(2).unbatch(), d.repeat(2), d.shard(2, 0), d.skip(1),
             d.concatenate(d), d.flat_map(tf.data.Dataset.from_tensors), d.interleave(tf.data.Dataset.from_tensors),
             d.interleave(tf.data.Dataset.from_tensors, num_parallel_calls=2), d.scan(0, lambda s, x: (s, x)),
             d.window(2), d.batch(4).rebatch(2), d.ignore_errors(), d.unique(),
             d.apply(tf.data.experimental.assert_cardinality(8)),
             d.group_by_window(lambda x: x % 2, lambda k, w: w.batch(2), 2)]
    assert [type(ds).__name__ for ds in whole if not _tensorflow.reads_inputs_to_end(ds)] == []
    early = [d.take(2), d.take_while(lambda x: x < 3), tf.data.Dataset.zip((d, d)),
             tf.data.Dataset.sample_from_datasets([d, d]), d]
    assert [type(ds).__name__ for ds in early if _tensorflow.reads_inputs_to_end(ds)] == []
    # Every name is one of these, or the auto-shard dataset (INTERNALS checks that its class is there).
    assert _tensorflow._data._READ_WHOLE - {type(ds).__name__ for ds in whole} == {"_AutoShardDataset"}


# What only `tfplace._tensorflow` may do: read frames' locals, walk the garbage collector, patch attributes.
_REACHING = {"f_locals": "reads a frame's locals", "__dict__": "reads an object's attribute dictionary",
             "get_referrers": "walks the garbage collector", "get_objects": "walks the garbage collector"}
_NAMED_TUPLE_API = {"_replace", "_asdict", "_fields", "_make"}


# what a machine has is read through its own C libraries (NVML, CUDA's), loaded with ctypes: not Python's internals
MACHINE_PACKAGE = ROOT / "tfplace" / "machine"


def _own_private_names():
    """Private attribute names tfplace's own classes define (`self._x = ...`, methods, class attributes)."""
    own = set()
    for path in (ROOT / "tfplace").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" \
                    and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.ClassDef):
                own |= {item.name for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}
                own |= {target.id for item in node.body if isinstance(item, (ast.Assign, ast.AnnAssign))
                        for target in (item.targets if isinstance(item, ast.Assign) else [item.target])
                        if isinstance(target, ast.Name)}
    return {name for name in own if name.startswith("_")}


def test_only_the_state_module_reaches_into_frames_objects_and_the_garbage_collector():
    own = _own_private_names() | _NAMED_TUPLE_API
    found = []
    for path in sorted((ROOT / "tfplace").rglob("*.py")):
        if path.parent == STATE_PACKAGE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree)
                   if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute) and node.attr in _REACHING:
                found.append(f"{where} {_REACHING[node.attr]} (.{node.attr})")
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and node.attr not in own and not (isinstance(node.value, ast.Name) and node.value.id in modules):
                found.append(f"{where} reads another library's private attribute .{node.attr}")
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "Patch":
                found.append(f"{where} patches an attribute (Patch belongs in tfplace._tensorflow)")
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                    name in ("gc", "ctypes") and not (name == "ctypes" and path.parent == MACHINE_PACKAGE)
                    for name in ([a.name for a in node.names] if isinstance(node, ast.Import)
                                 else [node.module or ""])):
                found.append(f"{where} imports gc or ctypes")
    assert not found, "TensorFlow and Python internals outside tfplace/_tensorflow/:\n" + "\n".join(found)


_MUTABLE_CALLS = ("dict", "list", "set", "local", "Lock", "RLock", "Counter", "WeakSet", "WeakKeyDictionary",
                  "WeakValueDictionary", "defaultdict", "deque", "OrderedDict")


def test_capture_state_lives_in_the_session_alone():
    """No module of tfplace/placement/ but _session.py keeps mutable state: no module-level dict, list,
    set, lock or thread-local, and no `global` statement (caches by `functools.lru_cache` aside)."""
    found = []
    for path in sorted((ROOT / "tfplace" / "placement").glob("*.py")):
        if path.name == "_session.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            names = [ast.unparse(t) for t in (node.targets if isinstance(node, ast.Assign) else [node.target])] \
                if value is not None else []
            if value is None or names == ["__all__"]:
                continue
            called = ast.unparse(value.func).rpartition(".")[2] if isinstance(value, ast.Call) else ""
            if isinstance(value, (ast.Dict, ast.List, ast.Set)) and not all(n.isupper() for n in names) \
                    or called in _MUTABLE_CALLS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {', '.join(names)} = {ast.unparse(value)[:40]}")
        found += [f"{path.relative_to(ROOT)}:{node.lineno} global {', '.join(node.names)}"
                  for node in ast.walk(tree) if isinstance(node, ast.Global)]
    assert not found, "module-level state outside tfplace/placement/session/_session.py:\n" + "\n".join(found)
