"""The command line: `_cli` (`tfplace devices|env|doctor|trace|launch|diff|merge`), `_arguments` (how
arguments are read), `_script` (running a script as `python script.py` runs it), `_trace` (`tfplace trace`'s
findings, report and JSON), `_diff` (`tfplace diff`), `_environment` (`tfplace devices` and `tfplace env`),
`_cluster` (`tfplace launch` and `tfplace merge`'s arguments), `_launch` (a cluster on 127.0.0.1),
`_task_output` (its tasks' lines), `_server` (a ps or worker task's server).

Imports: `tfplace` (the front module), `tfplace._contained`, `tfplace._errors`, `tfplace._files`,
`tfplace._tensorflow`, `tfplace.cluster`, `tfplace.config`, `tfplace.machine`, `tfplace.placement`.
"""
