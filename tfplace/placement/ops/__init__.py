"""TensorFlow's ops: definitions, kernels, host memory, the CUDA build's kernel table.

`_kernels` (op definitions, kernel variants such as
oneDNN's `_MklMatMul`, type attributes, host-memory arguments), `_kernel_table` (the kernels of TensorFlow's
CUDA build, for what would still run on the CPU on a GPU machine).

Imports: `tfplace._tensorflow`, `tfplace.placement.session`.
"""
