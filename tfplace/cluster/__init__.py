"""Clusters: TensorFlow's distributed engines (MultiWorkerMirroredStrategy, ParameterServerStrategy,
DTensor) seen as truly as one process.

* `_names`: how a cluster's tasks and devices are named.
* `_variables`: the variables a task makes on other tasks.
* `_checks`: what each task publishes while it runs and the comparisons that stop a broken cluster;
  `_guard`: `tfplace.cluster_guard()`, the same checks in a task started any way.
* `_collectives`: the `"cluster"` entry of a task's trace (its collective groups, variables, remote reads).
* `_merge`, `_report`: one JSON and one report for the traces of a cluster's tasks; `_trace_text`: one task's
  trace JSON turned into its own sections of that report.

Starting a cluster (`tfplace launch`) and its servers is the command line's (`tfplace.cli`).

Imports: `tfplace._devices`, `tfplace._errors`, `tfplace._names`, `tfplace._tensorflow`, `tfplace.placement`.
"""
