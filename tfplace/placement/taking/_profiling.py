"""One session of TensorFlow's profiler around a block (`capture_placement(timing=True)`): started
in a fresh folder unless another session runs (TensorFlow runs one per process), stopped and read
back as an `XSpace` (`tfplace.placement.taking._profile.read_xspace` reads it).

Example:
    >>> import tensorflow as tf
    >>> from tfplace.placement.taking import _profiling
    >>> session = _profiling.ProfilerSession.start()
    >>> _ = tf.ones(2) * 2.0
    >>> session.stop() is not None, session.missing
    (True, '')
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Any, Iterator, Optional

from tfplace import _tensorflow

__all__ = ["ProfilerSession", "keeping"]


class ProfilerSession:
    """One profiler session around a block: `ProfilerSession.start()`, then `stop()` for its `XSpace`.

    Attributes:
      missing: why there is no profile ("" while there may be one): another profiler session was
        active when it started, or the profiler could not start, stop or write its profile.
    """

    def __init__(self, logdir: Optional[str], missing: str = "", kept: frozenset = frozenset()) -> None:
        self.logdir, self.missing = logdir, missing
        self.kept = kept  # with a folder to keep (`keeping`): the profiles that were there before, else empty

    @classmethod
    def start(cls) -> "ProfilerSession":
        """Starts TensorFlow's profiler in a fresh folder, unless it cannot (then `missing` says why
        and nothing starts). Another session is known by what TensorFlow's `start` raises
        (`AlreadyExistsError`): that covers the sessions of its Python API and of its profiler
        server alike, where a look at the Python API's state would miss the server's. (Refused by
        a server's session, TensorFlow keeps its Python API's unstarted session object until a
        `tf.profiler.experimental.stop()`; tfplace leaves TensorFlow's state as it is.)"""
        logdir = _KEEP[-1] if _KEEP else tempfile.mkdtemp(prefix="tfplace-profile-")
        before = frozenset(_profiles(logdir)) | {""} if _KEEP else frozenset()  # never empty when kept
        try:
            _tensorflow.profiler_start(logdir)
        except _tensorflow.ProfilerError as error:
            if not _KEEP:
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
            paths = [path for path in _profiles(logdir) if path not in self.kept]
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


def _profiles(logdir: str) -> list[str]:
    return [os.path.join(root, name) for root, _, names in os.walk(logdir) for name in names
            if name.endswith(".xplane.pb")]


_KEEP: list[str] = []  # the folder profiles are kept in while `keeping()` runs


@contextlib.contextmanager
def keeping(directory: str) -> Iterator[None]:
    """Inside the block, profiler sessions write into `directory` (`plugins/profile/<run>/` below it, where
    TensorBoard's profile plugin reads them) and leave their profile there."""
    os.makedirs(directory, exist_ok=True)
    _KEEP.append(directory)
    try:
        yield
    finally:
        _KEEP.remove(directory)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
