"""Everything tfplace reads from and writes to TensorFlow's runtime, public or internal, in one place:
this package (`_runtime`: `tf.config` and devices; `_eager`: the eager context, op callbacks, patches
and failed ops; `_graphs`: graph collection, op definitions and kernels; `_data`: `tf.data`;
`_profiler`: memory and the profiler).

Every other module goes through this package for `tf.config`, the eager context, op
callbacks, graph collection, the kernel registry, op definitions and the
`tf.data` internals; BUILD.md ("TensorFlow internals") lists each internal with
what it is for, and `tests/test_internals.py` checks that TensorFlow still has
every one (and that no other module reaches for them). Everything that decides
*what* to apply lives in pure modules (`tfplace.config._settings`,
`tfplace.config._gpu_plan`). Nothing here starts the runtime: before it starts,
the logical devices are predicted from the pending configuration.

Example:
    >>> from tfplace import _tensorflow
    >>> _tensorflow.logical_device_names()[0]
    '/device:CPU:0'
    >>> [a.name for a in _tensorflow.op_def("MatMul").input_arg]
    ['a', 'b']

Imports: `tfplace._contained` (its failures inside a program are contained, never raised into it).
"""

from __future__ import annotations

from tfplace._tensorflow._runtime import (
    runtime_started, gpu_count, physical_device_names, physical_devices, logical_device_names, build,
    set_log_placement, set_logical_cpus, set_soft_placement, set_device_policy, apply_gpus, log_placement,
    logical_cpus, soft_placement, device_policy, visible_gpus, memory_growth, memory_limits, logical_gpus, cluster_task,
    set_cpu_allocator, cpu_allocator)
from tfplace._tensorflow._eager import (
    device_name, thread_data, op_callbacks, add_op_callback, remove_op_callback, execute_with_callbacks,
    use_execute, Patch, STATUS_TO_EXCEPTION, SET_DEVICE, ENSURE_INITIALIZED, EXECUTE_CANCELLABLE, PY_FUNCTION_CALL,
    FROM_FUNC_GRAPH,
    SESSION_RUN, SESSION_PARTIAL_RUN, SESSION_PUBLIC_RUN, SESSION_INIT, SESSION_CALLABLE, HOST_READ, CONVERT_TO_EAGER,
    CAST_ON_CONVERSION, conversion_cast, host_cpu,
    callable_session, dtype_enum,
    device_scopes, traced_stack, locate_device_scope, strategy_name, THREAD_START, start_thread, watch_variable_reads,
    scope_step,
    recorded, mark_recorded, failed_op_dtypes, failed_op_argument)
from tfplace._tensorflow._graphs import (
    enable_graph_collection, disable_graph_collection, export_run_metadata, function_def, function_names,
    traced_parameters, autograph_origin, dtensor_layout,
    dtensor_stats, tensorboard_tracing, static_sizes, static_tensors, dtype_size, shape_tuple, eager_elements, op_def,
    registered_kernels)
from tfplace._tensorflow._data import (
    variant_tensor_of, dataset_functions, unreadable_functions, dataset_inputs, is_map_dataset, is_generator_dataset,
    is_cache_dataset,
    reads_inputs_to_end, rewrites_input_graph, is_parallel_interleave, dataset_of_variant, copied_from)
from tfplace._tensorflow._cluster import (
    CALL_FLAT, CLOSURE_INIT, running_closure, COLLECTIVE_OPS, Collective, collectives_in, call_name, call_definition,
    call_graph, store_set,
    store_get, VariableAccess, variable_accesses, served_here)
from tfplace._tensorflow._profiler import (
    reset_allocator_peak, allocator_figures, live_tensor_objects, variable_creator_scope, OutOfMemory,
    ProfilerBusy, ProfilerError, profiler_start, profiler_stop, read_xspaces, trace_me, collection_paused)

__all__ = [
    # runtime state and configuration (tf.config)
    "runtime_started", "gpu_count", "physical_device_names", "physical_devices", "logical_device_names",
    "build", "set_log_placement", "set_logical_cpus", "set_soft_placement", "set_device_policy", "apply_gpus",
    "log_placement", "logical_cpus", "soft_placement", "device_policy", "visible_gpus", "memory_growth",
    "memory_limits", "logical_gpus", "cluster_task", "set_cpu_allocator", "cpu_allocator",
    # the eager context and op callbacks
    "device_name", "thread_data", "op_callbacks", "add_op_callback", "remove_op_callback", "execute_with_callbacks",
    "use_execute", "Patch", "STATUS_TO_EXCEPTION", "SET_DEVICE", "ENSURE_INITIALIZED",
    "EXECUTE_CANCELLABLE", "PY_FUNCTION_CALL", "FROM_FUNC_GRAPH", "SESSION_RUN", "SESSION_PARTIAL_RUN",
    "SESSION_PUBLIC_RUN", "SESSION_INIT", "SESSION_CALLABLE",
    "HOST_READ", "CONVERT_TO_EAGER", "CAST_ON_CONVERSION", "conversion_cast", "host_cpu",
    "callable_session",
    "dtype_enum", "device_scopes", "traced_stack", "locate_device_scope", "strategy_name",
    # graph collection
    "enable_graph_collection", "disable_graph_collection", "export_run_metadata", "function_def", "function_names",
    "traced_parameters", "autograph_origin",
    "dtensor_layout", "dtensor_stats",
    "tensorboard_tracing", "static_sizes", "static_tensors", "dtype_size", "shape_tuple", "eager_elements",
    # op definitions and the kernel registry
    "op_def", "registered_kernels",
    # memory
    "reset_allocator_peak", "allocator_figures", "live_tensor_objects", "variable_creator_scope", "OutOfMemory",
    # the profiler
    "ProfilerBusy", "ProfilerError", "profiler_start", "profiler_stop", "read_xspaces", "trace_me",
    "collection_paused",
    # tf.data
    "variant_tensor_of", "dataset_functions", "unreadable_functions", "dataset_inputs", "is_map_dataset",
    "is_generator_dataset",
    "is_cache_dataset", "reads_inputs_to_end", "rewrites_input_graph", "is_parallel_interleave",
    # a cluster: collectives, function calls as they start, the coordination service's key-value store
    "CALL_FLAT", "CLOSURE_INIT", "running_closure", "COLLECTIVE_OPS", "Collective", "collectives_in", "call_name",
    "call_definition", "call_graph", "store_set",
    "store_get", "VariableAccess", "variable_accesses", "served_here",
    # Python's own machinery, where tfplace reaches into TensorFlow's frames, threads and objects
    "THREAD_START", "start_thread", "watch_variable_reads", "scope_step", "recorded", "mark_recorded",
    "failed_op_dtypes", "failed_op_argument", "dataset_of_variant", "copied_from",
]
