"""How records are shown: reports, views, explanations, timelines.

`_report` (the rows every report shows first, grouped once), `_display` (text
and notebook HTML views), `_explain` (why an op ran where it did; what would still run on the CPU on a GPU
machine), `_perfetto` (timelines for Perfetto and chrome://tracing), `_steps_view` (steps and advice in a report).

Imports: `tfplace._devices`, `tfplace._files`, `tfplace._names`, `tfplace.placement.ops`,
`tfplace.placement.profile`, `tfplace.placement.records`, `tfplace.placement.steps`.
"""
