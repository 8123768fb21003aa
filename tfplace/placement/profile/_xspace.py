"""TensorFlow's own profiler around a block, read back as executions and time per device and op.

What TensorFlow 2.21's profiler writes (`tf.profiler.experimental.start/stop`, one session per
process; `<logdir>/plugins/profile/<run>/<host>.xplane.pb`, an `XSpace` read with the
profiler's own schema, `xplane_pb2`), checked on CPU with two logical devices, oneDNN on and off:

* The `/host:CPU` plane has one line per Python thread (`python`), one per thread of the
  inter-op pool (`tf_Compute/<id>`, shared by every device) and tf.data's threads. Times are
  picoseconds from the line's `timestamp_ns`.
* An eager op is `EagerExecute` (stats `eager_op`, `is_func`) around `EagerLocalExecute: MatMul`
  on its Python thread's line; inside that, `ValidateInputTypeAndPlacement` (holding a
  `_Send input <i> from <device> to <device>` event per input copied to the op's device),
  then `EagerKernelExecute` around `KernelAndDeviceFunc::Run`, the kernel's run. The first run
  of an op on a device spends milliseconds outside `EagerKernelExecute` (making the kernel), so
  an eager op's time is its `EagerKernelExecute`. Two `EagerCopyToDevice` events come with
  every op, copy or not. No stat and no line names the device (`MemoryAllocation`'s
  `allocator_name`, `mklcpu` or `cpu`, is one allocator for every CPU): the k-th event of an op
  type is the k-th "execute" record of that op type in the capture's log (the caller passes
  them in order). A function call is `EagerLocalExecute: __inference_f_19`, spanning its run.
* A function's node that runs synchronously is a `<node>:<kernel>` event (`MatMul:_MklMatMul`
  or `MatMul:MatMul`, `Sum:Sum`; a Grappler fusion `dense/Relu:_FusedMatMul`, timed as the op it
  computes first, `MatMul`, since records keep the user's op types) on an executor line, or on the Python line
  when the function runs inline; no stat names its device, the caller passes each node's device. A `_Send`
  (`x/_1:_Send`) carries stats `from` (the producer node), `to` (the consumer) and `key`
  (`<send device>;<id>;<recv device>;<edge>;<frame>:<iteration>`). An asynchronous node
  (`_Recv`, a call) has no such event: `ExecutorState::ProcessAsync::Start` with stats `name`
  (the node) and `kernel_type` (`_Recv`) marks each run.
* A second `start` while a session runs raises `AlreadyExistsError` ("Another profiler is
  running"), whether the session is the Python API's (a user's, Keras' TensorBoard callback,
  `tf.summary.trace_on(profiler=True)`) or one TensorFlow's profiler server started; a `stop`
  without one raises `UnavailableError`.

GPU planes are read by `tfplace.placement.profile._gpu_planes` (its docstring says what CUPTI writes).

Busy time counts leaf work once: eager ops' kernel runs, function nodes' events (not the call
around them, nor `_Send`/`_Recv`, which are transfers), GPU kernels; a device with its own plane
is timed from that plane only. Events on one line never count twice: the part of an event
that an earlier counted event on its line already covers adds executions, not time.

Example:
    >>> import tensorflow as tf
    >>> from tfplace.placement.profile import _session, _xspace
    >>> x = tf.ones((64, 64))
    >>> session = _session.ProfilerSession.start()
    >>> y = tf.matmul(x, x)
    >>> timing = _xspace.read_xspace(session.stop(), eager=[("MatMul", "/device:CPU:0")])
    >>> timing.ops[("/device:CPU:0", "MatMul")].executions >= 1
    True
"""

from __future__ import annotations

import re
from collections import Counter, deque
from typing import Any, Iterable, Mapping

from tfplace import _names, _tensorflow
from tfplace._devices import canonical_name
from tfplace.placement.ops import _kernels
from tfplace.placement.profile import _gpu_planes
from tfplace.placement.profile._model import Allocation, CallRun, Move, OpRun, OpTime, Runs, Timing, TransferTime
from tfplace.placement.profile._planes import allocation, integer, stats
from tfplace.placement.profile._step_events import HostCopy, SessionRun, StepEvents

