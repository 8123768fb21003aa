"""Clusters: TensorFlow's distributed engines (MultiWorkerMirroredStrategy, ParameterServerStrategy,
DTensor) seen as truly as one process.

* `_names`: which task of a cluster this process is, and the full device names it gives records.
* `_collectives`: the collective groups and parameter-server variables of a task's trace.
* `_checks`: what each task publishes while it runs and the comparisons that stop a broken cluster;
  `_guard`: `tfplace.cluster_guard()`, the same checks in a task started any way.
* `_launch`: `tfplace launch`, a cluster on 127.0.0.1 (`_server`: a ps or worker task's server).
* `_merge`: `tfplace merge`, one report and one JSON for the traces of a cluster's tasks.
"""
