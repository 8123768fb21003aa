"""Runs a conformance program under the harness and compares the capture with TensorFlow's own log.

    from conformance import compare
    result = compare.run_program(compare.PROGRAMS / "a_gpu_guide.py", onednn="0")
    print(result.problems())            # [] when the capture agrees with TensorFlow's log

The harness runs in a subprocess; its stdout and stderr come back through pipes (nothing is
redirected inside the program). TensorFlow's stderr is read by `tflog` (never by tfplace), the
capture is the harness's JSON (`log.to_json()`), and `compare_logs()` checks:

* eager events: TensorFlow's `Executing op` lines and the capture's `execute` + `failed` records,
  as multisets of (op, device), are equal, except `_EagerConst`: the constants TensorFlow makes
  from Python values in its C layer, which no Python hook sees (DESIGN.md: not records; counted),
  and records on a custom device (DTensor's), for which TensorFlow logs what the device runs; in a
  cluster, records on another task's device are that task's lines (`Result.eager_remote`, scored
  against its log by the caller);
* function nodes: every placer line that is not an eager op's wrapper has a capture record of
  kind `place`, `removed` or `compiled` with the same node name and op type, on the same device
  (a `removed` record with device "" counts); capture `place` records without a placer line are
  extras, a failure too (`EXTRAS_FAIL`);
* copies: TensorFlow's "warn"-policy copy lines are a sub-multiset of the capture's copies, as
  (op, input index, from device, to device), except what DESIGN.md leaves out of the copies:
  explicit copies (`Identity`/`IdentityN` under a device) and `_EagerConst`'s copies of a Python
  value to the device it is made on (listed as exempt); a host-memory input copied to the host (the
  line's expected device is not the op's) is an implicit copy like any other;
  capture copies without a line are listed as extras (TensorFlow's own copies under a silent
  device policy, such as cross-replica reductions, are legitimately there: a human judges);
* removed records: each names a node TensorFlow's placer printed (same name and op type, and
  device where it has one); one that names none is a record TensorFlow never placed, a failure;
* false copies: a capture copy without a "warn"-policy line fails, unless the program declares
  its op type as copied by TensorFlow's own code under a silent policy
  (`# conformance: silent-policy copies: AddN`, a strategy's cross-replica reduction);
* function transfers: the capture's `kind="function"` copies are as many as the cross-device
  `_Send` edges of the functions the block called, one per call, counted in TensorFlow's
  partitioned graphs by `sends.py` (control edges counted, host-memory values left out), and each one's
  bytes are its tensor's static shape times its dtype's size where TensorFlow knows the shape;
* `PlacementLog.from_text` on the same stderr gives the capture's eager events and function
  nodes (a parity check of tfplace against itself, not part of the referee);
* `complete` is what the program declares (`# conformance: expect complete=False`; True
  otherwise); a log that says it is incomplete, as its program expects, may lack function nodes
  (what its reason names), never hold extra ones; one that names uncertain functions (a parallel
  interleave's) may lack only their nodes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

if __package__:
    from . import tflog
else:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import tflog

try:  # an ecosystem library's own ops, registered here too: their definitions name their eager wrappers' arguments
    import tensorflow_text  # noqa: F401  (beside tensorflow-cpu: pip install --no-deps tensorflow-text)
except ImportError:
    pass

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PROGRAMS = HERE / "programs"
HARNESS = HERE / "harness.py"

# Copies DESIGN.md does not count as implicit: `tf.identity` under a device is the explicit way to copy.
EXPLICIT_COPY_OPS = frozenset({"Identity", "IdentityN"})
# Constants made from Python values: TensorFlow's C layer runs them, below every Python hook.
CONSTANT_OP = "_EagerConst"
# Ops on a custom device (DTensor's `/device:CUSTOM:0`) run through that device's own code, never through
# the eager executor that logs `Executing op`: DESIGN.md records them on it, TensorFlow logs what the device
# runs (its per-device functions). Their records have no line to match.
CUSTOM_DEVICE = "/device:CUSTOM:"
# A `place` record is a node "TensorFlow placed while the block was open, under the name its placer log
# prints": one without a placer line breaks the contract. False reports extras without failing.
EXTRAS_FAIL = True
FUNCTION_KINDS = frozenset({"place", "removed", "compiled"})
EAGER_KINDS = frozenset({"execute", "failed"})
_EXPECT = re.compile(r"^#\s*conformance:\s*expect\s+complete\s*=\s*(True|False)"
                     r"(?:\s+before\s+TensorFlow\s+(\d+)\.(\d+))?\s*$", re.M)
SHOW = 12  # differences listed per check


def programs() -> list[Path]:
    return sorted(PROGRAMS.glob("*.py"))


def expected_complete(program: Path) -> bool:
    """What the program declares (`# conformance: expect complete=False`, or `... before TensorFlow 2.18`: only
    on older releases), True where it declares nothing."""
    m = _EXPECT.search(program.read_text(encoding="utf-8"))
    if m is not None and m.group(2):
        import tensorflow as tf

        if tuple(int(p) for p in tf.__version__.split(".")[:2]) >= (int(m.group(2)), int(m.group(3))):
            return True
    return m is None or m.group(1) == "True"


# `PlacementLog.from_text` reads one stream in order: where several threads' eager-op wrappers
# interleave (a collective's launch threads), it cannot tell them apart. A program says so.
_INTERLEAVED = re.compile(r"^#\s*conformance:\s*threads\s+interleave\s*$", re.M)


def interleaved(program: Path) -> bool:
    return bool(_INTERLEAVED.search(program.read_text(encoding="utf-8")))


# Copies TensorFlow's own code makes under a silent device policy (a strategy's cross-replica
# reduction) happen without a "warn" line: a program names their op types, a human's judgment.
_SILENT = re.compile(r"^#\s*conformance:\s*silent-policy copies:\s*(.+?)\s*$", re.M)


def silent_copies(program: Path) -> frozenset[str]:
    m = _SILENT.search(program.read_text(encoding="utf-8"))
    return frozenset(op.strip() for op in m.group(1).split(",")) if m else frozenset()


@dataclass
class Result:
    program: str
    onednn: str
    seconds: float = 0.0
    returncode: int = 0
    error: str = ""                      # why there is nothing to compare (crash, timeout)
    capture_source: str = ""             # "to_json" or "records" (harness fallback)
    # eager
    eager_tf: int = 0
    eager_capture: int = 0
    constants: int = 0                    # TensorFlow's _EagerConst lines, not records (see above)
    eager_missing: list = field(default_factory=list)    # [(op, device, count, note)] in TF's log, not captured
    eager_extra: list = field(default_factory=list)      # [(op, device, count)] captured, not in TF's log
    # In a cluster: the capture's eager events on other tasks' devices (a coordinator's remote ops and
    # scheduled calls), which those tasks' logs print, not this one: (op, device) -> count.
    eager_remote: Counter = field(default_factory=Counter)
    # A log incomplete only for its uncertain functions: whether it names them, and the placer lines it
    # lacks that are not theirs.
    uncertain_named: bool = False
    unmatched_certain: list = field(default_factory=list)
    # function nodes
    nodes_total: int = 0
    nodes_matched: int = 0
    nodes_unmatched: list = field(default_factory=list)  # [str] first ones
    unmatched_by_op: list = field(default_factory=list)  # [(op, device, count)]
    place_extras: int = 0
    place_extra_list: list = field(default_factory=list)  # [str] first ones
    compiled: int = 0
    removed: int = 0
    wrappers: int = 0
    suspicious: list = field(default_factory=list)
    wrappers_unsure: int = 0  # wrapper-shaped placer lines of interleaved threads in a log naming no thread
    # copies
    copies_tf: int = 0                    # lines that must be captured
    copies_exempt: list = field(default_factory=list)  # [(reason, op, index, from, to, count)] not required
    copies_capture: int = 0
    copies_missing: list = field(default_factory=list)   # [(op, index, from, to, count)]
    copies_extra: list = field(default_factory=list)     # [(op, index, from, to, count)]
    copies_silent: frozenset = frozenset()  # op types the program says TensorFlow copies silently
    removed_extras: list = field(default_factory=list)   # ["name (op) device xN"] never placed by TF
    # function transfers against the partitioned graphs' cross-device _Send edges
    sends: int = 0
    function_copies: int = 0
    bytes_wrong: list = field(default_factory=list)      # [(tensor, capture bytes, oracle bytes)]
    # completeness
    complete_expected: bool = True
    complete: Optional[bool] = None
    incomplete_reason: str = ""
    threads: dict = field(default_factory=dict)
    stderr_tail: str = ""
    from_text_differences: list = field(default_factory=list)  # PlacementLog.from_text vs the capture
    from_text_checked: bool = True        # False where the program's threads interleave (see `interleaved`)

    @property
    def eager_equal(self) -> bool:
        return not self.error and not self.eager_missing and not self.eager_extra

    def _from_text_cell(self) -> str:
        """The table's from_text cell: "same", "N diff", or what a log that says it is incomplete lacks."""
        if not self.from_text_checked:
            return "not checked"
        lacking_allowed = self.complete is False and not self.complete_expected
        lacks = [line for line in self.from_text_differences if lacking_allowed and line.startswith("from_text has")]
        other = len(self.from_text_differences) - len(lacks)
        return (f"{other} diff" if other else "same") + (f" (+{len(lacks)} the incomplete log lacks)" if lacks else "")

    def problems(self) -> list[str]:
        """Readable statements of every disagreement ([] when the capture conforms)."""
        name = f"{self.program} (TF_ENABLE_ONEDNN_OPTS={self.onednn})"
        if self.error:
            return [f"{name}: {self.error}\n{self.stderr_tail}"]
        out = []
        if not self.eager_equal:
            lines = [f"{name}: eager events differ: TensorFlow logged {self.eager_tf} `Executing op` line(s), "
                     f"the capture has {self.eager_capture} execute/failed record(s)"]
            lines += [f"    in TF's log, not captured: {op} on {dev} x{n}{note}"
                      for op, dev, n, note in self.eager_missing[:SHOW]]
            lines += [f"    captured, not in TF's log: {op} on {dev} x{n}" for op, dev, n in self.eager_extra[:SHOW]]
            more = len(self.eager_missing) + len(self.eager_extra) - 2 * SHOW
            if more > 0:
                lines.append(f"    ... and up to {more} more")
            out.append("\n".join(lines))
        # A log that says it is incomplete, as the program expects, may lack what it says it lacks;
        # it still may not hold anything TensorFlow did not do.
        lacking_allowed = self.complete is False and not self.complete_expected
        if self.uncertain_named and self.unmatched_certain:
            out.append(f"{name}: the log names uncertain functions, yet lacks nodes that are none of theirs: "
                       + ", ".join(self.unmatched_certain[:SHOW]))
        if self.nodes_matched != self.nodes_total and not lacking_allowed:
            lines = [f"{name}: {self.nodes_total - self.nodes_matched} of {self.nodes_total} function node(s) in TF's "
                     "placer log have no place/removed/compiled record (same name, op type and device); by op:"]
            lines += [f"    {op} on {dev or '?'} x{n}" for op, dev, n in self.unmatched_by_op[:SHOW]]
            lines.append("  first ones (stderr line: name (op) device):")
            lines += [f"    {s}" for s in self.nodes_unmatched]
            out.append("\n".join(lines))
        if self.place_extras and EXTRAS_FAIL:
            out.append(f"{name}: {self.place_extras} capture `place` record(s) have no placer line in TF's log; "
                       "first:\n"
                       + "\n".join(f"    {s}" for s in self.place_extra_list))
        if self.removed_extras:
            out.append(f"{name}: {len(self.removed_extras)} capture `removed` record(s) name no node TensorFlow "
                       "placed; first:\n" + "\n".join(f"    {r}" for r in self.removed_extras[:SHOW]))
        false = [c for c in self.copies_extra if c[0] not in self.copies_silent]
        if false:
            out.append(f"{name}: implicit copies the capture has and TensorFlow never made (no warn-policy line, "
                       "and not a silent-policy copy the program declares):\n"
                       + "\n".join(f"    {op} input #{i} {a} -> {b} x{n}" for op, i, a, b, n in false[:SHOW]))
        if self.copies_missing:
            out.append(f"{name}: implicit copies TensorFlow logged (warn policy) that the capture lacks:\n"
                       + "\n".join(f"    {op} input #{i} {a} -> {b} x{n}"
                                   for op, i, a, b, n in self.copies_missing[:SHOW]))
        if self.sends != self.function_copies:
            out.append(f"{name}: the functions the block called have {self.sends} cross-device _Send edge(s) "
                       f"(one per call) in TensorFlow's partitioned graphs; the capture has {self.function_copies} "
                       "function copies")
        if self.bytes_wrong:
            out.append(f"{name}: function copies whose bytes are not shape x dtype size:\n"
                       + "\n".join(f"    {t}: capture {a}, graph {b}" for t, a, b in self.bytes_wrong[:SHOW]))
        if self.complete != self.complete_expected:
            out.append(f"{name}: complete is {self.complete}, expected {self.complete_expected}"
                       + (f" (reason: {self.incomplete_reason})" if self.incomplete_reason else ""))
        differences = [line for line in self.from_text_differences
                       if not (lacking_allowed and line.startswith("from_text has"))]
        if differences:
            out.append(f"{name}: PlacementLog.from_text on TensorFlow's log differs from the capture:\n"
                       + "\n".join(f"    {line}" for line in differences))
        if self.suspicious:
            out.append(f"{name}: the referee's wrapper rule is unsure about {len(self.suspicious)} placer group(s): "
                       + "; ".join(self.suspicious[:3]))
        return out

    def row(self) -> dict[str, str]:
        """One line of the benchmark table."""
        if self.error:
            return {"program": self.program, "oneDNN": self.onednn, "eager equal": "ERROR", "nodes matched": "-",
                    "extras": "-", "copies TF/capture": "-", "function transfers edges/capture": "-", "complete": "-",
                    "seconds": f"{self.seconds:.1f}"}
        eager = "yes" if self.eager_equal else (f"no (-{sum(n for *_, n, _ in self.eager_missing)}"
                                                f"/+{sum(n for *_, n in self.eager_extra)})")
        copies = f"{self.copies_tf}/{self.copies_capture}"
        exempt = sum(c[-1] for c in self.copies_exempt)
        if exempt:
            copies = f"{self.copies_tf}(+{exempt} exempt)/{self.copies_capture}"
        if self.copies_missing:
            copies += f" missing {sum(c[-1] for c in self.copies_missing)}"
        silent = sum(c[-1] for c in self.copies_extra if c[0] in self.copies_silent)
        false = sum(c[-1] for c in self.copies_extra if c[0] not in self.copies_silent)
        copies += (f" ({silent} silent-policy)" if silent else "") + (f" FALSE {false}" if false else "")
        complete = str(self.complete) + ("" if self.complete == self.complete_expected else " (!)")
        return {"program": self.program, "oneDNN": self.onednn, "eager equal": eager,
                "nodes matched": f"{self.nodes_matched}/{self.nodes_total}",
                "extras": str(self.place_extras + len(self.removed_extras)),
                "copies TF/capture": copies,
                "function transfers edges/capture": f"{self.sends}/{self.function_copies}"
                                                    + (f" ({len(self.bytes_wrong)} wrong bytes)"
                                                       if self.bytes_wrong else ""),
                "complete": complete,
                "from_text": self._from_text_cell(),
                "seconds": f"{self.seconds:.1f}"}


