"""`configure()`: every placement setting in one order-safe call.

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

from tfplace.config import _gpu_inventory
from tfplace.config import _settings
from tfplace import _tensorflow
from tfplace._errors import RuntimeInitializedError
from tfplace.config._gpu_plan import GpuPlan, plan_gpus

__all__ = ["Config", "configure"]

# Caps that cannot be read back from TensorFlow, as last applied in this process.
_CAPS = ("memory_fraction", "memory_limit_mb", "logical_gpus")
_applied: dict[str, Any] = dict.fromkeys(_CAPS)


@dataclasses.dataclass(frozen=True)
class Config:
    """What is in force after `configure()`: the nine settings and the devices.

    `sources` says where each setting given to the call came from
    (argument, flag or environment variable).
    """

    soft_placement: bool
    log_placement: bool
    device_policy: str
    memory_growth: Optional[bool]
    memory_fraction: Optional[float]
    memory_limit_mb: Optional[int]
    visible_gpus: tuple[int, ...]
    logical_cpus: int
    logical_gpus: Optional[int]
    physical_devices: tuple[str, ...]
    logical_devices: tuple[str, ...]
    runtime_started: bool
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)

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

    Returns:
      A frozen `Config` of what is in force.

    Raises:
      ConfigurationError: a value is invalid, settings conflict, or a GPU index
        does not exist.
      RuntimeInitializedError: the runtime has started and a fixed setting asks
        for a state other than the one in force.
    """
    arguments = {name: value for name, value in locals().items() if name in _settings.NAMES}
    chosen = _settings.resolve(arguments, _flag_values(), os.environ)
    value = {name: sourced.value for name, sourced in chosen.items()}
    sources = {name: sourced.source for name, sourced in chosen.items()}

    gpu_names = ("visible_gpus", "memory_growth", "memory_fraction", "memory_limit_mb", "logical_gpus")
    plan: Optional[GpuPlan] = None
    if any(name in value for name in gpu_names):
        import tensorflow as tf

        inventory = _gpu_inventory.read_gpus(len(tf.config.list_physical_devices("GPU")))
        plan = plan_gpus(inventory, **{n: value.get(n) for n in gpu_names}, sources=sources)
        if not inventory:
            logging.info("tfplace: no GPU visible, so %s has nothing to apply to",
                         ", ".join(n for n in gpu_names if n in value))

    started = _tensorflow.runtime_started()
    if started:
        _check_in_force(plan, value, chosen)
    else:
        _tensorflow.apply_fixed(plan, value.get("logical_cpus"), log_placement=value.get("log_placement"))
        if any(name in value for name in _CAPS):
            _applied.update({name: value.get(name) for name in _CAPS})
    _tensorflow.apply_runtime(value.get("soft_placement"), value.get("device_policy"))
    return current(sources)


def _check_in_force(plan: Optional[GpuPlan], value: dict[str, Any], chosen: dict[str, _settings.Sourced]) -> None:
    """Raises unless every fixed setting asked for is already in force."""
    state = _tensorflow.fixed_state()
    wrong = []
    if plan is not None:
        if "visible_gpus" in value and plan.visible != state["visible_gpus"]:
            wrong.append((_settings.describe(chosen, "visible_gpus"), f"visible GPUs are {list(state['visible_gpus'])}"))
        if "memory_growth" in value and state["visible_gpus"] and plan.memory_growth != state["memory_growth"]:
            wrong.append((_settings.describe(chosen, "memory_growth"), f"memory growth is {state['memory_growth']}"))
        asked = [_settings.describe(chosen, n) for n in _CAPS if n in value]
        if asked and plan.memory_limits != state["memory_limits"]:
            wrong.append((" and ".join(asked), f"logical GPU memory limits (MiB) are {list(state['memory_limits'])}"))
    if "log_placement" in value and value["log_placement"] != state["log_placement"]:
        wrong.append((_settings.describe(chosen, "log_placement"),
                      f"placement logging is {'on' if state['log_placement'] else 'off'}, as it was when the "
                      "runtime started (TensorFlow 2.21 fixes it then)"))
    if "logical_cpus" in value and value["logical_cpus"] != state["logical_cpus"]:
        wrong.append((_settings.describe(chosen, "logical_cpus"), f"{state['logical_cpus']} logical CPU(s) exist"))
    if wrong:
        detail = "; ".join(f"{asked} cannot be applied: {now}" for asked, now in wrong)
        raise RuntimeInitializedError(
            f"TensorFlow's runtime has already started, so its devices are fixed. {detail}. "
            "Allowed after start: the state already in force, and any soft_placement and device_policy; "
            "call tfplace.configure() before the first TensorFlow op to change the rest"
        )


def current(sources: Optional[Mapping[str, str]] = None) -> Config:
    """The `Config` in force now, without changing anything or starting the runtime."""
    state = _tensorflow.fixed_state()
    logical = _tensorflow.logical_device_names()
    gpu_counts = {len(limits) for limits in state["memory_limits"] if limits}
    return Config(
        **_tensorflow.runtime_settings(),
        log_placement=state["log_placement"],
        memory_growth=state["memory_growth"],
        memory_fraction=_applied["memory_fraction"],
        memory_limit_mb=_applied["memory_limit_mb"],
        visible_gpus=state["visible_gpus"],
        logical_cpus=state["logical_cpus"],
        logical_gpus=gpu_counts.pop() if len(gpu_counts) == 1 else _applied["logical_gpus"],
        physical_devices=_tensorflow.physical_device_names(),
        logical_devices=logical,
        runtime_started=_tensorflow.runtime_started(),
        sources=dict(sources or {}),
    )
