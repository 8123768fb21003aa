"""How TensorFlow's placement inside functions is reconstructed, node for node as its placer logged it.

`_graphs` (graph collection, per call), `_collected` (what collected graphs say: `Placed`, `Later`),
`_instantiation`, `_lowering` and `_placer_graph` (the graph the placer saw), `_placed` (each node on the device
it ran on), `_transfers` (partitions' `_Send`s), `_calls` (what each later call runs), `_kept_calls` (functions
placed on their own), `_pipelines` and `_datasets` (tf.data functions and the datasets behind them),
`_dtensor` and `_instances` (DTensor's per-device functions), `_function_sources` (each node's user line).

Imports: `tfplace._devices`, `tfplace._tensorflow`, `tfplace.placement.ops`, `tfplace.placement.records`,
`tfplace.placement.session`.
"""