def exemption(copy: tflog.Copy) -> Optional[str]:
    """Why DESIGN.md does not count a TensorFlow copy line as an implicit copy, or None when it does."""
    if copy.op in EXPLICIT_COPY_OPS:  # TensorFlow's line does not say whether a tf.device scope asked for it
        return "an identity's copy: explicit under a tf.device scope (a capture records those without one)"
    if copy.op == CONSTANT_OP:
        return "a Python value made into a constant on its device (TensorFlow's C layer)"
    return None


def expanded(items: list) -> list:
    """The JSON's events, each as many times as its `count` (identical events are stored once)."""
    return [item for item in items for _ in range(item.get("count", 1))]


def _counter_diff(a: Counter, b: Counter) -> list[tuple]:
    return sorted(((*key, n) for key, n in (a - b).items()), key=lambda t: (-t[-1], t))


def compare_logs(result: Result, log: tflog.TfLog, capture: dict, sends: Optional[dict] = None,
                 silent: frozenset = frozenset(), threads_interleave: bool = False) -> Result:
    """Fills `result` from TensorFlow's parsed log, the capture's JSON and the harness's count of
    cross-device `_Send` edges (`sends`, from `tests/conformance/sends.py`). `threads_interleave`: the
    program's threads run eager ops at the same time; where the log names no thread (TensorFlow 2.16-2.20),
    their wrapper functions' placer lines interleave and cannot be peeled: those shaped like a wrapper's
    (an argument, a result, or a node named after its op) are set aside (`wrappers_unsure`)."""
    sends = sends or {}
    records = expanded(capture.get("records", []))
    copies = expanded(capture.get("copies", []))

    # Eager events.
    tf_eager = log.eager_multiset()
    result.constants = sum(n for (op, _), n in tf_eager.items() if op == CONSTANT_OP)
    tf_eager = Counter({key: n for key, n in tf_eager.items() if key[0] != CONSTANT_OP})
    task = tflog.TASK[0]
    remote = [r for r in records if r["kind"] in EAGER_KINDS and task and r["device"].startswith("/job:")
              and not r["device"].startswith(task + "/")]
    result.eager_remote = Counter((r["op"], r["device"]) for r in remote)  # in the other tasks' logs
    cap_eager = Counter((r["op"], r["device"]) for r in records if r["kind"] in EAGER_KINDS
                        and CUSTOM_DEVICE not in r["device"]) - result.eager_remote
    result.eager_tf, result.eager_capture = sum(tf_eager.values()), sum(cap_eager.values())
    off_main = Counter((e.op, e.device) for e in log.eager
                       if log.main_thread is not None and e.thread != log.main_thread)
    first_line = {}
    for e in log.eager:
        first_line.setdefault((e.op, e.device), e.lineno)
    result.eager_missing = [
        (op, dev, n, (f" ({min(n, off_main[(op, dev)])} in other threads)" if off_main[(op, dev)] else "")
         + f" (TF's first such line: stderr line {first_line[(op, dev)]})")
        for op, dev, n in _counter_diff(tf_eager, cap_eager)]
    result.eager_extra = _counter_diff(cap_eager, tf_eager)

    # Function nodes: a placer line takes a `place` record, else a `removed` one on its device, else a
    # `compiled` one, else a `removed` one without a device.
    by_kind = {kind: Counter((r["name"], r["op"], r["device"]) for r in records if r["kind"] == kind)
               for kind in FUNCTION_KINDS}
    removed_anywhere = Counter((r["name"], r["op"]) for r in records if r["kind"] == "removed" and not r["device"])
    result.nodes_total = len(log.nodes)
    unmatched = []
    for node in log.nodes:
        key = (node.name, tflog.registered_op(node.op), node.device)
        for kind in ("place", "removed", "compiled"):
            if by_kind[kind][key] > 0:
                by_kind[kind][key] -= 1
                break
        else:
            if removed_anywhere[key[:2]] > 0:
                removed_anywhere[key[:2]] -= 1
            else:
                unmatched.append(node)
    if threads_interleave and not log.threads_known:
        unsure = [n for n in unmatched
                  if n.op in tflog.PLUMBING or tflog.registered_op(n.name) == tflog.registered_op(n.op)]
        result.wrappers_unsure = len(unsure)
        unmatched = [n for n in unmatched if n not in unsure]
        result.nodes_total -= len(unsure)
        log.suspicious = []  # (those groups are the same interleaved wrappers)
    result.nodes_matched = result.nodes_total - len(unmatched)
    # A log incomplete only for functions TensorFlow's threads instantiate a varying number of times names
    # them (`uncertain`): what it lacks must be nodes of those functions (by name and op type).
    uncertain = capture.get("uncertain") or {}
    result.uncertain_named = bool(uncertain.get("reasons"))
    kinds = {(r["name"], r["op"]) for r in uncertain.get("records", [])}
    result.unmatched_certain = [f"{n.lineno}: {n.name} ({n.op}) {n.device}" for n in unmatched
                                if (n.name, tflog.registered_op(n.op)) not in kinds]
    result.nodes_unmatched = [f"{n.lineno}: {n.name} ({n.op}) {n.device}"
                              + ("" if log.main_thread in (None, n.thread) else f" [thread {n.thread}]")
                              for n in unmatched[:SHOW]]
    result.unmatched_by_op = _counter_diff(Counter((tflog.registered_op(n.op), n.device) for n in unmatched), Counter())
    extras = +by_kind["place"]
    result.place_extras = sum(extras.values())
    result.place_extra_list = [f"{name} ({op}) {dev} x{n}"
                               for name, op, dev, n in _counter_diff(extras, Counter())[:SHOW]]
    # Removed records TensorFlow never placed: those on a device left unmatched, and those without one.
    left = Counter({key: n for key, n in by_kind["removed"].items() if key[2] and n > 0})
    left.update({(name, op, ""): n for (name, op), n in removed_anywhere.items() if n > 0})
    result.removed_extras = [f"{name} ({op}) {dev or '(no device)'} x{n}" for name, op, dev, n in
                             _counter_diff(left, Counter())]
    result.compiled = sum(1 for r in records if r["kind"] == "compiled")
    result.removed = sum(1 for r in records if r["kind"] == "removed")
    result.wrappers = len(log.wrappers)
    result.suspicious = [f"Executing op {op} after " + " ".join(f"{n.name}:({n.op})" for n in nodes)
                         for op, nodes in log.suspicious]

    # Copies.
    required = Counter((c.op, c.input_index, c.from_device, c.to_device) for c in log.copies
                       if exemption(c) is None)
    result.copies_tf = sum(required.values())
    result.copies_exempt = _counter_diff(Counter((exemption(c), c.op, c.input_index, c.from_device, c.to_device)
                                                 for c in log.copies if exemption(c)), Counter())
    cap_copies = Counter((c["op"], c["input_index"], c["from_device"], c["to_device"]) for c in copies
                         if c.get("kind", "eager") == "eager")
    result.copies_capture = sum(cap_copies.values())
    result.copies_missing = _counter_diff(required, cap_copies)
    all_tf = log.copy_multiset()
    result.copies_extra = _counter_diff(cap_copies, all_tf)
    result.copies_silent = silent

    # Function transfers.
    function_copies = [c for c in copies if c.get("kind") == "function"]
    result.function_copies = len(function_copies)
    result.sends = sends.get("edges", 0)
    known = sends.get("bytes", {})
    result.bytes_wrong = sorted({(c["tensor"], c["bytes"], known[c["tensor"]]) for c in function_copies
                                 if c["tensor"] in known and c["bytes"] != known[c["tensor"]]})

    result.complete = capture.get("complete")
    result.incomplete_reason = capture.get("incomplete_reason", "")
    result.threads = dict(log.threads)
    if not log.markers:
        result.error = "the harness's markers are missing from stderr (did the program crash?)"
    return result


