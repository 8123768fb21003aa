"""`configure()`: every placement setting in one order-safe call, and the `Config` it returns.

Example:
    >>> import tfplace
    >>> config = tfplace.configure(soft_placement=True, logical_cpus=2)
    >>> config.logical_devices
    ('/device:CPU:0', '/device:CPU:1')
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Mapping, Optional, Sequence

from absl import logging

from tfplace import _tensorflow
from tfplace._errors import RuntimeInitializedError
from tfplace.config._gpu_plan import GpuPlan, plan_gpus
from tfplace.machine import _doctor, _gpus
from tfplace.config._settings import BY_NAME, SETTINGS, Sourced, describe, resolve

__all__ = ["Config", "configure", "current"]

# The fixed settings as last applied before runtime start: what `Config` says for those TensorFlow cannot report.
_applied: dict[str, Any] = {}


_Fields: Any = dataclasses.make_dataclass(
    "Config",
    [*((s.name, Optional[s.kind.type]) for s in SETTINGS),
     ("physical_devices", tuple[str, ...]), ("logical_devices", tuple[str, ...]), ("runtime_started", bool),
     ("sources", Mapping[str, str], dataclasses.field(default_factory=dict))],
    frozen=True,
)


class Config(_Fields):
    """What is in force after `configure()`: one field per setting (None where unknown, e.g. memory
    growth without a GPU), the physical and logical device names, and whether the runtime has started.

    `sources` says where each setting given to the call came from (argument, flag or environment variable).
    """

    def __repr__(self) -> str:
        """One field per line, as Python would read it back."""
        fields = "".join(f"    {f.name}={getattr(self, f.name)!r},\n" for f in dataclasses.fields(self))
        return f"tfplace.Config(\n{fields})"

    def __str__(self) -> str:
        rows = [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "sources"]
        width = max(len(name) for name, _ in rows)
        lines = ["tfplace.Config("]
        for name, value in rows:
            shown = ", ".join(value) if isinstance(value, tuple) and name.endswith("devices") else value
            source = f"  [{self.sources[name]}]" if name in self.sources else ""
            lines.append(f"  {name:<{width}} = {shown}{source}")
        return "\n".join(lines + [")"])


def _flag_values() -> dict[str, Any]:
    """Values of tfplace's absl flags, when `tfplace.flags` is imported and parsed."""
    if "tfplace.flags" not in sys.modules:
        return {}
    return sys.modules["tfplace.flags"].values()


