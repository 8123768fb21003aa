"""What a record is, and what records alone say.

`_records` (`PlacementRecord`, `CopyRecord`, kinds),
`_recorder` (what a capture writes a log through), `_origins` (who asked for an op and its device), `_groups`
(compute, framework, input, plumbing), `_cost` (time and bytes per device and transfer), `_log_json` (JSON),
`_parsing` (TensorFlow's own log text), `_memory_figures` (memory per device), `_memory_held`
(the allocators' events replayed: peaks, what was held, growth), `_oom` (TensorFlow's out-of-memory messages).

Imports: `tfplace._devices`, `tfplace._names`, `tfplace._tensorflow`, `tfplace.placement.ops`,
`tfplace.placement.profile`, `tfplace.placement.session`.
"""
