"""Pure planning of GPU settings over a device inventory.

`plan_gpus()` turns the GPU settings of `configure()` into what must be applied
to each GPU TensorFlow sees: which are visible, whether memory grows, and the
memory limit of each logical device. It touches neither TensorFlow nor CUDA,
so any machine can be planned for from a recorded inventory.

Example:
    >>> import tfplace
    >>> v100s = [tfplace.GpuInfo(i, "Tesla V100-SXM2-16GB", 16160) for i in range(8)]
    >>> tfplace.plan_gpus(v100s, memory_fraction=0.4).memory_limits[0]
    (6464,)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

from tfplace._errors import ConfigurationError
from tfplace.machine._gpus import GpuInfo

__all__ = ["GpuPlan", "plan_gpus"]


@dataclasses.dataclass(frozen=True)
class GpuPlan:
    """What to apply to TensorFlow's GPUs.

    Attributes:
      visible: indices of the physical GPUs to keep visible, in order.
      memory_growth: the memory growth of every visible GPU, None to leave it.
      memory_limits: per visible GPU, the MiB limit of each of its logical
        devices; an empty tuple leaves that GPU as one unconfigured device.
    """

    visible: tuple[int, ...]
    memory_growth: Optional[bool]
    memory_limits: tuple[tuple[int, ...], ...]


def plan_gpus(
    inventory: Sequence[GpuInfo],
    *,
    visible_gpus: Optional[Sequence[int]] = None,
    memory_growth: Optional[bool] = None,
    memory_fraction: Optional[float] = None,
    memory_limit_mb: Optional[int] = None,
    logical_gpus: Optional[int] = None,
    sources: Optional[dict[str, str]] = None,
) -> GpuPlan:
    """Plans the GPU settings for the GPUs in `inventory`.

    Settings are assumed valid one by one (each by its own declaration); this checks
    them against the machine. A cap (`memory_fraction` of each GPU's own total,
    or `memory_limit_mb`) applies to every logical device; `logical_gpus=N`
    without a cap gives each logical device an equal share of its GPU.

    Args:
      inventory: the GPUs TensorFlow sees, indexed as TensorFlow indexes them.
      visible_gpus: indices to keep visible; None keeps all.
      memory_growth: memory growth for every visible GPU (TensorFlow requires
        the same value on all of them); None leaves it.
      memory_fraction: cap each visible GPU at this share of its total memory.
      memory_limit_mb: cap each visible GPU at this many MiB.
      logical_gpus: split each visible GPU into this many logical GPUs.
      sources: where each setting came from, quoted in errors.

    Returns:
      A `GpuPlan`.

    Raises:
      ConfigurationError: a visible index does not exist, a cap exceeds a GPU's
        memory, or a GPU's total memory is needed but unknown.
    """
    sources = sources or {}
    known = [gpu.index for gpu in inventory]
    if visible_gpus is None:
        visible = tuple(known)
    else:
        missing = [i for i in visible_gpus if i not in known]
        if missing:
            raise ConfigurationError(
                f"visible_gpus={list(visible_gpus)!r} (from {sources.get('visible_gpus', 'argument visible_gpus')}) "
                f"names GPU {', '.join(map(str, missing))}, which does not exist: "
                f"this machine has {len(known)} GPU(s){' with indices ' + str(known) if known else ''}"
            )
        visible = tuple(visible_gpus)
    by_index = {gpu.index: gpu for gpu in inventory}
    limits: list[tuple[int, ...]] = []
    for index in visible:
        gpu = by_index[index]
        cap = _cap(gpu, memory_fraction, memory_limit_mb, logical_gpus, sources)
        if cap is None:
            limits.append(())
        else:
            limits.append((cap,) * (logical_gpus or 1))
    return GpuPlan(visible, memory_growth, tuple(limits))


def _cap(
    gpu: GpuInfo,
    memory_fraction: Optional[float],
    memory_limit_mb: Optional[int],
    logical_gpus: Optional[int],
    sources: dict[str, str],
) -> Optional[int]:
    """The MiB limit of each logical device of `gpu`, None for no configuration."""
    if memory_fraction is None and memory_limit_mb is None and logical_gpus is None:
        return None
    where = f"GPU {gpu.index} ({gpu.name})"
    count = logical_gpus or 1
    total = gpu.total_mib
    if memory_limit_mb is not None:
        cap, asked = memory_limit_mb, f"memory_limit_mb={memory_limit_mb}"
    elif total is None:
        asked = "memory_fraction" if memory_fraction is not None else "logical_gpus"
        raise ConfigurationError(
            f"{asked} (from {sources.get(asked, 'argument ' + asked)}) needs the total memory of {where}, "
            "which neither NVML nor nvidia-smi reported: give memory_limit_mb instead"
        )
    elif memory_fraction is not None:
        cap, asked = max(1, math.floor(total * memory_fraction)), f"memory_fraction={memory_fraction}"
    else:
        return max(1, total // count)
    if total is not None and cap * count > total:
        name = asked.split("=")[0]
        raise ConfigurationError(
            f"{asked} (from {sources.get(name, 'argument ' + name)}) gives {count} logical GPU(s) of "
            f"{cap} MiB, more than {where}'s {total} MiB: allowed at most {total // count} MiB per logical GPU"
        )
    return cap
