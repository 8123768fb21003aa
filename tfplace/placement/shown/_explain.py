"""Why an op ran where it did, and which ops would still run on the CPU on a GPU machine.

Both are pure functions of placement records, a device inventory (the device names that
exist) and a `KernelTable` (`tfplace.placement.ops._kernel_table`); `PlacementLog.explain()` and
`PlacementLog.gpu_readiness()` call them with this process's devices and registry.

Reasons, in the order they are tried:

* "xla": the node was compiled by XLA, which places a function whole on the device of its call
  and ignores `tf.device` inside it;
* "no-device": the asked device does not exist, so soft placement moved the op;
* "colocated": the op reads a resource (a variable's handle, say), and TensorFlow runs an op
  where its resources live, whatever `tf.device` asks;
* "no-kernel": the op has no kernel for its dtypes on the asked device type;
* "host-memory": the op computes int32 values, which TensorFlow keeps in host memory on
  accelerators by design;
* "unknown": none of these.

Example:
    >>> from tfplace.placement.shown import _explain
    >>> from tfplace.placement.ops import _kernel_table
    >>> from tfplace.placement.records._records import PlacementRecord
    >>> record = PlacementRecord("MatMul", "", "/device:CPU:0", "execute", requested="/device:GPU:0",
    ...                          dtypes=(("T", "int32"),))
    >>> found = _explain.explain([record], devices=("/device:CPU:0", "/device:GPU:0"),
    ...                         table=_kernel_table.gpu_table())
    >>> found[0].reason
    'no-kernel'
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, NamedTuple, Optional, Sequence

from tfplace._devices import parse_device
from tfplace.placement.ops import _kernels
from tfplace.placement.ops._kernel_table import KernelTable
from tfplace.placement.records._origins import is_input_op, is_plumbing
from tfplace.placement.records._records import CUSTOM_DEVICE, Kind, Origin, PlacementRecord

__all__ = ["Explanation", "Readiness", "REASONS", "needs_explaining", "explain_record", "explain", "causes",
           "user_can_act", "is_machinery", "who", "gpu_readiness", "on_host_by_design"]

REASONS = ("no-device", "no-kernel", "colocated", "host-memory", "xla", "unknown")
_HOST_VALUES = frozenset({"int32"})


class Explanation(NamedTuple):
    """Why `record` ran elsewhere than it asked (or on a CPU while a GPU was visible).

    Attributes:
      record: the `PlacementRecord` explained.
      reason: one of `REASONS`.
      message: one sentence saying why, and what to do about it.
    """

    record: PlacementRecord
    reason: str
    message: str

    def to_json(self) -> dict[str, Any]:
        """The explanation as JSON-ready data."""
        return {"record": self.record.to_json(), "reason": self.reason, "message": self.message}


class Readiness(NamedTuple):
    """Recorded ops that would still run on the CPU on a GPU machine: no GPU kernel for their dtypes.

    Attributes:
      op: the op type.
      dtypes: its type attributes, e.g. `(("T", "int32"),)`.
      gpu_dtypes: per type attribute, the dtypes that do have a GPU kernel, e.g.
        `(("T", ("bfloat16", "float32", ...)),)`; `()` when the op has no GPU kernel at all.
      sources: the `file.py:LINE`s that ran it (most frequent first; empty without sources).
      message: one sentence saying so, and what to do about it.
    """

    op: str
    dtypes: tuple[tuple[str, str], ...]
    gpu_dtypes: tuple[tuple[str, tuple[str, ...]], ...]
    sources: tuple[str, ...]
    message: str

    def to_json(self) -> dict[str, Any]:
        """The readiness entry as JSON-ready data."""
        return {"op": self.op, "dtypes": [list(p) for p in self.dtypes],
                "gpu_dtypes": [[name, list(allowed)] for name, allowed in self.gpu_dtypes],
                "sources": list(self.sources), "message": self.message}


def _type(device: str) -> str:
    return parse_device(device).device_type if device else ""


def _placed_work(record: PlacementRecord) -> bool:
    """A record on a known device that is not plumbing."""
    return bool(record.device) and not is_plumbing(record)


def needs_explaining(record: PlacementRecord, gpus_visible: bool) -> bool:
    """True if `record` ran elsewhere than it asked, or asked for nothing and ran on a CPU while a GPU was visible."""
    if not _placed_work(record):
        return False
    if record.requested:
        return record.requested != record.device
    return gpus_visible and _type(record.device) == "CPU"


def _what(record: PlacementRecord) -> str:
    return f"{record.op} (node {record.name})" if record.name else record.op


def _dtypes_text(dtypes: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{name}={value}" for name, value in dtypes) or "its dtypes"


def _allowed_text(allowed: Sequence[tuple[str, tuple[str, ...]]], dtypes: Sequence[tuple[str, str]]) -> str:
    values = dict(dtypes)
    shown = [(name, names) for name, names in allowed if values.get(name) not in names] or list(allowed)
    return "; ".join(f"{name} in {', '.join(names)}" for name, names in shown)


# dtypes that no cast turns into a number: ops on them run on the CPU on every machine
_UNCASTABLE = frozenset({"string", "variant", "resource"})


def _remedy(op: str, dtypes: Sequence[tuple[str, str]], device_type: str) -> str:
    """What to do about an op without a `device_type` kernel for `dtypes`: cast, unless no cast can help."""
    kept = sorted({value for _, value in dtypes if value in _UNCASTABLE})
    if kept:
        return (f"nothing to fix: {', '.join(kept)} values have no {device_type} kernels and no cast turns them into "
                f"numbers; if {op} is on a hot path, make numbers of them in the input pipeline (a StringLookup, "
                "tf.strings.to_number)")
    return f"cast its inputs to one of those dtypes to run it on {device_type}"


def explain_record(record: PlacementRecord, *, devices: Sequence[str], table: KernelTable,
                   wanted: Optional[str] = None) -> Explanation:
    """Why `record` ran on its device rather than on `wanted` (default: the device it asked for,
    else the first GPU of `devices`).

    Args:
      record: a placement record.
      devices: canonical names of the devices that exist, e.g. `("/device:CPU:0", "/device:GPU:0")`.
      table: the kernels of the device types involved.
      wanted: the device the op should have run on, when not the one it asked for (a guard's).
    """
    return _explain_any(record, devices=devices, table=table, wanted=wanted)


def user_can_act(record: PlacementRecord) -> bool:
    """True when the user's code made the op and, where a device was asked for, the user's code
    asked: only then does an explanation advise a change (never to code the user did not write)."""
    return record.origin.users and not is_machinery(record.requested_by)


def is_machinery(requested_by: str) -> bool:
    """True when `requested_by` names TensorFlow's or Keras' machinery rather than a user line."""
    return bool(requested_by) and ":" not in requested_by


def who(record: PlacementRecord) -> str:
    """Whose code decided where `record` should run: the machinery that asked for its device, else
    TensorFlow's or Keras' code by the record's origin."""
    if is_machinery(record.requested_by):
        return record.requested_by
    return {Origin.INPUT: "the input pipeline (tf.data)", Origin.FRAMEWORK: "TensorFlow's and Keras' own code"}.get(
        record.origin, "your code")


def _explain_any(record: PlacementRecord, *, devices: Sequence[str], table: KernelTable,
                 wanted: Optional[str] = None) -> Explanation:
    reason, why, advice = _why(record, devices=devices, table=table, wanted=wanted)
    if advice and user_can_act(record):
        return Explanation(record, reason, f"{why}: {advice}.")
    if reason == "unknown" or not advice:
        return Explanation(record, reason, f"{why}.")
    actor = who(record)
    return Explanation(record, reason, f"{why}. {actor[0].upper() + actor[1:]} placed it, not a line of yours: "
                                       "nothing to change there.")


def _why(record: PlacementRecord, *, devices: Sequence[str], table: KernelTable,
         wanted: Optional[str] = None) -> tuple[str, str, str]:
    """(reason, why it ran there, what to do about it) for `record`."""
    gpus = [d for d in devices if _type(d) == "GPU"]
    target = wanted or record.requested or (gpus[0] if gpus else "")
    asked = (f"asked for {target}" if record.requested else f"was wanted on {target}" if wanted
             else f"asked for no device while {target} was visible")
    what, device = _what(record), record.device
    target_type = _type(target)
    if record.kind == Kind.COMPILED:
        return ("xla", f"{what} was compiled by XLA with its function, which XLA places whole on the device of the "
                       f"call ({device}) and ignores tf.device('{record.requested}') inside it",
                "put the tf.device scope around the call of the jit_compile=True function, or drop jit_compile "
                "to place its ops yourself")
    if target and target not in devices:
        return ("no-device", f"{what} {'asked for' if record.requested else 'was wanted on'} {target}, which does "
                             f"not exist here (devices: {', '.join(devices) or 'none'}), so soft placement ran it on "
                             f"{device}", f"ask for one of those devices, or run where {target} exists")
    resources = _kernels.resource_inputs(record.op)
    if resources:
        scope = f"tf.device('{target}')" if target else "the device you want"
        return ("colocated", f"{what} {asked} but reads the resource in its input '{resources[0]}' (a variable or "
                             f"another TensorFlow resource), which lives on {device}, and TensorFlow runs an op "
                             "where its resources live", f"create the resource under {scope} to run it there")
    if target_type and target_type != _type(device) and _kernels.is_registered_op(record.op):
        if not table.supports(record.op, target_type, record.dtypes):
            allowed = table.supported_dtypes(record.op, target_type)
            if not table.kernels(record.op, target_type):
                return ("no-kernel", f"{what} has no {target_type} kernel for any dtype ({table.source}), so it ran "
                                     f"on {device}", f"keep it off the {target_type} path (in the input pipeline, "
                                                     "say) or use ops that have one")
            return ("no-kernel", f"{what} has no {target_type} kernel for {_dtypes_text(record.dtypes)} "
                                 f"({target_type} kernels exist for {_allowed_text(allowed, record.dtypes)}), so it "
                                 f"ran on {device}", _remedy(record.op, record.dtypes, target_type))
        outputs = _kernels.output_dtypes(record.op, record.dtypes)
        if _type(device) == "CPU" and outputs and set(outputs) <= _HOST_VALUES:
            return ("host-memory", f"{what} computes {', '.join(sorted(set(outputs)))} values, which TensorFlow "
                                   f"keeps in host memory on accelerators by design (shapes, indices), so it ran on "
                                   f"{device}", "nothing to fix unless the tensor is large, then compute it in "
                                                "another dtype (int64 or float32)")
    return ("unknown", f"{what} {asked} and ran on {device}; no missing device, resource, kernel gap, host-memory "
                       "rule or XLA explains it (TensorFlow's placer may have colocated it with an input): see "
                       "TensorFlow's own log with tfplace.configure(log_placement=True)", "")


def causes(explanations: Iterable[Explanation]) -> list[str]:
    """The explanations of what TensorFlow's, Keras' or tf.data's own code placed, one line per cause
    (who, reason, op, devices) with a count, most frequent first; the user's own are left out.

    >>> from tfplace.placement.records._records import PlacementRecord
    >>> read = PlacementRecord("ReadVariableOp", "", "/device:CPU:0", "execute", requested="/device:CPU:1",
    ...                        requested_by="MirroredStrategy", origin="framework")
    >>> causes([Explanation(read, "colocated", "")] * 6)  # doctest: +NORMALIZE_WHITESPACE
    ["MirroredStrategy initialises each replica's variables from the first replica's: 6 reads colocated
      with /device:CPU:0"]
    """
    counts: Counter = Counter()
    for found in explanations:
        record = found.record
        if user_can_act(record):
            continue
        counts[(who(record), found.reason, record.op, record.requested, record.device)] += 1
    lines = []
    for (actor, reason, op, requested, device), count in counts.most_common():
        if actor == "MirroredStrategy" and reason == "colocated" and op == "ReadVariableOp":
            lines.append(f"MirroredStrategy initialises each replica's variables from the first replica's: "
                         f"{count} reads colocated with {device}")
        else:
            asked = f"asked for {requested}, " if requested else ""
            lines.append(f"{actor}: {count} × {op} {asked}ran on {device} ({reason})")
    return lines


def explain(records: Iterable[PlacementRecord], *, devices: Sequence[str], table: KernelTable) -> list[Explanation]:
    """One `Explanation` per record that ran elsewhere than it asked, or that asked for nothing
    and ran on a CPU while a GPU (one of `devices`) was visible; in record order."""
    gpus_visible = any(_type(d) == "GPU" for d in devices)
    found: list[Explanation] = []
    cache: dict[PlacementRecord, Explanation] = {}
    for record in records:
        if not needs_explaining(record, gpus_visible):
            continue
        key = record._replace(source="", line="")  # eager ops repeat: explain each kind once
        explained = cache.get(key)
        if explained is None:
            explained = cache[key] = explain_record(key, devices=devices, table=table)
        found.append(explained._replace(record=record))
    return found


def gpu_readiness(records: Iterable[PlacementRecord], table: KernelTable) -> list[Readiness]:
    """The recorded ops that have no GPU kernel for their dtypes in `table`: they would run on
    the CPU on a GPU machine too. One entry per op type and dtypes, most frequent first.

    The user's compute comes first (origin "user"), then TensorFlow's and Keras' own. Left out:
    the input pipeline (tf.data datasets, iterators and their functions, which run on the host by
    design on every machine: `on_host_by_design()` counts them), plumbing, function calls,
    XLA-compiled nodes (XLA compiles its own GPU code), failed ops (their dtypes are not known), and
    ops on a custom device (DTensor's): what runs is the per-device functions' nodes, judged on their own.
    """
    counts: Counter = Counter()
    lines: dict[tuple, Counter] = {}
    for record in records:
        if not _readiness_candidate(record):
            continue
        key = (not record.origin.users, record.op, record.dtypes)
        counts[key] += 1
        if record.source:
            lines.setdefault(key, Counter())[record.source] += 1
    found = []
    for (framework, op, dtypes), _ in sorted(counts.most_common(), key=lambda item: item[0][0]):
        if table.supports(op, "GPU", dtypes):
            continue
        allowed = table.supported_dtypes(op, "GPU")
        if not table.kernels(op, "GPU"):
            message = (f"{op} has no GPU kernel for any dtype ({table.source}), so it runs on the CPU on a GPU "
                       "machine too: keep it off the GPU path (in the input pipeline, say) or use ops that have one.")
        else:
            message = (f"{op} has no GPU kernel for {_dtypes_text(dtypes)} ({table.source}; GPU kernels exist for "
                       f"{_allowed_text(allowed, dtypes)}), so on a GPU machine it would still run on the CPU: "
                       f"{_remedy(op, dtypes, 'GPU')}.")
        sources = tuple(line for line, _ in lines.get((framework, op, dtypes), Counter()).most_common())
        found.append(Readiness(op, dtypes, allowed, sources, message))
    return found


def _readiness_candidate(record: PlacementRecord) -> bool:
    return (_placed_work(record) and record.kind not in (Kind.COMPILED, Kind.FAILED)
            and _kernels.is_registered_op(record.op) and record.origin != Origin.INPUT and not is_input_op(record.op)
            and CUSTOM_DEVICE not in record.device)


def on_host_by_design(records: Iterable[PlacementRecord]) -> Counter:
    """The input pipeline's ops (tf.data datasets, iterators and the nodes of their functions), op
    type -> records: they run on the host on every machine by design, so readiness leaves them out."""
    return Counter(record.op for record in records
                   if _placed_work(record) and record.kind != Kind.COMPILED and _kernels.is_registered_op(record.op)
                   and (record.origin == Origin.INPUT or is_input_op(record.op)))
