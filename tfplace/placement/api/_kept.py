"""A profile already on disk, read as data: `read_profile(path) -> Profile` (`tfplace profile`).

Whoever wrote it (`tfplace trace --profile_dir`, the Keras TensorBoard callback's `profile_batch`,
`tf.profiler.experimental.start/stop`, JAX's `jax.profiler.trace`), the files are `XSpace`s in
`<logdir>/plugins/profile/<run>/<host>.xplane.pb`: `path` is one such file, a run's folder, or any folder above
(the latest run below it, as XProf opens it). The profile is read once into the typed model of
`tfplace.placement.profile` that captures read; without placement records, the user's lines are unknown and the
figures that need them say so.

Example:
    >>> import tensorflow as tf, tempfile, tfplace
    >>> folder = tempfile.mkdtemp()
    >>> tf.profiler.experimental.start(folder)
    >>> for i in range(4):
    ...     with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
    ...         _ = tf.matmul(tf.ones((64, 64)), tf.ones((64, 64)))
    >>> tf.profiler.experimental.stop()
    >>> profile = tfplace.read_profile(folder)
    >>> profile.steps().count, profile.steps().kind
    (4, 'marked')
"""

from __future__ import annotations

import os
from typing import Any

from tfplace import _tensorflow
from tfplace._errors import Error
from tfplace.placement.profile._model import Timing
from tfplace.placement.profile._session import profile_files
from tfplace.placement.records._memory_figures import DeviceMemory, Memory, allocator_peaks, by_line
from tfplace.placement.records._memory_held import Places, replay
from tfplace.placement.steps import _analysis
from tfplace.placement.steps._model import Steps
from tfplace.placement.taking._memory_places import coverage

__all__ = ["Profile", "ProfileError", "read_profile"]

NO_RECORDS = ("the user's lines: a kept profile has no placement records (node -> line); tfplace trace --timing "
              "gives them")


class ProfileError(Error, ValueError):
    """A path that holds no profile `tfplace.read_profile` can read."""


class Profile:
    """A kept profile read as data (`tfplace.read_profile`).

    Attributes:
      paths: the `*.xplane.pb` files read (one run's: one per host).
      timing: what they say, in the typed model a capture's profile is read into (its devices, ops, transfers,
        runs, calls, step events and allocator events).
    """

    def __init__(self, paths: tuple[str, ...], timing: Timing) -> None:
        self.paths, self.timing = paths, timing

    def steps(self) -> Steps:
        """The steps the profile marks (`tf.profiler.experimental.Trace("train", step_num=i)`, tf_keras' `fit`),
        else the calls of the function called most, with per-GPU figures, as `PlacementLog.steps()` gives them;
        `reason` says where a figure needs the user's lines."""
        found = _analysis.steps([], self.timing, "")
        if found.count and not found.source:
            return found._replace(reason=found.reason or NO_RECORDS)
        return found

    def memory(self) -> Memory:
        """Per allocator its own peak (the largest `bytes_allocated + bytes_reserved` of its events, as XProf's
        memory profile gives it), and per device its peak with what was there before the profile, what it held
        then by node (`at_peak`; no lines: a kept profile holds no placement records) and what was not seen."""
        allocations = self.timing.allocations
        if not allocations:
            return Memory({}, note="memory: the profile holds no allocator events (a CPU's default allocator "
                                   "writes few or none: TF_CPU_ALLOCATOR_USE_BFC=1 before TensorFlow starts)")
        calls = tuple((c.start_us, c.start_us + c.duration_us, c.function, "") for c in sorted(self.timing.calls))
        peaks = allocator_peaks(allocations)
        last = {a.allocator: a.bytes_allocated for a in allocations}
        devices: dict[str, DeviceMemory] = {}
        for device, held in replay(allocations, Places(calls=calls)).items():
            mine = [p for p in peaks if device in p.devices]
            devices[device] = DeviceMemory(
                held.peak_bytes, held.live_bytes, by_line(held.at_peak),
                sum(last[p.allocator] for p in mine), max((p.peak_bytes for p in mine), default=None), held.at_peak,
                held.growth, coverage(device, [p.allocator for p in peaks], ("/device:CPU:0",), False), held.peak_node)
        return Memory(dict(sorted(devices.items())), 0, "what each device held, by node, from the allocators' "
                      f"events (requested bytes; before the profile: what the allocator held then); {NO_RECORDS}",
                      peaks)

    def to_json(self) -> dict[str, Any]:
        """`{"steps": Steps.to_json(), "memory": Memory.to_json()}`, what `tfplace profile --json` writes."""
        return {"paths": list(self.paths), "steps": self.steps().to_json(), "memory": self.memory().to_json()}


def _files(path: str) -> tuple[str, ...]:
    """The `*.xplane.pb` files of the profile at `path`: the file itself, or the latest run's under a folder."""
    if os.path.isfile(path):
        if not path.endswith(".xplane.pb"):
            raise ProfileError(f"tfplace.read_profile received {path!r}: a file that is not a profile; allowed are "
                               "a *.xplane.pb file or a folder holding plugins/profile/<run>/*.xplane.pb")
        return (path,)
    if not os.path.isdir(path):
        raise ProfileError(f"tfplace.read_profile received {path!r}: no such file or folder; allowed are a "
                           "*.xplane.pb file or a folder holding plugins/profile/<run>/*.xplane.pb")
    found = profile_files(path)
    if not found:
        raise ProfileError(f"tfplace.read_profile received {path!r}: a folder with no *.xplane.pb file below it; "
                           "profiles lie in <logdir>/plugins/profile/<run>/ (tfplace trace --timing --profile_dir, "
                           "TensorBoard(profile_batch=...), tf.profiler.experimental.start(logdir))")
    runs: dict[str, list[str]] = {}
    for file in found:
        runs.setdefault(os.path.dirname(file), []).append(file)
    latest = max(runs, key=lambda run: (os.path.basename(run), run))  # run folders are named by their time
    return tuple(sorted(runs[latest]))


def read_profile(path: str) -> Profile:
    """The profile at `path` (a `*.xplane.pb` file, or a folder under which `plugins/profile/<run>/` lies: the
    latest run) read into a `Profile`.

    Raises:
      ProfileError: `path` is not a profile, or its file cannot be read as one (naming the file).
    """
    from tfplace.placement.profile import _xspace

    paths = _files(os.fspath(path))
    try:
        space = _tensorflow.read_xspaces(paths)
    except Exception as error:  # a protobuf decode error or an unreadable file: name the file, keep the cause
        raise ProfileError(f"tfplace.read_profile could not read {', '.join(paths)} as a profile (XSpace): "
                           f"{type(error).__name__}: {error}") from error
    return Profile(paths, _xspace.read_xspace(space) if space is not None else Timing.empty())
