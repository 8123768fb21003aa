"""What this machine has for TensorFlow, read without importing TensorFlow: its GPUs and NVIDIA driver
(`_gpus`), the CUDA libraries a TensorFlow build loads and where the loader finds them (`_libraries`, with
`_elf` and the loading child `_load_child`), how CUDA numbers its versions and sonames (`_cuda`), those
facts as declared records (`_records`: `MachineFacts`, the `tfplace-machine/1` format) read one getter per
fact (`_facts`), TensorFlow's own view read in a child process (`_view`), the rules that explain them
(`_verdict`, `_diagnosis`), TensorFlow's releases and how each installs its GPU build (`_releases`, for the
fixes), and the doctor with its warning where users already are (`_doctor`). `config`, `_devices`, the
command line and the integrations import it.

Example:
    >>> from tfplace.machine._gpus import map_cuda_visible, GpuInfo
    >>> [g.name for g in map_cuda_visible([GpuInfo(0, "A", 1), GpuInfo(1, "B", 1)], "1")]
    ['B']

Imports: `tfplace._errors`, `tfplace._files`.
"""
