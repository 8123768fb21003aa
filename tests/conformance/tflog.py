"""The conformance suite's own reader of TensorFlow's placement log (stderr), independent of tfplace.

TensorFlow (`tf.debugging.set_log_device_placement(True)`) writes, in glog format
(`I<date> <time> <thread id> <file>:<line>] <message>` from TensorFlow 2.21 on;
`<date> <time>: I <path>/<file>:<line>] <message>`, with no thread id, in 2.16-2.20, whose lines count as
the main thread's):

* `execute.cc:NNN] Executing op X in device D` before each eager op runs (also for an op
  that then fails, and for a call of a function, `X` = `__inference_f_12`);
* `placer.cc:NNN] name: (Op): D` for every node of every function TensorFlow places;
* under device policy "warn": `execute.cc:NNN] before computing X input #i was expected to be on
  D1 but is actually on D0 (operation running on D2). This triggers a copy ...`: a copy from D0
  to D1; D1 is D2 except for an input the kernel keeps in host memory (D1 is then the host).

It also prints each placer line a second time, bare, on stdout: only stderr is read.

**Eager wrappers.** TensorFlow runs each eager op as a one-node function
(`execute.cc`'s `WrapInCallOp`): the op's node, named like the op type, an `_Arg`/`_DeviceArg`
per input, named after the op-def input (`_` doubled: `input_dataset` gives `input__dataset`,
a variadic input `inputs` gives `inputs_0`, `inputs_1`, ...) and a `_Retval`/`_DeviceRetval` per
output (`product_RetVal`, `components_0_RetVal`). The first time such a function runs on a
device, the placer logs its nodes, in the same thread, directly before `Executing op X`
(only copy warnings come between). oneDNN builds place two instances, the op's and its
kernel variant's (`MatMul` ... then `_MklMatMul` ..., then `Executing op _MklMatMul`).

`parse()` reads each thread's lines in order; the placer lines that come directly before an
`Executing op X` are examined from the last one backwards: an instance of X's wrapper is a
contiguous run of nodes with distinct names, exactly one of them `X: (X)` (or its registered op
for a kernel variant) on the device X runs on, every other one an `_Arg`/`_DeviceArg` named after an input of that op or
an `_Retval`/`_DeviceRetval` named after an output, every non-variadic input and output present.
Instances are peeled off while they fit; every other placer line is a node of a real function.
Groups that look like a wrapper by the loose rule (one non-plumbing node named like the executed
op) but fail the strict one, or that another line of their thread separates from the
`Executing op`, are listed in `suspicious`, so a wrong guess shows up.

In a log whose lines name no thread (TensorFlow 2.16-2.20), only placer and `execute.cc` lines end a run:
any other line may be another thread's.

Only the lines between the harness's `CONFORMANCE-BEGIN` and `CONFORMANCE-END` markers count
(the whole text when there is no marker).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional

BEGIN = "CONFORMANCE-BEGIN"
END = "CONFORMANCE-END"

PLUMBING = frozenset({"_Arg", "_Retval", "_DeviceArg", "_DeviceRetval"})
ARG_OPS = frozenset({"_Arg", "_DeviceArg"})
RET_OPS = frozenset({"_Retval", "_DeviceRetval"})

_GLOG = re.compile(r"^([IWEF])\d{4} \S+\s+(\d+) ([\w.\-]+):(\d+)\] (.*)$")
_GLOG_DATED = re.compile(r"^\d{4}-\d\d-\d\d [\d:.]+: ([IWEF]) (?:\S*/)?([\w.\-]+):(\d+)\] (.*)$")  # 2.16-2.20
_PLACER = re.compile(r"^(.*): \(([^()\s]+)\): (\S*)$")
_EXECUTE = re.compile(r"^Executing op (\S+) in device (\S*)$")
_COPY = re.compile(
    r"^before computing (\S+) input #(\d+) was expected to be on (\S+) but is actually on (\S+) "
    r"\(operation running on (\S+)\)\. This triggers a copy which can be a performance bottleneck\.$")
_DEVICE = re.compile(r"/device:([A-Za-z_]+):(\d+)$")
_SHORT = re.compile(r"^/?([A-Za-z_]+):(\d+)$")


TASK = [""]  # the task whose log is read, in a cluster (`parse(text, task=...)`); "" for a single process


def canonical(device: str) -> str:
    """`/job:localhost/replica:0/task:0/device:CPU:0` (or `CPU:0`, `/cpu:0`) -> `/device:CPU:0`; "" stays "".

    In a task of a cluster (`TASK`), names stay whole: the task's own devices under `/job:localhost`
    get the task's name (`/job:worker/replica:0/task:1/device:CPU:0`), other tasks' keep theirs."""
    if not device:
        return ""
    m = _DEVICE.search(device) or _SHORT.match(device)
    if not m:
        return device
    short = f"/device:{m.group(1).upper()}:{m.group(2)}"
    if not TASK[0]:
        return short
    if device.startswith("/job:") and not device.startswith("/job:localhost/"):
        return device.rpartition("/device:")[0] + short
    return TASK[0] + short


@lru_cache(maxsize=None)
def _op_def(op: str):
    from tensorflow.python.framework import op_def_registry

    return op_def_registry.get(op)


@lru_cache(maxsize=None)
def registered_op(op: str) -> str:
    """The registered op a oneDNN kernel variant stands for (`_MklMatMul` -> `MatMul`,
    `_MklNativeConv2D` -> `Conv2D`, `_MklFusedMatMul` -> `_FusedMatMul`); other names unchanged."""
    for prefix in ("_MklNative", "_Mkl"):
        if op.startswith(prefix):
            rest = op[len(prefix):]
            for candidate in (rest, "_" + rest):
                if rest and _op_def(candidate) is not None:
                    return candidate
    return op


def is_function_call(op: str) -> bool:
    """An `Executing op` of a function (`__inference_f_12`, `__forward_...`), not of an op type."""
    return op.startswith("__") and _op_def(op) is None


@dataclass(frozen=True)
class Node:
    """One placer line."""

    name: str
    op: str          # as printed
    device: str      # canonical
    thread: int
    lineno: int      # 1-based line number in the stderr text


@dataclass(frozen=True)
class Eager:
    """One `Executing op` line."""

    op: str          # registered op type (kernel variants mapped back), or the function's name
    printed: str     # as printed (`_MklMatMul`)
    device: str
    thread: int
    lineno: int
    wrapper_placed: bool  # its wrapper's placer lines came just before it


@dataclass(frozen=True)
class Copy:
    """One warn-policy copy line."""

    op: str          # registered op type
    printed: str
    input_index: int
    from_device: str      # where the input is ("is actually on")
    to_device: str        # where the kernel expects it ("was expected to be on"): the copy's target
    running: str          # where the op runs ("operation running on"); differs for host-memory inputs
    thread: int
    lineno: int


@dataclass
class TfLog:
    eager: list[Eager] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)          # function nodes (wrappers dropped)
    wrappers: list[tuple[str, list[Node]]] = field(default_factory=list)  # (executed op, instance nodes)
    copies: list[Copy] = field(default_factory=list)
    suspicious: list[tuple[str, list[Node]]] = field(default_factory=list)
    main_thread: Optional[int] = None
    markers: bool = False    # both markers were found
    threads: Counter = field(default_factory=Counter)          # glog lines per thread in the window
    threads_known: bool = True  # False for TensorFlow 2.16-2.20's lines, which name no thread

    def eager_multiset(self) -> Counter:
        return Counter((e.op, e.device) for e in self.eager)

    def node_multiset(self) -> Counter:
        return Counter((n.name, n.op, n.device) for n in self.nodes)

    def copy_multiset(self) -> Counter:
        return Counter((c.op, c.input_index, c.from_device, c.to_device) for c in self.copies)


def _escape(name: str) -> str:
    return name.replace("_", "__")


@lru_cache(maxsize=None)
def _wrapper_names(op: str):
    """(fixed arg names, variadic arg prefixes, fixed retval names, variadic retval prefixes) of op's wrapper."""
    op_def = _op_def(op)
    if op_def is None:
        return None

    def split(args, suffix):
        fixed, variadic = set(), set()
        for arg in args:
            if arg.number_attr or arg.type_list_attr:
                variadic.add(_escape(arg.name) + "_")
            else:
                fixed.add(_escape(arg.name) + suffix)
        return frozenset(fixed), frozenset(variadic)

    fixed_in, var_in = split(op_def.input_arg, "")
    fixed_out, var_out = split(op_def.output_arg, "_RetVal")
    return fixed_in, var_in, fixed_out, var_out


