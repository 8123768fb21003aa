"""Steps: where a training step's time goes, and what to change.

`_find` (the steps of a block, found without annotation), `_phases` (each step's time split into phases, devices'
busy time), `_input` (the input pipeline's slowest stage and its line), `_rules` (the advice), `_memory_advice`
(the `memory-growth` advice from a memory capture's growth), `_model` (`Steps`, `Step`, `InputStage`, `Advice`),
`_analysis` (all of it for a log, from its records and its profile, the model of `tfplace.placement.profile`).

Imports: `tfplace._names`, `tfplace.placement.profile`, `tfplace.placement.records`, `tfplace.placement.session`.
"""
