"""Where users already are: pytest, placement snapshots, notebooks.

`pytest_plugin` (fixtures, markers and placement snapshots for pytest, registered
as the `tfplace` plugin), `_snapshots` (the snapshot files), `_notebook` (`%load_ext tfplace`, the
`%%placement` cell magic).

Imports: `tfplace._devices`, `tfplace._errors`, `tfplace._tensorflow`, `tfplace.config`, `tfplace.machine`,
`tfplace.placement`.
"""