def _variadic_match(name: str, prefixes, suffix: str) -> bool:
    for prefix in prefixes:
        if name.startswith(prefix) and name.endswith(suffix):
            middle = name[len(prefix):len(name) - len(suffix)]
            if middle.isdigit():
                return True
    return False


def _take_instance(run: list[Node], end: int, candidates: frozenset, device: str) -> int:
    """Start index of a wrapper instance ending at run[end-1] for one of `candidates`, or -1."""
    # The main node: the last non-plumbing node before `end`, only plumbing after it.
    main = end - 1
    while main >= 0 and run[main].op in PLUMBING:
        main -= 1
    if main < 0:
        return -1
    node = run[main]
    if node.name != node.op or node.op not in candidates or node.device != device:
        return -1
    names = _wrapper_names(node.op)
    if names is None:
        return -1
    fixed_in, var_in, fixed_out, var_out = names

    def fits(n: Node) -> bool:
        if n.op in ARG_OPS:
            return n.name in fixed_in or _variadic_match(n.name, var_in, "")
        if n.op in RET_OPS:
            return n.name in fixed_out or _variadic_match(n.name, var_out, "_RetVal")
        return False

    seen = {node.name}
    for i in range(main + 1, end):
        if not fits(run[i]) or run[i].name in seen:
            return -1
        seen.add(run[i].name)
    start = main
    while start > 0 and run[start - 1].op in PLUMBING and fits(run[start - 1]) and run[start - 1].name not in seen:
        start -= 1
        seen.add(run[start].name)
    if not (fixed_in | fixed_out) <= seen:
        return -1
    return start