__all__ = ["read_xspace"]

_EAGER = "EagerLocalExecute: "
_KERNEL_RUN = "EagerKernelExecute"
_ASYNC_START = "ExecutorState::ProcessAsync::Start"
_EAGER_COPY = re.compile(r"^_Send input \d+ from (\S+) to (\S+)$")
_TRANSFERS = frozenset({"_Send", "_HostSend"})
_NOT_WORK = frozenset({"_Recv", "_HostRecv", "PartitionedCall", "StatefulPartitionedCall", "If", "StatelessIf",
                       "While", "StatelessWhile", "Case", "StatelessCase", "RemoteCall"})
_GPU_PLANE = re.compile(r"^/device:GPU:(\d+)$")
# Ops whose time is waiting, never busy: for input (a get-next) or for peers (a collective).
_WAITS = frozenset({"IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional",
                    "MultiDeviceIteratorGetNextFromShard"})
_NAMED = re.compile(r"^(?:[A-Za-z_][\w.]*|<lambda>)$")  # a TraceMe a program names: a tf.function's call, a step marker


class _Tally:
    def __init__(self, planes: frozenset[str]) -> None:
        self.planes = planes  # devices timed from their own plane
        self.work: dict[tuple[str, int], list[tuple[float, float, str, str, int]]] = {}  # line -> its runs
        self.transfers: dict[tuple[str, str], TransferTime] = {}
        self.nodes: Counter[str] = Counter()
        self.sends: dict[tuple[str, str], OpTime] = {}
        self.first = float("inf")
        self.last = float("-inf")
        self.eager: Counter[tuple[str, str]] = Counter()
        self.unattributed = 0
        self.moves: list[Move] = []
        self.calls: list[CallRun] = []
        self.waited: Counter[tuple[str, str]] = Counter()  # (device, op) -> executions of ops that wait
        self.steps = StepEvents()
        self.allocations: list[Allocation] = []

    def ran(self, line: tuple[str, int], device: str, op: str, start_us: float, duration_us: float, host: bool,
            eager: int = -1, pipeline: bool = False) -> None:
        """Work on `device` seen on `line` (a host line when `host`, tf.data's when `pipeline`); `eager`: its
        eager op's index."""
        if not device:
            self.unattributed += 1
        elif op in _WAITS or op.startswith(("Collective", "Nccl")):
            self.waited[(device, op)] += 1
            if op not in _WAITS:
                self.steps.sync.append((start_us, duration_us))
        elif pipeline:
            return  # tf.data's functions on its own threads: the input pipeline's work, no device's busy time
        elif not (host and device in self.planes):
            self.work.setdefault(line, []).append((start_us, duration_us, device, op, eager))

    def span(self, start_us: float, duration_us: float) -> None:
        self.first = min(self.first, start_us)
        self.last = max(self.last, start_us + duration_us)

    def moved(self, source: str, target: str, size: int, start_us: float, duration_us: float) -> None:
        key = (canonical_name(source), canonical_name(target))
        count, size_before, us = self.transfers.get(key, TransferTime(0, 0, 0.0))
        self.transfers[key] = TransferTime(count + 1, size_before + size, us + duration_us)
        self.moves.append(Move(*key, start_us, duration_us))
        self.span(start_us, duration_us)

    def sent(self, producer: str, consumer: str, duration_us: float) -> None:
        count, us = self.sends.get((producer, consumer), OpTime(0, 0.0))
        self.sends[(producer, consumer)] = OpTime(count + 1, us + duration_us)

    def timing(self) -> Timing:
        runs = Runs()
        ops: dict[tuple[str, str], list[Any]] = {}  # [executions, µs]
        for number, events in enumerate(self.work.values()):
            covered = float("-inf")
            events.sort()
            for start, duration, device, op, eager in events:
                runs.append(OpRun(device, op, start, duration, number, eager))
                entry = ops.get((device, op))
                if entry is None:
                    entry = ops[(device, op)] = [0, 0.0]
                end = start + duration
                entry[0] += 1
                entry[1] += (end - covered if end > covered else 0.0) if covered > start else duration
                if end > covered:
                    covered = end
            if events:
                self.span(events[0][0], 0.0)
                self.span(max(start + duration for start, duration, *_ in events), 0.0)
        for key, count in self.waited.items():
            ops.setdefault(key, [0, 0.0])[0] += count
        devices: dict[str, list[Any]] = {}
        for (device, _), (count, time) in ops.items():
            entry = devices.setdefault(device, [0, 0.0])
            entry[0] += count
            entry[1] += time
        wall = self.last - self.first if self.last >= self.first else 0.0
        return Timing({d: OpTime(int(n), t) for d, (n, t) in sorted(devices.items())},
                      {k: OpTime(int(n), t) for k, (n, t) in sorted(ops.items())},
                      dict(self.transfers), dict(self.nodes), dict(self.sends), wall, len(self.work),
                      dict(self.eager), self.unattributed, runs, tuple(self.moves), tuple(sorted(self.calls)),
                      self.steps, tuple(sorted(self.allocations, key=lambda a: a.start_us)))


