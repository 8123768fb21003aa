"""Memory per device and TensorFlow's profiler. Part of `tfplace._tensorflow` (see its docstring)."""

from __future__ import annotations

import contextlib
import gc
from typing import Any, Iterable, Iterator, Optional

import tensorflow as tf
from tensorflow.python.framework import ops as _ops


# Memory ----------------------------------------------------------------------------------------


# What TensorFlow raises when a device's allocator cannot satisfy an allocation.
OutOfMemory = tf.errors.ResourceExhaustedError
# Runs a function around every variable created in the block (public API).
variable_creator_scope = tf.variable_creator_scope


def reset_allocator_peak(device: str) -> None:
    """Resets the peak of `device`'s allocator (GPUs; devices whose allocator keeps no statistics are left alone)."""
    try:
        tf.config.experimental.reset_memory_stats(device)
    except (ValueError, tf.errors.OpError):
        pass


def allocator_figures(device: str) -> Optional[tuple[int, int]]:
    """(current, peak) bytes of `device`'s allocator (`tf.config.experimental.get_memory_info`), None where it
    keeps none."""
    try:
        info = tf.config.experimental.get_memory_info(device)
    except (ValueError, tf.errors.OpError):
        return None
    return int(info["current"]), int(info["peak"])


def live_tensor_objects() -> list[tuple[str, Any]]:
    """("tensor", eager tensor) and ("variable", variable) pairs for every one Python's garbage collector
    tracks now; a distributed variable is left out (its components are listed)."""
    found = []
    for obj in gc.get_objects():
        if isinstance(obj, _ops.EagerTensor):
            found.append(("tensor", obj))
        elif isinstance(obj, tf.Variable) and getattr(obj, "values", None) is None:
            found.append(("variable", obj))
    return found


# The profiler ----------------------------------------------------------------------------------

# What `start` raises while another session runs ("Another profiler is running") and `stop` without one.
ProfilerBusy = (tf.errors.AlreadyExistsError, tf.errors.UnavailableError)
# What `start` and `stop` raise at all: those, and errors creating or writing the profile's folder.
ProfilerError = tf.errors.OpError


def profiler_start(logdir: str) -> None:
    """Starts TensorFlow's profiler (one session per process), writing into `logdir` at stop."""
    tf.profiler.experimental.start(logdir)


def profiler_stop() -> None:
    """Stops TensorFlow's profiler and writes its profile."""
    tf.profiler.experimental.stop()


def trace_me(name: str, **stats: Any) -> Any:
    """A context manager whose block is an event `name` with `stats` in the running profiler's host plane
    (`tf.profiler.experimental.Trace`; nearly free when no profiler runs)."""
    return tf.profiler.experimental.Trace(name, **stats)


def read_xspaces(paths: Iterable[str]) -> Optional[Any]:
    """The profile in the `*.xplane.pb` files `paths` as one `XSpace` (their planes together), None
    when there is none."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = None
    for path in sorted(paths):
        with open(path, "rb") as stream:
            read = xplane_pb2.XSpace.FromString(stream.read())
        if space is None:
            space = read
        else:
            space.planes.extend(read.planes)
    return space


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused in the block (as it was before, after it): reading a long profile
    makes hundreds of thousands of records that hold no cycle, which the collector would walk at every pass."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
