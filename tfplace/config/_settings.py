"""The placement settings, each declared once, and how a value is chosen for each.

`SETTINGS` holds one `Setting` per `configure()` keyword: its name, type (`Kind`:
the allowed values, how text is read, which absl flag carries it), help,
environment variables and whether TensorFlow fixes it when its runtime starts.
`configure()`'s checks, the absl flags (`tfplace.flags`), the command line's
options, `Config` and every message are derived from these declarations.

A setting can come from an environment variable, an absl flag or a keyword
argument of `configure()`; the later in that list wins. Everything here is pure
Python: choosing a setting never touches TensorFlow.

Example:
    >>> from tfplace.config import _settings
    >>> chosen = _settings.resolve({"memory_fraction": 0.5}, {}, {"TFPLACE_LOGICAL_CPUS": "2"})
    >>> chosen["memory_fraction"].value, chosen["logical_cpus"].source
    (0.5, 'environment variable TFPLACE_LOGICAL_CPUS')
    >>> _settings.BY_NAME["memory_growth"].environment
    ('TF_FORCE_GPU_ALLOW_GROWTH', 'TFPLACE_MEMORY_GROWTH')
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Callable, Mapping, Optional

from tfplace._errors import ConfigurationError

__all__ = ["Kind", "Setting", "SETTINGS", "BY_NAME", "NAMES", "CONFLICTS", "Sourced", "resolve", "describe",
           "check_conflicts"]


@dataclasses.dataclass(frozen=True)
class Kind:
    """A type of setting: what it allows, how a value is checked and how text is read.

    Attributes:
      allowed: the allowed values, as messages and help say them ("a number in (0, 1]").
      type: the Python type of a checked value (`Config`'s field type).
      flag: the absl `DEFINE_<flag>` that carries it: "boolean", "enum", "float", "integer" or "list".
      check: returns the value normalized, or None when it is not allowed.
      read: parses text (an environment variable, an option, an ini value); raises ValueError or KeyError.
      choices: the allowed values of an "enum".
    """

    allowed: str
    type: type
    flag: str
    check: Callable[[Any], Any]
    read: Callable[[str], Any]
    choices: tuple[str, ...] = ()


_WORDS = {**dict.fromkeys(("1", "true", "yes", "on"), True), **dict.fromkeys(("0", "false", "no", "off"), False)}


def _whole(value: Any, least: int) -> Optional[int]:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= least:
        return int(value)
    return None


def _fraction(value: Any) -> Optional[float]:
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and 0.0 < float(value) <= 1.0:
        return float(value)  # NaN fails the comparison
    return None


def _indices(value: Any) -> Optional[tuple[int, ...]]:
    checked = tuple(_whole(i, 0) for i in value) if isinstance(value, (list, tuple)) else (None,)
    if None in checked or len(set(checked)) != len(checked):
        return None
    return checked  # type: ignore[return-value]


def _choice(*values: str) -> Kind:
    return Kind("one of " + ", ".join(repr(v) for v in values), str, "enum",
                lambda v: v if isinstance(v, str) and v in values else None, str.strip, values)


BOOLEAN = Kind("True or False", bool, "boolean", lambda v: v if isinstance(v, bool) else None,
               lambda text: _WORDS[text.strip().lower()])
FRACTION = Kind("a number in (0, 1]", float, "float", _fraction, float)
COUNT = Kind("a whole number >= 1", int, "integer", lambda v: _whole(v, 1), int)
MIB = Kind("a whole number of MiB >= 1", int, "integer", lambda v: _whole(v, 1), int)
INDICES = Kind("a list of distinct GPU indices >= 0", tuple, "list", _indices,
               lambda text: [int(part) for part in text.split(",")] if text.strip() else [])


@dataclasses.dataclass(frozen=True)
class Setting:
    """One `configure()` setting, declared once.

    Attributes:
      name: the keyword of `configure()`, the absl flag `--<name>`, the variable `TFPLACE_<NAME>`.
      kind: its type.
      help: one sentence for flag and option help.
      fixed: True when TensorFlow fixes it at runtime start (applied before, checked after).
      gpu: True when it is planned per GPU over the device inventory (`tfplace.config._gpu_plan`) and
        applied with the other GPU settings (`tfplace._tensorflow.apply_gpus`).
      tensorflow_variable: an environment variable TensorFlow itself reads for it ("true" or
        "false"), below `TFPLACE_<NAME>` in priority; "" when none.
      apply: the `tfplace._tensorflow` function that applies it, given its value ("" for the GPU
        settings, applied together through the GPU plan).
      state: the `tfplace._tensorflow` function reading the state a fixed setting is checked against
        after start (its name unless given; the memory caps share `memory_limits`).
      reads: the `tfplace._tensorflow` function reading its value in force for `Config` (its name
        unless given; "" where TensorFlow cannot report it: `Config` says what `configure()` applied).
      says: says the state in force, for the message of a setting that cannot be applied after start.
    """

    name: str
    kind: Kind
    help: str
    fixed: bool
    gpu: bool = False
    tensorflow_variable: str = ""
    apply: str = ""
    state: str = ""
    reads: Optional[str] = None
    says: Callable[[Any], str] = str

    def __post_init__(self) -> None:
        if not self.state:
            object.__setattr__(self, "state", self.name)
        if self.reads is None:
            object.__setattr__(self, "reads", self.name)

    @property
    def environment(self) -> tuple[str, ...]:
        """The environment variables read for it, lowest priority first."""
        return (*([self.tensorflow_variable] if self.tensorflow_variable else []), f"TFPLACE_{self.name.upper()}")

    def check(self, value: Any, source: str) -> Any:
        """`value` normalized, or ConfigurationError naming `source` (e.g. "argument memory_fraction")."""
        checked = self.kind.check(value)
        if checked is None:
            raise ConfigurationError(
                f"{self.name}={value!r} (from {source}) is not allowed: expected {self.kind.allowed}")
        return checked

    def parse(self, text: str, source: str, variable: str = "") -> Any:
        """Reads `text` from `source`; `variable` names the environment variable it came from, if any.

        Raises:
          ConfigurationError: naming `source`, when the text cannot be read or is out of bounds.
        """
        strict = variable == self.tensorflow_variable != ""  # TensorFlow reads only "true" and "false"
        try:
            parsed = {"true": True, "false": False}[text.strip()] if strict else self.kind.read(text)
        except (KeyError, ValueError):
            raise ConfigurationError(
                f"{variable or self.name}={text!r} (from {source}) cannot be read as {self.name}: "
                f"expected {self.kind.allowed}" + (", written 'true' or 'false'" if strict else "")) from None
        return self.check(parsed, source)


def _on_off(on: bool) -> str:
    return (f"placement logging is {'on' if on else 'off'}, as it was when the runtime started "
            "(TensorFlow 2.21 fixes it then)")


def _limits(limits: Any) -> str:
    return f"logical GPU memory limits (MiB) are {list(limits)}"


SETTINGS = (
    Setting("soft_placement", BOOLEAN, "Let ops run elsewhere when the asked device lacks a kernel.", fixed=False,
            apply="set_soft_placement"),
    Setting("log_placement", BOOLEAN, "Print TensorFlow's own placement lines on the terminal, as the guide "
            "shows them (capture_placement() does not need them).", fixed=True, apply="set_log_placement",
            says=_on_off),
    Setting("device_policy", _choice("silent", "warn", "explicit"),
            "What an implicit cross-device copy does: nothing, a log line, or an error.", fixed=False,
            apply="set_device_policy"),
    Setting("memory_growth", BOOLEAN, "Allocate GPU memory as needed, on every visible GPU.", fixed=True, gpu=True,
            tensorflow_variable="TF_FORCE_GPU_ALLOW_GROWTH", says=lambda v: f"memory growth is {v}"),
    Setting("memory_fraction", FRACTION, "Cap each visible GPU at this share of its own memory.", fixed=True,
            gpu=True, state="memory_limits", reads="", says=_limits),
    Setting("memory_limit_mb", MIB, "Cap each visible GPU at this many MiB.", fixed=True, gpu=True,
            state="memory_limits", reads="", says=_limits),
    Setting("visible_gpus", INDICES, "Comma-separated indices of the GPUs TensorFlow may use.", fixed=True, gpu=True,
            says=lambda v: f"visible GPUs are {list(v)}"),
    Setting("logical_cpus", COUNT, "Split the host CPU into this many logical devices.", fixed=True,
            apply="set_logical_cpus", says=lambda v: f"{v} logical CPU(s) exist"),
    Setting("logical_gpus", COUNT, "Split each visible GPU into this many logical GPUs.", fixed=True, gpu=True,
            state="memory_limits", says=_limits),
    Setting("cpu_allocator", _choice("default", "bfc"), "The CPU's memory allocator: 'bfc' reports every "
            "allocation to the profiler (memory inside functions); 'default' is oneDNN's or TensorFlow's plain one.",
            fixed=True, apply="set_cpu_allocator", says=lambda v: f"the CPU's allocator is {v!r}"),
)
BY_NAME = {setting.name: setting for setting in SETTINGS}
NAMES = tuple(BY_NAME)

_GROWTH = "TensorFlow allows memory growth only on GPUs without logical devices or memory caps; drop one of the two"
# Pairs of settings that cannot both be on (given, and not False), with why.
CONFLICTS = (
    ("memory_fraction", "memory_limit_mb", "give the GPU memory cap either as a fraction or in MiB"),
    ("memory_growth", "memory_fraction", _GROWTH),
    ("memory_growth", "memory_limit_mb", _GROWTH),
    ("memory_growth", "logical_gpus", _GROWTH),
)


@dataclasses.dataclass(frozen=True)
class Sourced:
    """A checked setting value and where it came from."""

    value: Any
    source: str


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
    for setting in SETTINGS:
        name = setting.name
        for variable in setting.environment:
            if variable in environ:
                source = f"environment variable {variable}"
                chosen[name] = Sourced(setting.parse(environ[variable], source, variable), source)
        for given, source in ((flag_values.get(name), f"flag --{name}"), (arguments.get(name), f"argument {name}")):
            if given is not None:
                chosen[name] = Sourced(setting.check(given, source), source)
    check_conflicts(chosen)
    return chosen


def describe(chosen: Mapping[str, Sourced], name: str) -> str:
    """`name=value (from source)`, the way errors quote a chosen setting."""
    return f"{name}={chosen[name].value!r} (from {chosen[name].source})"


def check_conflicts(chosen: Mapping[str, Sourced]) -> None:
    """Raises ConfigurationError naming both settings and their sources when two chosen ones conflict."""
    on = {name for name, sourced in chosen.items() if sourced.value is not False}
    for first, second, why in CONFLICTS:
        if first in on and second in on:
            raise ConfigurationError(
                f"{describe(chosen, first)} and {describe(chosen, second)} cannot be combined: {why}")