_SKIP, _EAGER_OP, _KERNEL, _COPY, _WORK, _SEND, _OTHER_NODE, _ASYNC, _CALL, _NAME, _STEP, _MEMORY = range(12)
_Kind = tuple[Any, ...]  # (kind, then what it is: an op type, devices, a node)
_MEMORY_EVENTS = {"MemoryAllocation": False, "MemoryDeallocation": True}
_PIPELINE_ONLY = frozenset({"launch", "executor"})  # step events read on tf.data's lines only
_STEP_EVENTS = {"IteratorGetNextOp::DoCompute": "input", "tf.function-graph_building": "compile",
                "SessionRun": "session", "InstantiatedCapturedFunction::Run": "function", "tfplace_host_read": "read",
                "FunctionRun": "launch", "ExecutorState::Process": "executor", "tfplace_session_run": "session_of"}


def _kind(name: str) -> _Kind:
    """What an event name of a host plane is: (kind, op type or devices)."""
    if name in _MEMORY_EVENTS:
        return _MEMORY, _MEMORY_EVENTS[name]
    if name.startswith(_EAGER):
        op = name[len(_EAGER):]
        if _names.is_function_call(op):
            return _CALL, op  # its nodes are counted on their own; the call is kept for a timeline
        if _tensorflow.op_def(_kernels.op_type(op)) is None:
            return (_SKIP,)
        return _EAGER_OP, _kernels.op_type(op)
    if name == _KERNEL_RUN:
        return (_KERNEL,)
    if name == _ASYNC_START:
        return (_ASYNC,)
    if name in _STEP_EVENTS or name.startswith("Iterator::"):
        return _STEP, _STEP_EVENTS.get(name, "stage")
    if _NAMED.match(name):
        return (_NAME,)  # a tf.function's call or a step marker, known by its stats
    copied = _EAGER_COPY.match(name)
    if copied:
        return _COPY, copied[1], copied[2]
    node, colon, kernel = name.rpartition(":")
    if not colon or not node or not kernel or " " in name or "::" in name:
        return (_SKIP,)
    op = _kernels.op_type(kernel)
    if op in _TRANSFERS:
        return (_SEND,)
    if op in _NOT_WORK:
        return (_OTHER_NODE,)
    if _tensorflow.op_def(op) is None:
        return (_SKIP,)  # a TraceMe of TensorFlow's own, not a node
    return _WORK, _unfused(op), node


def _unfused(op: str) -> str:
    """The op type a graph-optimizer fusion computes first, which the user's records know
    (`_FusedMatMul` → `MatMul`, `_FusedConv2D` → `Conv2D`): a fused kernel's time goes to it."""
    if op.startswith("_Fused"):
        base = op[len("_Fused"):]
        if _tensorflow.op_def(base) is not None:
            return base
    return op


