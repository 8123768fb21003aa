"""The command line: `tfplace devices|env|doctor|trace|profile|launch|diff|merge`.

`_cli` parses and dispatches; `_arguments` reads arguments; `_script` runs a script as `python script.py`
runs it; `_trace` makes `tfplace trace`'s findings, report and JSON; `_diff` is `tfplace diff`;
`_environment` is `tfplace devices` and `tfplace env`; `_cluster` reads `tfplace launch` and `tfplace
merge`'s arguments; `_launch` starts a cluster on 127.0.0.1, `_task_output` prints its tasks' lines and
`_server` runs a ps or worker task's server.

Imports: `tfplace` (the front module), `tfplace._contained`, `tfplace._errors`, `tfplace._files`,
`tfplace._names`, `tfplace._tensorflow`, `tfplace.cluster`, `tfplace.config`, `tfplace.machine`, `tfplace.placement`.
"""
