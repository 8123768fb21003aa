"""Names TensorFlow gives functions, and the small formats every report shares: sizes and durations.

A traced function's concrete name is `__inference_<python name>_<number>` (`__forward_`/`__backward_` for a
gradient's halves); DTensor runs per-device functions named `<op>__func_<h>_<h>_<n>`.

Example:
    >>> function_name("__inference_train_step_42"), is_function_call("MatMul")
    ('train_step', False)
    >>> size_text(3 * 2 ** 20), duration_text(1500.0), duration_text(80.0)
    ('3.0 MiB', '1.5 ms', '80 us')
"""

from __future__ import annotations

import re
from typing import Optional

__all__ = ["function_name", "is_function_call", "size_text", "duration_text"]

_CONCRETE = re.compile(r"^__(?:inference|forward|backward)_(.+?)_\d+$")


def is_function_call(op: str) -> bool:
    """True for an eager call of a function (its record's op is the function's name, `__inference_f_12`,
    or a per-device function DTensor runs, `MatMul__func_<h>_<h>_2`)."""
    return op.startswith("__") or "__func_" in op


def function_name(function: str) -> str:
    """The Python name of a concrete function (`__inference_train_step_42` -> `train_step`); any other name
    as it is."""
    found = _CONCRETE.match(function)
    return found[1] if found else function


def size_text(count: Optional[float]) -> str:
    """Bytes as people read them: "512 B", "4.0 MiB" ("?" when unknown)."""
    if count is None:
        return "?"
    value = float(count)
    for unit in ("B", "KiB", "MiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def duration_text(us: float) -> str:
    """Microseconds as people read them: `80 us` below a millisecond, else `1.5 ms`."""
    return f"{us / 1000:.1f} ms" if us >= 1000 else f"{us:.0f} us"