def harness_env(onednn: Optional[str], graphs: Optional[Path] = None, callback_first: bool = False) -> dict[str, str]:
    """The environment of a harness run: TensorFlow's logging on, tfplace's settings off; with `graphs`,
    TensorFlow's graph dumper writes every function's graphs there (the oracle of tf.data functions' edges);
    with `callback_first`, another op callback runs before the capture's (`harness.py`)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TFPLACE_", "TF_CPP_", "TF_DUMP_GRAPH", "CONFORMANCE_CALLBACK_FIRST"))}
    if callback_first:
        env["CONFORMANCE_CALLBACK_FIRST"] = "1"
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"
    if graphs is not None:
        env.update(TF_DUMP_GRAPH_PREFIX=str(graphs), TF_DUMP_GRAPH_NAME_FILTER="*", TF_DUMP_GRAPH_GROUPS="main")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    if onednn is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = onednn
    return env


def run_program(program: Path | str, onednn: Optional[str] = None, timeout: float = 180,
                keep: Optional[Path] = None, callback_first: bool = False) -> Result:
    """Runs `program` under the harness in a subprocess and compares (see the module doc).

    `onednn`: "0" or "1" for TF_ENABLE_ONEDNN_OPTS, None to inherit. `keep`: a folder that
    receives the run's stdout, stderr and capture JSON (also `CONFORMANCE_KEEP=folder`). `callback_first`:
    another library's op callback, which only looks, runs before the capture's."""
    program = Path(program)
    keep = keep or (Path(os.environ["CONFORMANCE_KEEP"]) if os.environ.get("CONFORMANCE_KEEP") else None)
    mode = onednn if onednn is not None else os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default")
    result = Result(program.stem, mode, complete_expected=expected_complete(program))
    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
        out = Path(tmp) / "capture.json"
        start = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, str(HARNESS), str(program), str(out)], cwd=ROOT,
                                  env=harness_env(onednn, Path(tmp) / "graphs", callback_first),
                                  capture_output=True, text=True,
                                  errors="replace",
                                  timeout=timeout)
        except subprocess.TimeoutExpired as expired:
            result.seconds = time.perf_counter() - start
            result.error = f"timed out after {timeout:.0f} s"
            tail = expired.stderr or ""
            result.stderr_tail = (tail.decode(errors="replace") if isinstance(tail, bytes) else tail)[-3000:]
            return result
        result.seconds = time.perf_counter() - start
        result.returncode = done.returncode
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            stem = f"{program.stem}.onednn{mode}"
            (keep / f"{stem}.stderr").write_text(done.stderr, encoding="utf-8")
            (keep / f"{stem}.stdout").write_text(done.stdout, encoding="utf-8")
            if out.exists():
                (keep / f"{stem}.json").write_text(out.read_text(encoding="utf-8"), encoding="utf-8")
        if done.returncode != 0 or not out.exists():
            result.error = f"the harness exited with status {done.returncode}"
            result.stderr_tail = "\n".join(line for line in done.stderr.splitlines() if "placer.cc" not in line)[-3000:]
            return result
        report = json.loads(out.read_text(encoding="utf-8"))
    result.capture_source = report.get("capture_source", "")
    compare_logs(result, tflog.parse(done.stderr), report["capture"], report.get("sends"), silent_copies(program),
                 threads_interleave=interleaved(program))
    result.from_text_checked = not interleaved(program)
    if result.from_text_checked:
        result.from_text_differences = from_text_parity(done.stderr, report["capture"])
    return result


def from_text_parity(stderr: str, capture: dict) -> list[str]:
    """Differences between `PlacementLog.from_text` on the block's stderr and the capture (not the
    referee: tfplace against itself): eager events as (op, device), function nodes as (name, op)."""
    from tfplace import PlacementLog

    lines = stderr.splitlines()
    begin = next((i for i, line in enumerate(lines) if line.startswith(tflog.BEGIN)), 0)
    end = next((i for i, line in enumerate(lines) if line.startswith(tflog.END)), len(lines))
    read = PlacementLog.from_text("\n".join(lines[begin + 1:end]) + "\n").records
    records = expanded(capture.get("records", []))
    pairs = (
        ("eager", Counter((r.op, r.device) for r in read if r.kind == "execute"),
         Counter((r["op"], r["device"]) for r in records if r["kind"] in EAGER_KINDS)),
        ("function node", Counter((r.name, r.op) for r in read if r.kind == "place"),
         Counter((r["name"], r["op"]) for r in records if r["kind"] in ("place", "removed"))))
    found = []
    for what, text, captured in pairs:
        found += [f"from_text has {what} {key} x{n} more" for *key, n in _counter_diff(text, captured)[:SHOW]]
        found += [f"the capture has {what} {key} x{n} more" for *key, n in _counter_diff(captured, text)[:SHOW]]
    return found


def describe(result: Result) -> str:
    """Everything a human needs to judge one run: the problems, then the informational extras."""
    lines = result.problems() or [f"{result.program} (TF_ENABLE_ONEDNN_OPTS={result.onednn}): conforms"]
    if not result.error:
        if result.place_extras and not EXTRAS_FAIL:
            lines.append(f"  {result.place_extras} capture `place` record(s) without a placer line: "
                         + ", ".join(result.place_extra_list))
        if result.copies_exempt:
            lines.append("  TF copy lines exempt by DESIGN.md (not required in the capture):\n" + "\n".join(
                f"    {op} input #{i} {a} -> {b} x{n}: {why}" for why, op, i, a, b, n in result.copies_exempt[:SHOW]))
        if result.copies_extra:
            lines.append("  capture copies without a TF warn line (judge: TF's own copies, e.g. cross-replica "
                         "reductions, are legitimate):\n" + "\n".join(
                             f"    {op} input #{i} {a} -> {b} x{n}" for op, i, a, b, n in result.copies_extra[:SHOW]))
        lines.append(f"  info: {result.wrappers} eager wrapper instance(s) dropped, {result.compiled} compiled and "
                     f"{result.removed} removed record(s), threads in TF's log {result.threads}, "
                     f"capture from {result.capture_source}"
                     + (f", {result.wrappers_unsure} wrapper-shaped placer line(s) of interleaved threads set aside "
                        "(the log names no thread)" if result.wrappers_unsure else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("programs", nargs="*", help="program files or stems (default: all)")
    parser.add_argument("--onednn", default=None, help='"0" or "1" (default: inherit)')
    parser.add_argument("--keep", default=None, help="folder for each run's stdout, stderr and JSON")
    args = parser.parse_args()
    chosen = [Path(p) if p.endswith(".py") else PROGRAMS / f"{p}.py" for p in args.programs] or programs()
    for path in chosen:
        print(describe(run_program(path, args.onednn, keep=Path(args.keep) if args.keep else None)))