def configure(
    *,
    soft_placement: Optional[bool] = None,
    log_placement: Optional[bool] = None,
    device_policy: Optional[str] = None,
    memory_growth: Optional[bool] = None,
    memory_fraction: Optional[float] = None,
    memory_limit_mb: Optional[int] = None,
    visible_gpus: Optional[Sequence[int]] = None,
    logical_cpus: Optional[int] = None,
    logical_gpus: Optional[int] = None,
    cpu_allocator: Optional[str] = None,
) -> Config:
    """Sets device placement for this process; call once, before the first TensorFlow op.

    Each setting comes from, lowest priority first: TensorFlow's default, an
    environment variable (`TF_FORCE_GPU_ALLOW_GROWTH`, `TFPLACE_<NAME>`), an absl
    flag (`--<name>`, once `tfplace.flags` is imported and flags are parsed),
    and the keyword argument. None leaves a setting to the lower levels.

    Soft placement and the device policy are applied at any time. Visible
    GPUs, memory growth, memory caps and logical devices are fixed when the
    runtime starts: after that, asking for the state already in force does
    nothing, and asking for another raises.

    Placement logging (TensorFlow's own "Executing op" lines on the
    terminal, the guide's behaviour) is also fixed at runtime start in
    TensorFlow 2.21: `log_placement` is applied before start and checked after
    it, like the device settings. `capture_placement()` does not need it.

    Everything is checked before anything is applied: a rejected call changes
    no setting.

    >>> import tfplace
    >>> tfplace.configure(device_policy="warn").device_policy
    'warn'

    Args:
      soft_placement: let ops without a kernel on the asked device run elsewhere.
      log_placement: turn TensorFlow's own placement logging on (True) or off.
      device_policy: "silent", "warn" (log implicit cross-device copies) or
        "explicit" (raise on them).
      memory_growth: allocate GPU memory as needed, on every visible GPU.
      memory_fraction: cap each visible GPU at this share, in (0, 1], of its own total memory.
      memory_limit_mb: cap each visible GPU at this many MiB.
      visible_gpus: indices of the GPUs TensorFlow may use (after CUDA_VISIBLE_DEVICES).
      logical_cpus: split the host CPU into this many logical devices.
      logical_gpus: split each visible GPU into this many logical GPUs.
      cpu_allocator: "bfc" makes the CPU's allocator TensorFlow's BFC allocator, which reports every
        allocation to the profiler (`capture_placement(memory=True)` then counts memory inside functions on
        CPUs); "default" leaves oneDNN's or the plain one. Fixed at runtime start
        (`TF_CPU_ALLOCATOR_USE_BFC`).

    Returns:
      A frozen `Config` of what is in force.

    Raises:
      ConfigurationError: a value is invalid, settings conflict, or a GPU index
        does not exist.
      RuntimeInitializedError: the runtime has started and a fixed setting asks
        for a state other than the one in force.
    """
    arguments = dict(locals())  # the keywords, one per declared setting (tests/test_settings.py checks)
    chosen = resolve(arguments, _flag_values(), os.environ)
    value = {name: sourced.value for name, sourced in chosen.items()}
    sources = {name: sourced.source for name, sourced in chosen.items()}

    gpu_names = [s.name for s in SETTINGS if s.gpu]
    plan: Optional[GpuPlan] = None
    if any(name in value for name in gpu_names):
        inventory = _gpus.read_gpus(_tensorflow.gpu_count())
        plan = plan_gpus(inventory, **{n: value.get(n) for n in gpu_names}, sources=sources)
        if not inventory:
            logging.info("tfplace: no GPU visible, so %s has nothing to apply to",
                         ", ".join(n for n in gpu_names if n in value))

    if _tensorflow.runtime_started():
        _check_in_force(plan, value, chosen)
    else:
        if plan is not None:
            _tensorflow.apply_gpus(plan.visible, plan.memory_growth, plan.memory_limits)
        for setting in SETTINGS:
            if setting.fixed and setting.apply and setting.name in value:
                getattr(_tensorflow, setting.apply)(value[setting.name])
        asked = {s.state for s in SETTINGS if s.fixed and s.name in value}
        _applied.update({s.name: value.get(s.name) for s in SETTINGS if s.fixed and not s.reads and s.state in asked})
    for setting in SETTINGS:  # those TensorFlow lets change at any time
        if not setting.fixed and setting.name in value:
            getattr(_tensorflow, setting.apply)(value[setting.name])
    _doctor.warn_if_unused(_tensorflow.gpu_count(), "tfplace.configure()")
    return current(sources)


def _check_in_force(plan: Optional[GpuPlan], value: dict[str, Any], chosen: dict[str, Sourced]) -> None:
    """Raises unless every fixed setting asked for is already in force."""
    asked: dict[str, list[str]] = {}
    for setting in SETTINGS:
        if setting.fixed and setting.name in value:
            asked.setdefault(setting.state, []).append(setting.name)
    state = {key: getattr(_tensorflow, key)() for key in asked}
    wanted = {BY_NAME[names[0]].state: value[names[0]] for names in asked.values()}
    if plan is not None:
        gpus_visible = bool(_tensorflow.visible_gpus())
        wanted.update(visible_gpus=plan.visible, memory_limits=plan.memory_limits,
                      memory_growth=plan.memory_growth if gpus_visible else None)
    wrong = [f"{' and '.join(describe(chosen, n) for n in names)} cannot be applied: "
             f"{BY_NAME[names[0]].says(state[key])}"
             for key, names in asked.items() if wanted[key] != state[key]]
    if wrong:
        raise RuntimeInitializedError(
            f"TensorFlow's runtime has already started, so its devices are fixed. {'; '.join(wrong)}. "
            "Allowed after start: the state already in force, and any soft_placement and device_policy; "
            "call tfplace.configure() before the first TensorFlow op to change the rest"
        )


def current(sources: Optional[Mapping[str, str]] = None) -> Config:
    """The `Config` in force now, without changing anything or starting the runtime."""
    return Config(
        **{s.name: getattr(_tensorflow, s.reads)() if s.reads else _applied.get(s.name) for s in SETTINGS},
        physical_devices=_tensorflow.physical_device_names(),
        logical_devices=_tensorflow.logical_device_names(),
        runtime_started=_tensorflow.runtime_started(),
        sources=dict(sources or {}),
    )
