"""Steps and advice as a report shows them: the steps line first, then what to change.

Example:
    >>> from tfplace.placement.steps._model import Steps
    >>> steps = Steps(19, 1, "keras-fit", "fit.py:16", 695e3, 732e3, 750e3,
    ...               {"input": 0.99, "compute": 0.003, "transfer": 0.0, "sync": 0.0, "host": 0.007, "compile": 0.0,
    ...                "idle": 0.0})
    >>> print(text(steps, [])[0])  # doctest: +NORMALIZE_WHITESPACE
    steps: 19 x 695.0 ms median (p90 732.0 ms, max 750.0 ms): input 99.0%, compute 0.3%, host 0.7%
    (keras-fit at fit.py:16; 1 warm-up step left out)
"""

from __future__ import annotations

import html as _html
from typing import Any, Sequence

from tfplace.placement.steps._model import PHASES
from tfplace._names import duration_text, size_text

__all__ = ["text", "html", "shares"]


def shares(figures: dict[str, float]) -> str:
    """`input 99.0%, compute 0.3%`: the phases that took at least 0.05 % of the time, in order."""
    return ", ".join(f"{phase} {100 * figures[phase]:.1f}%" for phase in PHASES if figures.get(phase, 0.0) >= 0.0005)


def _most(phases: dict[str, float]) -> str:
    """What filled a step: its largest phase and that phase's share of the step."""
    phase = max(PHASES, key=lambda name: phases.get(name, 0.0))
    wall = sum(phases.values())
    return f"{phase} {100 * phases[phase] / wall:.0f}%" if wall else phase


def _what(steps: Any) -> str:
    what = steps.kind + (f" {steps.name}" if steps.kind in ("function", "marked") and steps.name else "")
    warm = f"; {steps.warmup} warm-up step{'s' if steps.warmup != 1 else ''} left out" if steps.warmup else ""
    return f"{what}{' at ' + steps.source if steps.source else ''}{warm}"


def text(steps: Any, advice: Sequence[Any]) -> list[str]:
    """The steps line, the devices' busy time in steady steps, and each piece of advice with its fix."""
    if not steps.count and not steps.warmup:
        return [f"steps: none ({steps.reason})"]
    if steps.median_us is None:
        return [f"steps: {steps.count} ({_what(steps)}); no times: {steps.reason}"] + [
            "  other loops: " + ", ".join(f"{kind} at {source or 'an unknown line'} ({n} steps)"
                                          for kind, source, n in steps.others[:5])][:1 if steps.others else 0]
    lines = [f"steps: {steps.count} x {duration_text(steps.median_us)} median (p90 {duration_text(steps.p90_us)}, max "
             f"{duration_text(steps.max_us)}): {shares(steps.shares)} ({_what(steps)})"]
    if steps.reason:
        lines.append(f"  ({steps.reason})")
    if steps.others:
        lines.append("  other loops: " + ", ".join(f"{kind} at {source or 'an unknown line'} ({n} steps)"
                                                   for kind, source, n in steps.others[:5]))
    if steps.outliers:
        lines.append(f"  unusual step{'s' if len(steps.outliers) != 1 else ''}, left out of the shares: " + ", ".join(
            f"#{step.index} {duration_text(step.wall_us)} ({_most(step.phases)})" for step in steps.outliers[:5])
            + (f" and {len(steps.outliers) - 5} more" if len(steps.outliers) > 5 else ""))
    if steps.per_device:
        lines.append("  busy in steady steps: " + ", ".join(
            f"{device.rpartition('/')[2] if device.startswith('/device:') else device} {duration_text(busy)} "
            f"({100 * share:.1f}%)" for device, (busy, share) in steps.per_device.items()))
    for device, gpu in steps.gpus.items():
        copies = (f", from host memory {size_text(gpu['h2d_bytes'])} in {duration_text(gpu['h2d_us'])} (pageable "
                  f"{size_text(gpu['pageable_bytes'])}, pinned {size_text(gpu['pinned_bytes'])})"
                  if gpu["h2d_bytes"] else "")
        lines.append(f"  {device.rpartition('device:')[2]} per step: kernels {duration_text(gpu['compute_us'])}, "
                     f"no kernel running {duration_text(gpu['idle_us'])}{copies}")
    if steps.input is not None and steps.shares.get("input", 0.0) >= 0.01:
        stage = steps.input
        lines.append(f"  input: slowest stage {stage.dataset_op} at {stage.source or 'an unknown line'}, "
                     f"{duration_text(stage.per_element_us)} per element, "
                     f"{'parallelism ' + str(stage.parallelism) if stage.parallelism else 'not parallel'}, "
                     f"{'prefetched' if stage.prefetch else 'no prefetch after it'}")
    if advice:
        lines.append("advice (most costly first):")
        for item in advice:
            lines.append(f"  [{item.severity}] {item.rule} at {item.source or 'an unknown line'}: {item.message}")
            lines.append(f"      fix: {item.fix}")
    else:
        lines.append("advice: none (no rule holds for these steps)")
    return lines


def html(steps: Any, advice: Sequence[Any]) -> str:
    """The same for a notebook: the steps line, then a list of the advice."""
    head = text(steps, advice)[0]
    items = "".join(f"<li><b>{_html.escape(a.rule)}</b> at <code>{_html.escape(a.source)}</code>: "
                    f"{_html.escape(a.message)}<br>fix: <code>{_html.escape(a.fix)}</code></li>" for a in advice)
    return f"<p><b>{_html.escape(head)}</b></p>" + (f"<ul>{items}</ul>" if items else "")
