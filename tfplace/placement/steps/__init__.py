"""Steps: where a training step's time goes, and what to change.

`_events` (what a profile says about steps, read by `tfplace.placement.taking._profile`), `_find` (the steps
of a block, found without annotation), `_phases` (each step's time split into phases, devices' busy time),
`_input` (the input pipeline's slowest stage and its line), `_rules` (the advice), `_model` (`Steps`,
`Step`, `InputStage`, `Advice`), `_analysis` (all of it for a log).

Imports: `tfplace.placement.records`.
"""