_Pending = tuple[float, float, str, tuple[str, int]]  # an eager op's start, µs, op type, line


def _host_plane(plane: Any, tally: _Tally, node_devices: Mapping[str, str], pending: list[_Pending]) -> None:
    """Reads a host plane into `tally`; its eager ops go to `pending` (matched to records later)."""
    kinds = {key: _kind(metadata.name) for key, metadata in plane.event_metadata.items()}
    for line in plane.lines:
        base_us = line.timestamp_ns / 1e3
        eager: list[list[Any]] = []
        kernels: list[tuple[float, float]] = []
        pipeline = line.name.startswith("tf_data")
        where = (plane.name, line.id)
        for event in line.events:
            kind = kinds.get(event.metadata_id, (_SKIP,))
            what = kind[0]
            if what == _SKIP:
                continue
            start, duration = base_us + event.offset_ps / 1e6, event.duration_ps / 1e6
            if what == _STEP and kind[1] in _PIPELINE_ONLY and not pipeline:
                continue  # a function's launch or run outside tf.data's threads: not an input stage's
            if what == _NAME or what == _STEP:
                kinds[event.metadata_id] = _step_event(plane, event, kind, start, duration, (plane.name, line.id),
                                                       tally.steps)
            elif what == _MEMORY:
                tally.allocations.append(allocation(stats(plane, event), start, kind[1]))
            elif what == _EAGER_OP:
                eager.append([start, duration, kind[1]])
            elif what == _CALL:
                tally.calls.append(CallRun(start, duration, kind[1]))
            elif what == _KERNEL:
                kernels.append((start, duration))
            elif what == _COPY:
                tally.moved(kind[1], kind[2], 0, start, duration)
            elif what == _WORK:
                tally.nodes[kind[2]] += 1
                if len(kind) == 3:  # its node's device, found once per event name
                    device = node_devices.get(kind[2], "")
                    kind = kinds[event.metadata_id] = (*kind, canonical_name(device) if device else "")
                tally.ran(where, kind[3], kind[1], start, duration, True, pipeline=pipeline)
            elif what == _ASYNC:
                node = str(stats(plane, event).get("name", ""))
                if node:
                    tally.nodes[node] += 1
            else:
                node = plane.event_metadata[event.metadata_id].name.rpartition(":")[0]
                tally.nodes[node] += 1
                if what == _SEND:
                    said = stats(plane, event)
                    parts = str(said.get("key", "")).split(";")
                    if len(parts) >= 3:
                        tally.moved(parts[0], parts[2], 0, start, duration)
                    tally.sent(str(said.get("from", "")), str(said.get("to", "")), duration)
        _kernel_times(eager, kernels)
        pending.extend((start, duration, op, (plane.name, line.id)) for start, duration, op in eager)


def _step_event(plane: Any, event: Any, kind: _Kind, start: float, duration: float, line: tuple[str, int],
                steps: StepEvents) -> _Kind:
    """Gives `steps` an event of a step's kind; returns the kind of its name from now on (a name that is
    neither a tf.function's call nor a step marker is skipped after its first event)."""
    name = plane.event_metadata[event.metadata_id].name
    if kind[0] == _STEP:
        what = kind[1]
        if what == "input":
            steps.input.append((start, duration))
        elif what == "compile":
            steps.compile.append((start, duration))
        elif what == "session":
            steps.sessions.append((start, duration))
        elif what == "function":
            steps.function_run(line, start)
        elif what == "read":
            steps.reads.append((start, duration, str(stats(plane, event).get("source", ""))))
        elif what == "session_of":  # tfplace's own event around a Session.run: its Session and line
            said = stats(plane, event)
            steps.session_runs.append(SessionRun(start, duration, str(said.get("source", "")),
                                                 integer(said.get("session", 0))))
        elif what == "launch":  # an asynchronous stage's function, run on tf.data's threads (`executor`)
            steps.function_launch(line, start, integer(stats(plane, event).get("_p", 0)))
        elif what == "executor":
            steps.executor_run(integer(stats(plane, event).get("_c", 0)), duration)
        else:
            steps.stage(line, name, start, duration, stats(plane, event))
        return kind
    said = stats(plane, event)
    if "tf_function_call" in said:
        steps.call(start, duration, name, str(said["tf_function_call"]), line)
    elif "step_num" in said:
        steps.mark(start, duration, name, said["step_num"])
    else:
        return (_SKIP,)
    return kind