def _peel(run: list[Node], executed: str, device: str) -> tuple[list[Node], list[list[Node]]]:
    """(function nodes, wrapper instances) of the placer lines `run` just before `Executing op executed`."""
    candidates = frozenset({executed, registered_op(executed)})
    instances: list[list[Node]] = []
    end = len(run)
    while end > 0:
        start = _take_instance(run, end, candidates, device)
        if start < 0:
            break
        instances.append(run[start:end])
        end = start
    instances.reverse()
    return run[:end], instances


def _looks_like_wrapper(rest: list[Node], executed: str) -> bool:
    """The loose rule: the tail group has one non-plumbing node, named like its op, which is the executed op."""
    if not rest:
        return False
    tail = []
    for node in reversed(rest):
        if node.op not in PLUMBING:
            tail.append(node)
            break
    return bool(tail) and tail[0].name == tail[0].op and registered_op(tail[0].op) == registered_op(executed)


def parse(text: str, task: str = "") -> TfLog:
    """Reads TensorFlow's stderr text (see the module doc); `task`: the device prefix of the cluster
    task that wrote it (`/job:worker/replica:0/task:1`: names stay whole), "" for a single process."""
    TASK[0] = task
    log = TfLog()
    lines = text.splitlines()
    begin = next((i for i, line in enumerate(lines) if line.startswith(BEGIN)), None)
    end = next((i for i, line in enumerate(lines) if line.startswith(END)), None)
    if begin is not None:
        parts = lines[begin].split()
        log.main_thread = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    log.markers = begin is not None and end is not None
    first = begin + 1 if begin is not None else 0
    last = end if end is not None else len(lines)

    runs: dict[int, list[Node]] = {}
    copied: dict[int, bool] = {}  # copy warnings came after the thread's current run

    interrupted: dict[int, list[Node]] = {}  # a run another line of its thread ended, until the next event

    def flush(thread: int) -> None:
        run = runs.pop(thread, [])
        log.nodes.extend(run)
        copied.pop(thread, None)
        if run:
            interrupted[thread] = run

    for index in range(first, last):
        m = _GLOG.match(lines[index])
        if m:
            thread, source, message = int(m.group(2)), m.group(3), m.group(5)
        else:
            m = _GLOG_DATED.match(lines[index])
            if not m:
                continue   # Python output, continuation lines of multi-line messages
            thread, source, message = log.main_thread or 0, m.group(2), m.group(4)
            log.threads_known = False
        log.threads[thread] += 1
        if not log.threads_known and source not in ("placer.cc", "execute.cc"):
            # A line naming no thread may be any thread's (a tf.data thread's end-of-sequence warning lands
            # between an eager op's wrapper lines and its `Executing op` when the machine is busy): it ends no run.
            continue
        lineno = index + 1
        if source == "placer.cc":
            p = _PLACER.match(message)
            if p:
                if copied.get(thread):
                    flush(thread)
                interrupted.pop(thread, None)
                runs.setdefault(thread, []).append(Node(p.group(1), p.group(2), canonical(p.group(3)), thread, lineno))
                continue
        if source == "execute.cc":
            e = _EXECUTE.match(message)
            if e:
                printed, device = e.group(1), canonical(e.group(2))
                run = runs.pop(thread, [])
                copied.pop(thread, None)
                rest, instances = _peel(run, printed, device) if not is_function_call(printed) else (run, [])
                log.nodes.extend(rest)
                log.wrappers.extend((printed, inst) for inst in instances)
                if not instances and _looks_like_wrapper(rest or interrupted.get(thread, []), printed):
                    log.suspicious.append((printed, (rest or interrupted.get(thread, []))[-8:]))
                interrupted.pop(thread, None)
                op = printed if is_function_call(printed) else registered_op(printed)
                log.eager.append(Eager(op, printed, device, thread, lineno, bool(instances)))
                continue
            c = _COPY.match(message)
            if c:
                printed = c.group(1)
                log.copies.append(Copy(registered_op(printed), printed, int(c.group(2)), canonical(c.group(4)),
                                       canonical(c.group(3)), canonical(c.group(5)), thread, lineno))
                if thread in runs:
                    copied[thread] = True
                continue
        flush(thread)
    for thread in list(runs):
        flush(thread)
    return log


def wrapper_report(log: TfLog) -> str:
    """A readable account of the wrapper detection, for checking it by hand."""
    shapes = Counter()
    for executed, inst in log.wrappers:
        shapes[(executed, " ".join(f"{n.name}:({n.op})" for n in inst))] += 1
    out = [f"{len(log.wrappers)} wrapper instance(s), {len(shapes)} shape(s):"]
    out += [f"  {n:3d} x Executing op {op}: {shape}" for (op, shape), n in sorted(shapes.items())]
    out.append(f"{len(log.suspicious)} suspicious group(s) (loose rule yes, strict rule no):")
    for executed, nodes in log.suspicious:
        out.append(f"  Executing op {executed} after: " + " ".join(f"{n.name}:({n.op})" for n in nodes))
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
        parsed = parse(f.read())
    print(wrapper_report(parsed))
    print(f"{len(parsed.eager)} eager, {len(parsed.nodes)} function nodes, {len(parsed.copies)} copies, "
          f"threads {dict(parsed.threads)}, main {parsed.main_thread}")
    if "-v" in sys.argv:
        for n in parsed.nodes:
            print(f"  node {n.lineno}: [{n.thread}] {n.name}: ({n.op}) {n.device}")
