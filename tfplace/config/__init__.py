"""Setting placement: what `tfplace.configure()` applies, and how it is decided.

* `_settings`: each setting declared once (type, allowed values, environment variables, flag,
  help, fixed at runtime start or not); choosing a value from environment < flags < arguments.
* `_gpu_plan`: pure planning of the GPU settings over a device inventory (read by `tfplace.machine._gpus`).
* `_configure`: `configure()` and `Config`; it applies through `tfplace._tensorflow`.

Nothing here is imported by `import tfplace`; the public names are re-exported there.

Imports: `tfplace._errors`, `tfplace._tensorflow`, `tfplace.machine`.
"""
