"""TensorFlow's profile, read once into typed data that steps, costs, timelines, memory and reports share.

`_session` runs TensorFlow's profiler around a block (one session per process) and hands back its `XSpace`;
`_planes` resolves an XSpace plane's stats; `_xspace` reads an XSpace's host plane, and `_gpu_planes` each GPU's
plane, into the model; `_model` is that model (`Timing` and the records it holds: `OpRun`, `Move`, `CallRun`,
`Allocation`, per-device and per-op `OpTime`, per-direction `TransferTime`); `_step_events` holds the events that
tell steps (function calls, markers, get-next waits, tf.data stages, host reads, copies from host memory).

Imports: `tfplace._devices`, `tfplace._names`, `tfplace._tensorflow`, `tfplace.placement.ops`.
"""
