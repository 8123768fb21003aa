"""Opt-in absl flags for every `configure()` setting.

Importing this module defines `--soft_placement`, `--log_placement`,
`--device_policy`, `--memory_growth`, `--memory_fraction`, `--memory_limit_mb`,
`--visible_gpus`, `--logical_cpus` and `--logical_gpus` on absl's global
`FLAGS`, each validated as `configure()` validates it. Once flags are parsed,
`tfplace.configure()` reads them (above environment variables, below keyword
arguments). Importing `tfplace` alone defines no flag.

Example (an absl app)::

    from absl import app
    import tfplace
    import tfplace.flags  # noqa: F401  (defines the flags)

    def main(argv):
        print(tfplace.configure())

    if __name__ == "__main__":
        app.run(main)   # python app.py --logical_cpus=2 --log_placement
"""

from __future__ import annotations

from typing import Any

from absl import flags

from tfplace.config import _settings
from tfplace._errors import ConfigurationError

__all__ = ["FLAG_HOLDERS", "values"]


def _help(name: str, what: str) -> str:
    variables = " or ".join(_settings.ENVIRONMENT[name])
    return f"{what} Allowed: {_settings.ALLOWED[name]}. Default: from {variables}, else TensorFlow's."


def _indices(raw: Any) -> Any:
    """`--visible_gpus` arrives as a list of strings; indices are ints."""
    if raw is None:
        return None
    return list(_settings.parse_text("visible_gpus", ",".join(raw), "flag --visible_gpus"))


FLAG_HOLDERS: dict[str, flags.FlagHolder] = {
    "soft_placement": flags.DEFINE_boolean(
        "soft_placement", None, _help("soft_placement", "Let ops run elsewhere when the asked device lacks a kernel.")),
    "log_placement": flags.DEFINE_boolean(
        "log_placement", None, _help("log_placement", "Show TensorFlow's placement lines on the terminal; "
                              "--nolog_placement turns placement logging off (captures then see nothing).")),
    "device_policy": flags.DEFINE_enum(
        "device_policy", None, list(_settings.DEVICE_POLICIES),
        _help("device_policy", "What an implicit cross-device copy does: nothing, a log line, or an error.")),
    "memory_growth": flags.DEFINE_boolean(
        "memory_growth", None, _help("memory_growth", "Allocate GPU memory as needed, on every visible GPU.")),
    "memory_fraction": flags.DEFINE_float(
        "memory_fraction", None, _help("memory_fraction", "Cap each visible GPU at this share of its own memory.")),
    "memory_limit_mb": flags.DEFINE_integer(
        "memory_limit_mb", None, _help("memory_limit_mb", "Cap each visible GPU at this many MiB.")),
    "visible_gpus": flags.DEFINE_list(
        "visible_gpus", None, _help("visible_gpus", "Comma-separated indices of the GPUs TensorFlow may use.")),
    "logical_cpus": flags.DEFINE_integer(
        "logical_cpus", None, _help("logical_cpus", "Split the host CPU into this many logical devices.")),
    "logical_gpus": flags.DEFINE_integer(
        "logical_gpus", None, _help("logical_gpus", "Split each visible GPU into this many logical GPUs.")),
}


def _read(name: str, raw: Any) -> Any:
    return _indices(raw) if name == "visible_gpus" else raw


def _validator(name: str):
    def check(raw: Any) -> bool:
        if raw is not None:
            try:
                _settings.validate(name, _read(name, raw), f"flag --{name}")
            except ConfigurationError as err:
                raise flags.ValidationError(str(err)) from None
        return True
    return check


def _check_combination(raw: dict[str, Any]) -> bool:
    chosen = {
        name: _settings.Sourced(_read(name, value), f"flag --{name}")
        for name, value in raw.items() if value is not None
    }
    try:
        _settings.check_conflicts(chosen)
    except ConfigurationError as err:
        raise flags.ValidationError(str(err)) from None
    return True


for _name, _holder in FLAG_HOLDERS.items():
    if _name != "device_policy":  # DEFINE_enum checks its own values
        flags.register_validator(_holder, _validator(_name))
flags.register_multi_flags_validator(
    [FLAG_HOLDERS[n] for n in ("memory_growth", "memory_fraction", "memory_limit_mb", "logical_gpus")],
    _check_combination)


def values() -> dict[str, Any]:
    """The parsed value of each tfplace flag by setting name; {} before parsing."""
    if not flags.FLAGS.is_parsed():
        return {}
    return {name: _read(name, holder.value) for name, holder in FLAG_HOLDERS.items()}
