"""Seeing placement: records of where each op ran, why, and guards over them.

* `_session`: the capture session, the one owner of the state open captures and guards share
  (hooks, patches, graph collection, caches), and the record of what TensorFlow did that outlives it.
* `_records`, `_log`, `_log_json`, `_assertions`, `_parsing`: the records, `PlacementLog` (the recorder),
  its JSON, its assertions, and the reader of a saved TensorFlow log.
* `_hooks`, `_callback`, `_eager`, `_events`, `_failures`: eager ops through an op callback (installed,
  run, described, told to listeners, failed); `_graphs`, `_lowering`, `_instantiation`, `_placer_graph`, `_placed`,
  `_pipelines`, `_datasets`:
  the nodes of the functions TensorFlow places (graph collection, rebuilt as the placer saw them, on the
  devices they ran on, tf.data functions and the datasets behind them).
* `_sources`, `_function_sources`: the user's line behind each op and node.
* `_kernels`, `_kernel_table`, `_explain`: op definitions and kernels; why an op ran where it did.
* `_capture`, `_guards`: `capture_placement()`, the guards; `_report`, `_display`: the rows every report
  shows (grouped once), the text and notebook views.

Every read of TensorFlow's state goes through `tfplace._tensorflow`. Nothing here is imported by
`import tfplace`; the public names are re-exported there.
"""
