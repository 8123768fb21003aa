"""The nine placement settings: their types, bounds, sources and priority.

A setting can come from an environment variable, an absl flag or a keyword
argument of `configure()`; the later in that list wins. Everything here is pure
Python: validating a setting never touches TensorFlow.

Example:
    >>> from tfplace.config import _settings
    >>> chosen = _settings.resolve({"memory_fraction": 0.5}, {}, {"TFPLACE_LOGICAL_CPUS": "2"})
    >>> chosen["memory_fraction"].value, chosen["logical_cpus"].source
    (0.5, 'environment variable TFPLACE_LOGICAL_CPUS')
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Callable, Mapping

from tfplace._errors import ConfigurationError

__all__ = ["NAMES", "DEVICE_POLICIES", "ENVIRONMENT", "ALLOWED", "Sourced", "validate", "parse_text", "resolve", "describe", "check_conflicts"]

NAMES = (
    "soft_placement",
    "log_placement",
    "device_policy",
    "memory_growth",
    "memory_fraction",
    "memory_limit_mb",
    "visible_gpus",
    "logical_cpus",
    "logical_gpus",
)
DEVICE_POLICIES = ("silent", "warn", "explicit")

# Environment variables per setting, lowest priority first.
ENVIRONMENT: dict[str, tuple[str, ...]] = {
    name: (f"TFPLACE_{name.upper()}",) for name in NAMES
}
ENVIRONMENT["memory_growth"] = ("TF_FORCE_GPU_ALLOW_GROWTH", "TFPLACE_MEMORY_GROWTH")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")

# What each setting allows, as said in error messages and flag help.
ALLOWED = {
    "soft_placement": "True or False",
    "log_placement": "True or False",
    "device_policy": "one of " + ", ".join(repr(p) for p in DEVICE_POLICIES),
    "memory_growth": "True or False",
    "memory_fraction": "a number in (0, 1]",
    "memory_limit_mb": "a whole number of MiB >= 1",
    "visible_gpus": "a list of distinct GPU indices >= 0",
    "logical_cpus": "a whole number >= 1",
    "logical_gpus": "a whole number >= 1",
}


@dataclasses.dataclass(frozen=True)
class Sourced:
    """A validated setting value and where it came from."""

    value: Any
    source: str


def _reject(name: str, value: Any, source: str) -> ConfigurationError:
    return ConfigurationError(
        f"{name}={value!r} (from {source}) is not allowed: expected {ALLOWED[name]}"
    )


def _bool(name: str, value: Any, source: str) -> bool:
    if isinstance(value, bool):
        return value
    raise _reject(name, value, source)


def _policy(name: str, value: Any, source: str) -> str:
    if isinstance(value, str) and value in DEVICE_POLICIES:
        return value
    raise _reject(name, value, source)


def _fraction(name: str, value: Any, source: str) -> float:
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        number = float(value)
        if not math.isnan(number) and 0.0 < number <= 1.0:
            return number
    raise _reject(name, value, source)


def _count(name: str, value: Any, source: str) -> int:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 1:
        return int(value)
    raise _reject(name, value, source)


def _indices(name: str, value: Any, source: str) -> tuple[int, ...]:
    if isinstance(value, (list, tuple)) and all(
        isinstance(i, numbers.Integral) and not isinstance(i, bool) and int(i) >= 0 for i in value
    ):
        if len(set(value)) == len(value):
            return tuple(int(i) for i in value)
    raise _reject(name, value, source)


_VALIDATORS: dict[str, Callable[[str, Any, str], Any]] = {
    "soft_placement": _bool,
    "log_placement": _bool,
    "device_policy": _policy,
    "memory_growth": _bool,
    "memory_fraction": _fraction,
    "memory_limit_mb": _count,
    "visible_gpus": _indices,
    "logical_cpus": _count,
    "logical_gpus": _count,
}


def validate(name: str, value: Any, source: str) -> Any:
    """Returns `value` normalized for setting `name`, or raises ConfigurationError.

    Args:
      name: one of `NAMES`.
      value: the value asked for (not None).
      source: where it came from, e.g. "argument memory_fraction"; quoted in errors.

    Raises:
      ConfigurationError: the value is of the wrong type or out of bounds.
    """
    return _VALIDATORS[name](name, value, source)


def parse_text(name: str, text: str, source: str) -> Any:
    """Parses `text` (an environment variable, a command-line or ini value) into setting `name`.

    Raises:
      ConfigurationError: naming `source`, when the text cannot be read or is out of bounds.
    """
    variable = source.rsplit(" ", 1)[-1]
    clean = text.strip()
    parsed: Any
    try:
        if _VALIDATORS[name] is _bool:
            if variable == "TF_FORCE_GPU_ALLOW_GROWTH":  # TensorFlow reads only these two
                parsed = {"true": True, "false": False}[clean]
            else:
                parsed = {**{t: True for t in _TRUE}, **{f: False for f in _FALSE}}[clean.lower()]
        elif _VALIDATORS[name] is _fraction:
            parsed = float(clean)
        elif _VALIDATORS[name] is _count:
            parsed = int(clean)
        elif _VALIDATORS[name] is _indices:
            parsed = [int(part) for part in clean.split(",")] if clean else []
        else:
            parsed = clean
    except (KeyError, ValueError):
        raise ConfigurationError(
            f"{variable.lstrip('-')}={text!r} (from {source}) cannot be read as {name}: "
            f"expected {ALLOWED[name]}"
            + (", written 'true' or 'false'" if variable == "TF_FORCE_GPU_ALLOW_GROWTH" else "")
        ) from None
    return validate(name, parsed, source)


def resolve(
    arguments: Mapping[str, Any],
    flag_values: Mapping[str, Any],
    environ: Mapping[str, str],
) -> dict[str, Sourced]:
    """Chooses each setting from environment < flags < arguments and checks conflicts.

    Args:
      arguments: keyword arguments of `configure()`; None entries are ignored.
      flag_values: parsed absl flag values by setting name; None entries are ignored.
      environ: the environment (usually `os.environ`).

    Returns:
      The settings asked for, by name; a setting asked for nowhere is absent.

    Raises:
      ConfigurationError: a value is invalid, or two settings cannot be combined.
    """
    chosen: dict[str, Sourced] = {}
    for name in NAMES:
        for variable in ENVIRONMENT[name]:
            if variable in environ:
                source = f"environment variable {variable}"
                chosen[name] = Sourced(parse_text(name, environ[variable], source), source)
        if flag_values.get(name) is not None:
            chosen[name] = Sourced(validate(name, flag_values[name], f"flag --{name}"), f"flag --{name}")
        if arguments.get(name) is not None:
            chosen[name] = Sourced(validate(name, arguments[name], f"argument {name}"), f"argument {name}")
    check_conflicts(chosen)
    return chosen


def describe(chosen: Mapping[str, Sourced], name: str) -> str:
    """`name=value (from source)`, the way errors quote a chosen setting."""
    return f"{name}={chosen[name].value!r} (from {chosen[name].source})"


def check_conflicts(chosen: Mapping[str, Sourced]) -> None:
    """Raises ConfigurationError when two chosen settings cannot be combined."""
    if "memory_fraction" in chosen and "memory_limit_mb" in chosen:
        raise ConfigurationError(
            f"{describe(chosen, 'memory_fraction')} and {describe(chosen, 'memory_limit_mb')} "
            "cannot be combined: give the GPU memory cap either as a fraction or in MiB"
        )
    if chosen.get("memory_growth", Sourced(False, "")).value:
        for other in ("memory_fraction", "memory_limit_mb", "logical_gpus"):
            if other in chosen:
                raise ConfigurationError(
                    f"{describe(chosen, 'memory_growth')} cannot be combined with "
                    f"{describe(chosen, other)}: TensorFlow allows memory growth only on GPUs "
                    "without logical devices or memory caps; drop one of the two"
                )
