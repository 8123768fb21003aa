"""Opt-in absl flags for every `configure()` setting.

Importing this module defines one flag per setting (`--soft_placement`,
`--log_placement`, `--device_policy`, `--memory_growth`, `--memory_fraction`,
`--memory_limit_mb`, `--visible_gpus`, `--logical_cpus`, `--logical_gpus`, `--cpu_allocator`) on
absl's global `FLAGS`, each derived from its declaration and validated as
`configure()` validates it. Once flags are parsed, `tfplace.configure()` reads
them (above environment variables, below keyword arguments). Importing
`tfplace` alone defines no flag.

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

from tfplace._errors import ConfigurationError
from tfplace.config._settings import CONFLICTS, SETTINGS, Setting, Sourced, check_conflicts

__all__ = ["FLAG_HOLDERS", "values"]


def _define(setting: Setting) -> flags.FlagHolder:
    text = (f"{setting.help} Allowed: {setting.kind.allowed}. "
            f"Default: from {' or '.join(setting.environment)}, else TensorFlow's.")
    if setting.kind.flag == "enum":
        return flags.DEFINE_enum(setting.name, None, list(setting.kind.choices), text)
    return getattr(flags, f"DEFINE_{setting.kind.flag}")(setting.name, None, text)


def _read(setting: Setting, raw: Any) -> Any:
    """A flag's parsed value as a setting value (a list flag's strings read as the setting reads text)."""
    if raw is None or setting.kind.flag != "list":
        return raw
    return setting.parse(",".join(raw), f"flag --{setting.name}")


def _validator(setting: Setting):
    def check(raw: Any) -> bool:
        if raw is not None:
            try:
                setting.check(_read(setting, raw), f"flag --{setting.name}")
            except ConfigurationError as err:
                raise flags.ValidationError(str(err)) from None
        return True
    return check


def _check_combination(raw: dict[str, Any]) -> bool:
    chosen = {setting.name: Sourced(_read(setting, raw[setting.name]), f"flag --{setting.name}")
              for setting in SETTINGS if raw.get(setting.name) is not None}
    try:
        check_conflicts(chosen)
    except ConfigurationError as err:
        raise flags.ValidationError(str(err)) from None
    return True


FLAG_HOLDERS: dict[str, flags.FlagHolder] = {setting.name: _define(setting) for setting in SETTINGS}
for _setting in SETTINGS:
    if _setting.kind.flag != "enum":  # DEFINE_enum checks its own values
        flags.register_validator(FLAG_HOLDERS[_setting.name], _validator(_setting))
flags.register_multi_flags_validator(
    [FLAG_HOLDERS[name] for name in dict.fromkeys(name for pair in CONFLICTS for name in pair[:2])],
    _check_combination)


def values() -> dict[str, Any]:
    """The parsed value of each tfplace flag by setting name; {} before parsing."""
    if not flags.FLAGS.is_parsed():
        return {}
    return {setting.name: _read(setting, FLAG_HOLDERS[setting.name].value) for setting in SETTINGS}
