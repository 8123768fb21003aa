"""Seeing placement: records of where each op ran, why, and guards over them.

Nine parts in layers, each importing only those below it (`python scripts/layers.py` draws them):

* `api`: what a program holds and calls: `PlacementLog` (queries, assertions, views), `capture_placement()`,
  the guards.
* `taking`: how records are taken: the op callback and its hooks, eager ops, function calls, failed ops,
  tf.compat.v1 Sessions, the memory census, the user's reads of device results.
* `functions`: how TensorFlow's placement inside functions is reconstructed: graph collection, the
  placer's graph (instantiation, lowering), devices after Grappler, partitions and transfers, tf.data
  pipelines, DTensor, the user's line of each node.
* `shown`: how records are shown: the rows every report shows, the text and notebook views, explanations,
  timelines.
* `steps`: where a training step's time goes: steps found without annotation, their phases, the input
  pipeline's slowest stage, the advice.
* `records`: what a record is and what records alone say: records, the recorder a capture writes, origins,
  groups, cost, JSON, TensorFlow's own log text, memory figures.
* `profile`: TensorFlow's profile read once into typed data: the profiler session, an XSpace's planes, the
  model steps, costs, timelines and memory read.
* `ops`: TensorFlow's ops: definitions, kernels and host memory, the CUDA build's kernel table.
* `session`: the capture session (the one owner of the state captures and guards share) and the user's
  frame behind each op.

Nothing here is imported by `import tfplace`; the public names are re-exported there.

Imports: `tfplace._contained`, `tfplace._devices`, `tfplace._errors`, `tfplace._files`, `tfplace._names`,
`tfplace._tensorflow`.
"""
