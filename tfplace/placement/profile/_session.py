"""One session of TensorFlow's profiler around a block (`capture_placement(timing=True)`): started
in a fresh folder (or the folder the profile is kept in) unless another session runs (TensorFlow runs one per
process), stopped and read back as an `XSpace` (`tfplace.placement.profile._xspace.read_xspace` reads it).

Example:
    >>> import tensorflow as tf
    >>> from tfplace.placement.profile import _session
    >>> session = _session.ProfilerSession.start()
    >>> _ = tf.ones(2) * 2.0
    >>> session.stop() is not None, session.missing
    (True, '')
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Optional

from tfplace import _tensorflow

__all__ = ["ProfilerSession", "profile_files"]


class ProfilerSession:
    """One profiler session around a block: `ProfilerSession.start()`, then `stop()` for its `XSpace`.

    Attributes:
      missing: why there is no profile ("" while there may be one): another profiler session was
        active when it started, or the profiler could not start, stop or write its profile.
    """

    def __init__(self, logdir: Optional[str], missing: str = "", kept: frozenset[str] = frozenset()) -> None:
        self.logdir, self.missing = logdir, missing
        self.kept = kept  # with a folder to keep the profile in: the profiles that were there before, else empty

    @classmethod
    def start(cls, keep: Optional[str] = None) -> "ProfilerSession":
        """Starts TensorFlow's profiler in a fresh folder, or in `keep` (the profile stays there, under
        `plugins/profile/<run>/`, where TensorBoard's profile plugin and XProf read it), unless it cannot (then
        `missing` says why and nothing starts). Another session is known by what TensorFlow's `start` raises
        (`AlreadyExistsError`): that covers the sessions of its Python API and of its profiler
        server alike, where a look at the Python API's state would miss the server's. (Refused by
        a server's session, TensorFlow keeps its Python API's unstarted session object until a
        `tf.profiler.experimental.stop()`; tfplace leaves TensorFlow's state as it is.)"""
        if keep is not None:
            os.makedirs(keep, exist_ok=True)
        logdir = keep if keep is not None else tempfile.mkdtemp(prefix="tfplace-profile-")
        before = frozenset(profile_files(logdir)) | {""} if keep is not None else frozenset()  # never empty when kept
        try:
            _tensorflow.profiler_start(logdir)
        except _tensorflow.ProfilerError as error:
            if keep is None:
                shutil.rmtree(logdir, ignore_errors=True)
            said = _first_line(error)
            if isinstance(error, _tensorflow.ProfilerBusy):
                return cls(None, f"another TensorFlow profiler session was active (TensorFlow said: {said}); "
                                 "TensorFlow runs one per process")
            return cls(None, f"TensorFlow's profiler did not start in {logdir} (TensorFlow said: {said})")
        return cls(logdir, kept=before)

    def stop(self) -> Optional[Any]:
        """Stops the profiler and returns its `XSpace`; None when it never started, or when stopping
        or reading failed (then `missing` says why). Safe after a block that raised."""
        if self.logdir is None:
            return None
        logdir, self.logdir = self.logdir, None
        try:
            try:
                _tensorflow.profiler_stop()
            except _tensorflow.ProfilerError as error:
                self.missing = f"TensorFlow's profiler could not stop and write to {logdir} " \
                               f"(TensorFlow said: {_first_line(error)})"
                return None
            paths = [path for path in profile_files(logdir) if path not in self.kept]
            try:
                space = _tensorflow.read_xspaces(paths)
            except OSError as error:
                self.missing = f"the profile in {logdir} could not be read ({error})"
                return None
            if space is None:
                self.missing = f"TensorFlow's profiler wrote no *.xplane.pb file into {logdir}"
            return space
        finally:
            if not self.kept:
                shutil.rmtree(logdir, ignore_errors=True)


def profile_files(folder: str) -> list[str]:
    """Every `*.xplane.pb` file under `folder`."""
    return [os.path.join(root, name) for root, _, names in os.walk(folder) for name in names
            if name.endswith(".xplane.pb")]


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
