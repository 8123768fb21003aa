"""What a program holds and calls: `PlacementLog`, `capture_placement()`, the guards.

`_log` (`PlacementLog`: the records with queries, assertions and views),
`_assertions` (the device comparisons they make), `_capture` (`capture_placement()`), `_guards`
(`transfer_guard()`, `device_guard()`).

Imports: `tfplace._contained`, `tfplace._devices`, `tfplace._errors`, `tfplace._names`, `tfplace._tensorflow`,
`tfplace.placement.functions`, `tfplace.placement.ops`, `tfplace.placement.profile`, `tfplace.placement.records`,
`tfplace.placement.session`, `tfplace.placement.shown`, `tfplace.placement.steps`, `tfplace.placement.taking`.
"""
