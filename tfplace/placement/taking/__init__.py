"""How records are taken: the op callback, its hooks and patches, and what they see.

`_hooks` installs an op callback per thread and patches TensorFlow while anything
listens; `_callback` turns each eager op into records, `_eager` describes it, `_function_calls` takes what a
function call, an iterator or a DTensor op placed, ran and moved; `_events` says what listeners hear;
`_failures` records ops that raised; `_sessions` records tf.compat.v1 Sessions' graphs and runs; `_memory` is
the census of tensors per device (`_memory_places`: what tells the allocators' events their lines; `_live`:
the tensors alive now); `_host_reads` marks the user's reads of tensor values in the profile
(`tfplace.placement.profile` runs the profiler and reads it).

Imports: `tfplace._contained`, `tfplace._devices`, `tfplace._names`, `tfplace._tensorflow`,
`tfplace.placement.functions`, `tfplace.placement.ops`, `tfplace.placement.profile`, `tfplace.placement.records`,
`tfplace.placement.session`.
"""
