"""The tfplace error hierarchy: one base class, one subclass per kind of failure.

Every message says what was received, what is allowed and where the value came
from (an argument, an absl flag or an environment variable).

Example:
    >>> import tfplace
    >>> try:
    ...     tfplace.configure(memory_fraction=1.5)
    ... except tfplace.ConfigurationError as err:
    ...     print(err)
    memory_fraction=1.5 (from argument memory_fraction) is not allowed: expected a number in (0, 1]
"""

from __future__ import annotations

import sys
import warnings

__all__ = [
    "Error", "ConfigurationError", "RuntimeInitializedError", "DeviceNotFoundError", "DeviceSpecError",
    "ImplicitCopyError", "PlacementError", "GpuUnusedWarning", "add_note",
]


def add_note(error: BaseException, note: str) -> None:
    """Adds `note` to `error` (PEP 678: Python 3.11 prints it under the traceback). Python 3.10 keeps it in
    `__notes__` as well, but prints no notes: there the note is also a warning, shown as the error rises."""
    if sys.version_info >= (3, 11):
        error.add_note(note)
        return
    error.__notes__ = [*getattr(error, "__notes__", []), note]  # type: ignore[attr-defined]
    warnings.warn(note, RuntimeWarning, stacklevel=3)


class Error(Exception):
    """Base class of every error raised by tfplace."""


class ConfigurationError(Error, ValueError):
    """An invalid or conflicting setting given to `configure()` (or its flags/env)."""


class RuntimeInitializedError(Error, RuntimeError):
    """A setting fixed at runtime start was asked for after the runtime started."""


class DeviceNotFoundError(Error, ValueError):
    """A device was asked for that does not exist in this process."""


class DeviceSpecError(Error, ValueError):
    """A device spec that is not written in any accepted form."""


class ImplicitCopyError(Error, RuntimeError):
    """An implicit cross-device copy inside `transfer_guard("disallow")`."""


class PlacementError(Error, RuntimeError):
    """An op ran on another device than `device_guard` allows."""


for _error in (Error, ConfigurationError, RuntimeInitializedError, DeviceNotFoundError, DeviceSpecError,
               ImplicitCopyError, PlacementError):
    _error.__module__ = "tfplace"  # tracebacks name them as users import them: tfplace.PlacementError


class GpuUnusedWarning(UserWarning):
    """The driver reports more GPUs than TensorFlow lists: the message is `tfplace doctor`'s verdict line."""


GpuUnusedWarning.__module__ = "tfplace"