def _kernel_times(eager: list[list[Any]], kernels: list[tuple[float, float]]) -> None:
    """Gives each eager op ([start, µs, op]) the start and time of its kernel runs (the
    `EagerKernelExecute` events inside it on its line), where it has any."""
    eager.sort()
    kernels.sort()
    k = 0
    for op in eager:
        end = op[0] + op[1]
        while k < len(kernels) and kernels[k][0] < op[0]:
            k += 1
        inside = []
        while k < len(kernels) and kernels[k][0] + kernels[k][1] <= end:
            inside.append(kernels[k])
            k += 1
        if inside:
            op[0], op[1] = inside[0][0], sum(duration for _, duration in inside)


def read_xspace(space: Any, node_devices: Mapping[str, str] = {},
                eager: Iterable[tuple[str, str]] = ()) -> Timing:
    """Executions and time per device and op, transfers, step and allocator events, from a profile.

    Args:
      space: the `XSpace` (`ProfilerSession.stop()`, or a kept profile's files).
      node_devices: function node name -> device, for the nodes' events (from the capture's records,
        or the NodeDefs of the placed graphs).
      eager: (op type, device) of the block's eager ops, in the order they ran (the capture's
        "execute" records): the k-th event of an op type ran on the k-th such device.

    Python's cyclic garbage collector pauses meanwhile: a long profile makes hundreds of thousands of records,
    instances of tuple subclasses that the collector would walk again at every pass (they hold no cycle), which
    doubled the time of a 10,000-step profile's reading."""
    with _tensorflow.collection_paused():
        return _read(space, node_devices, eager)


def _read(space: Any, node_devices: Mapping[str, str], eager: Iterable[tuple[str, str]]) -> Timing:
    """`read_xspace`'s reading."""
    queues: dict[str, deque[tuple[str, int]]] = {}
    for index, (op, device) in enumerate(eager):
        queues.setdefault(op, deque()).append((device, index))
    # a GPU's plane is `/device:GPU:<n>` in any process: in a cluster's task, that task's GPU
    gpus = {plane.name: canonical_name(f"/device:GPU:{found[1]}") for plane in space.planes
            for found in [_GPU_PLANE.match(plane.name)] if found}
    tally = _Tally(frozenset(gpus.values()))
    pending: list[_Pending] = []
    for plane in space.planes:
        if plane.name in gpus:
            _gpu(tally, plane, gpus[plane.name])
        elif plane.name == "/host:CPU":
            _host_plane(plane, tally, node_devices, pending)
    pending.sort(key=lambda item: item[0])
    for start, duration, op, line in pending:
        queue = queues.get(op)
        device, index = queue.popleft() if queue else ("", -1)
        device = canonical_name(device) if device else ""
        tally.ran(line, device, op, start, duration, True, index)
        if device:
            tally.eager[(device, op)] += 1
    return tally.timing()


def _gpu(tally: _Tally, plane: Any, device: str) -> None:
    """A GPU's plane into `tally`: its kernels as work, its copies as transfers (those from host memory also as
    the steps' host copies)."""
    read = _gpu_planes.gpu_plane(plane, device)
    for kernel in read.kernels:
        tally.ran((plane.name, kernel.line), device, kernel.op, kernel.start_us, kernel.duration_us, False)
    for copy in read.copies:
        source, target = canonical_name(copy.source), canonical_name(copy.target)
        tally.moved(source, target, copy.bytes, copy.start_us, copy.duration_us)
        if source.endswith("/device:CPU:0"):
            tally.steps.host_copies.append(HostCopy(target, copy.host_memory, copy.bytes, copy.start_us,
                                                    copy.duration_us))
