"""A placement log as JSON and back: what `PlacementLog.to_json()` writes (and `tfplace trace --json`),
identical events stored once with their `count`, and what `PlacementLog.from_json()` reads.

Example:
    >>> from tfplace.placement.records import _log_json
    >>> from tfplace.placement.records._records import PlacementRecord
    >>> mul = PlacementRecord("Mul", "", "/device:CPU:0", "execute")
    >>> data = _log_json.to_json([mul, mul], [], {}, [], complete=True)
    >>> [(r["op"], r["count"]) for r in data["records"]], len(_log_json.from_json(data)[0])
    ([('Mul', 2)], 2)
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Mapping, Sequence, Union

from tfplace.placement.records._records import CopyRecord, PlacementRecord

__all__ = ["JSON_FORMAT", "to_json", "parsed", "from_json", "uncertain_from_json"]

# What `to_json()` writes: identical events once, with a count.
JSON_FORMAT = "tfplace-log/2"


def _count(item: Mapping[str, Any]) -> int:
    count = item.get("count", 1)
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"count {count!r} is not a positive integer")
    return count


def _record_from(item: Mapping[str, Any]) -> PlacementRecord:
    fields = {key: value for key, value in item.items() if key in PlacementRecord._fields}
    fields["dtypes"] = tuple((str(name), str(value)) for name, value in fields.get("dtypes", ()))
    return PlacementRecord(**fields)


def _copy_from(item: Mapping[str, Any]) -> CopyRecord:
    return CopyRecord(**{key: value for key, value in item.items() if key in CopyRecord._fields})


def to_json(records: Sequence[PlacementRecord], copies: Sequence[CopyRecord], runs: Mapping[tuple[str, str, str], int],
            reasons: Sequence[str], *, complete: bool, transfers: Sequence[Any] = (), cost: Any = None,
            memory: Any = None, uncertain: Sequence[PlacementRecord] = (),
            uncertain_reasons: Sequence[str] = ()) -> dict[str, Any]:
    """A log's records, copies, function-node executions (`runs`) and why it is incomplete (`reasons`), with
    its transfers, cost and memory, as JSON-ready data; `uncertain`: the records of functions TensorFlow's
    threads instantiate a varying number of times, and the reasons that only they make."""
    return {"format": JSON_FORMAT, "complete": complete, "incomplete_reason": "; ".join(reasons),
            "incomplete_reasons": list(reasons),
            "uncertain": {"reasons": list(uncertain_reasons),
                          "records": [dict(r.to_json(), count=n) for r, n in Counter(uncertain).items()]},
            "records": [dict(r.to_json(), count=n) for r, n in Counter(records).items()],
            "copies": [dict(c.to_json(), count=n) for c, n in Counter(copies).items()],
            "runs": [[device, op, category, n] for (device, op, category), n in sorted(runs.items())],
            "transfers": [t.to_json() for t in transfers], "cost": cost.to_json() if cost is not None else None,
            "memory": memory.to_json() if memory is not None else None}


def parsed(text: Union[str, bytes, dict]) -> Any:
    """The parsed JSON of what `to_json()` wrote (TypeError or ValueError naming what is wrong)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if isinstance(text, str):
        try:
            return json.loads(text)
        except ValueError as err:
            raise ValueError(f"PlacementLog.from_json received text that is not JSON (from argument text): "
                             f"{err}; allowed is what PlacementLog.to_json() or tfplace trace --json wrote") from None
    if isinstance(text, dict):
        return text
    raise TypeError(f"PlacementLog.from_json received {type(text).__name__} (from argument text): allowed "
                    "is str, bytes or the dict that PlacementLog.to_json() returned")


def uncertain_from_json(text: Union[str, bytes, dict]) -> tuple[list[PlacementRecord], list[str]]:
    """(records, reasons) of the uncertain functions `to_json()` wrote (none in data written before it did)."""
    data = parsed(text)
    uncertain = (data.get("uncertain") if isinstance(data, dict) else None) or {}
    try:
        records = [record for item in uncertain.get("records", []) for record in [_record_from(item)] * _count(item)]
    except (TypeError, ValueError, KeyError) as err:
        raise ValueError(f"PlacementLog.from_json received an uncertain record it cannot read (from argument text): "
                         f"{err!r}; allowed is what PlacementLog.to_json() or tfplace trace --json wrote") from None
    return records, [str(reason) for reason in uncertain.get("reasons", [])]


def from_json(text: Union[str, bytes, dict]) -> tuple[list[PlacementRecord], list[CopyRecord], Counter, list[str]]:
    """(records, copies, runs, reasons) of what `to_json()` wrote, each as many times as counted.

    Raises:
      TypeError: `text` is neither JSON text nor the parsed dict.
      ValueError: `text` is not a tfplace log (not JSON, or without its records), naming what is wrong.
    """
    data = parsed(text)
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise ValueError("PlacementLog.from_json received JSON without a list of records (from argument text): "
                         "allowed is what PlacementLog.to_json() or tfplace trace --json wrote")
    try:
        records = [record for item in data["records"] for record in [_record_from(item)] * _count(item)]
        copies = [copy for item in data.get("copies", []) for copy in [_copy_from(item)] * _count(item)]
        runs = Counter({(device, op, category): int(n) for device, op, category, n in data.get("runs", [])})
    except (TypeError, ValueError, KeyError) as err:
        raise ValueError(f"PlacementLog.from_json received a record it cannot read (from argument text): {err!r}; "
                         "allowed is what PlacementLog.to_json() or tfplace trace --json wrote") from None
    reasons = data.get("incomplete_reasons")
    if reasons is None:
        reasons = [data["incomplete_reason"]] if data.get("incomplete_reason") else []
    return records, copies, runs, [str(reason) for reason in reasons]
