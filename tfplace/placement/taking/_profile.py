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
  computes first, `MatMul`, since records keep the user's op types) on an executor line, or on the Python line when the function
  runs inline; no stat names its device, the caller passes each node's device. A `_Send`
  (`x/_1:_Send`) carries stats `from` (the producer node), `to` (the consumer) and `key`
  (`<send device>;<id>;<recv device>;<edge>;<frame>:<iteration>`). An asynchronous node
  (`_Recv`, a call) has no such event: `ExecutorState::ProcessAsync::Start` with stats `name`
  (the node) and `kernel_type` (`_Recv`) marks each run.
* A second `start` while a session runs raises `AlreadyExistsError` ("Another profiler is
  running"), whether the session is the Python API's (a user's, Keras' TensorBoard callback,
  `tf.summary.trace_on(profiler=True)`) or one TensorFlow's profiler server started; a `stop`
  without one raises `UnavailableError`.

On a GPU, TensorFlow's device tracer (CUPTI) adds a `/device:GPU:<n>` plane per GPU with a
`Stream #<id>(...)` line per stream. Names as openxla/xla writes them
(`xla/tsl/profiler/utils/xplane_schema.cc`: `kGpuPlanePrefix`, the stats `kernel_details`,
`memcpy_details`, `tf_op`; `xla/backends/profiler/gpu/cupti_buffer_events.cc`: events
`MemcpyH2D`, `MemcpyD2H`, `MemcpyD2D`, `MemcpyP2P`, `MemcpyOther`, a peer copy on its source
GPU's plane; `xla/backends/profiler/gpu/cupti_collector.cc`: `kernel_details` on every kernel,
`memcpy_details` reading `kind_src:pageable kind_dst:device size:<bytes> dest:<device id>
async:1`, both as references to stat metadata, and `tf_op`, the launching op's `<node>:<type>`).
That reading is checked on XSpace protos the tests write in that schema, not on GPU hardware.

Busy time counts leaf work once: eager ops' kernel runs, function nodes' events (not the call
around them, nor `_Send`/`_Recv`, which are transfers), GPU kernels; a device with its own plane
is timed from that plane only. Events on one line never count twice: the part of an event
that an earlier counted event on its line already covers adds executions, not time.

Example:
    >>> import tensorflow as tf
    >>> from tfplace.placement.taking import _profile, _profiling
    >>> x = tf.ones((64, 64))
    >>> session = _profiling.ProfilerSession.start()
    >>> y = tf.matmul(x, x)
    >>> timing = _profile.read_xspace(session.stop(), eager=[("MatMul", "/device:CPU:0")])
    >>> timing.ops[("/device:CPU:0", "MatMul")][0] >= 1
    True
"""

from __future__ import annotations

import re
from collections import Counter, deque
from typing import Any, Iterable, Mapping, NamedTuple

from tfplace import _tensorflow
from tfplace._devices import canonical_name
from tfplace.placement.ops import _kernels
from tfplace.placement.records._records import is_function_call
from tfplace.placement.steps._events import StepEvents
from tfplace.placement.taking import _gpu_planes

__all__ = ["Timing", "read_xspace"]

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


class Timing(NamedTuple):
    """What a profile says.

    Attributes:
      devices: canonical device name -> (executions, busy µs).
      ops: (device, op type) -> (executions, µs); on a GPU, kernels (an op may launch several),
        under the op type of the launching op where the profile names it, else the kernel's name.
      transfers: (from_device, to_device) -> (count, bytes or 0 when unknown, µs).
      nodes: function node name -> executions (`_Send` and `_Recv` nodes included).
      sends: (producer node, consumer node) -> (executions, µs) of the `_Send` between them (in a
        loop, the send at the loop's exit runs once more per run, carrying no value).
      wall_us: the span of the counted events.
      threads: how many thread and stream lines had counted work.
      eager: (device, op type) -> executions of eager ops seen on the host (for a device timed
        from its own plane, not a part of `ops`).
      unattributed: events whose device is unknown (eager events beyond the records
        passed, nodes without a device).
      events: each counted event, for a timeline (`tfplace.placement.shown._perfetto`).
      moves: each transfer with its start and time, for a timeline.
      calls: each eager function call with its start and time, for a timeline (not busy time).
      steps: what the profile says about steps (`tfplace.placement.steps._events.StepEvents`).
    """

    devices: dict[str, tuple[int, float]]
    ops: dict[tuple[str, str], tuple[int, float]]
    transfers: dict[tuple[str, str], tuple[int, int, float]]
    nodes: dict[str, int]
    sends: dict[tuple[str, str], tuple[int, float]]
    wall_us: float
    threads: int
    eager: dict[tuple[str, str], int] = {}
    unattributed: int = 0
    events: tuple = ()  # (device, op, start µs, µs, line, index of the eager op in `read_xspace`'s list or -1)
    moves: tuple = ()  # (from device, to device, start µs, µs) of each transfer the profile saw
    calls: tuple = ()  # (start µs, µs, function) of each eager function call, in order
    steps: Any = None


def _stat(plane: Any, stat: Any) -> Any:
    kind = stat.WhichOneof("value")
    value = getattr(stat, kind) if kind else None
    return plane.stat_metadata[value].name if kind == "ref_value" else value


def _stats(plane: Any, event: Any) -> dict[str, Any]:
    return {plane.stat_metadata[s.metadata_id].name: _stat(plane, s) for s in event.stats}


class _Tally:
    def __init__(self, planes: frozenset) -> None:
        self.planes = planes  # devices timed from their own plane
        self.work: dict[Any, list] = {}  # line -> [(start µs, µs, device, op)]
        self.ops: dict[tuple[str, str], list] = {}
        self.transfers: dict[tuple[str, str], list] = {}
        self.nodes: Counter = Counter()
        self.sends: dict[tuple[str, str], list] = {}
        self.first = float("inf")
        self.last = float("-inf")
        self.eager: Counter = Counter()
        self.unattributed = 0
        self.moves: list[tuple[str, str, float, float]] = []
        self.calls: list[tuple[float, float, str]] = []  # (start µs, µs, function) of each eager function call
        self.waited: Counter = Counter()  # (device, op) -> executions of ops that wait
        self.steps = StepEvents()

    def ran(self, line: Any, device: str, op: str, start_us: float, duration_us: float, host: bool,
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
        entry = self.transfers.setdefault((canonical_name(source), canonical_name(target)), [0, 0, 0.0])
        entry[0] += 1
        entry[1] += size
        entry[2] += duration_us
        self.moves.append((canonical_name(source), canonical_name(target), start_us, duration_us))
        self.span(start_us, duration_us)

    def timing(self) -> Timing:
        every = []
        ops = self.ops
        for number, events in enumerate(self.work.values()):
            covered = float("-inf")
            events.sort()
            for start, duration, device, op, eager in events:
                every.append((device, op, start, duration, number, eager))
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
            self.ops.setdefault(key, [0, 0.0])[0] += count
        devices: dict[str, list] = {}
        for (device, _), (count, time) in self.ops.items():
            entry = devices.setdefault(device, [0, 0.0])
            entry[0] += count
            entry[1] += time
        wall = self.last - self.first if self.last >= self.first else 0.0
        return Timing({d: (n, t) for d, (n, t) in sorted(devices.items())},
                      {k: (n, t) for k, (n, t) in sorted(self.ops.items())},
                      {k: (n, b, t) for k, (n, b, t) in self.transfers.items()},
                      dict(self.nodes), {k: (n, t) for k, (n, t) in self.sends.items()}, wall, len(self.work),
                      dict(self.eager), self.unattributed, tuple(every), tuple(self.moves), tuple(sorted(self.calls)),
                      self.steps)


_SKIP, _EAGER_OP, _KERNEL, _COPY, _WORK, _SEND, _OTHER_NODE, _ASYNC, _CALL, _NAME, _STEP = range(11)
_STEP_EVENTS = {"IteratorGetNextOp::DoCompute": "input", "tf.function-graph_building": "compile",
                "SessionRun": "session", "InstantiatedCapturedFunction::Run": "function", "tfplace_host_read": "read"}


def _kind(name: str) -> tuple:
    """What an event name of a host plane is: (kind, op type or devices)."""
    if name.startswith(_EAGER):
        op = name[len(_EAGER):]
        if is_function_call(op):
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


def _host_plane(plane: Any, tally: _Tally, node_devices: Mapping[str, str], pending: list) -> None:
    """Reads a host plane into `tally`; its eager ops go to `pending` (matched to records later)."""
    kinds = {key: _kind(metadata.name) for key, metadata in plane.event_metadata.items()}
    for line in plane.lines:
        base_us = line.timestamp_ns / 1e3
        eager, kernels = [], []
        pipeline = line.name.startswith("tf_data")
        where = (plane.name, line.id)
        for event in line.events:
            kind = kinds.get(event.metadata_id, (_SKIP,))
            what = kind[0]
            if what == _SKIP:
                continue
            start, duration = base_us + event.offset_ps / 1e6, event.duration_ps / 1e6
            if what == _NAME or what == _STEP:
                kinds[event.metadata_id] = _step_event(plane, event, kind, start, duration, (plane.name, line.id),
                                                       tally.steps)
            elif what == _EAGER_OP:
                eager.append([start, duration, kind[1]])
            elif what == _CALL:
                tally.calls.append((start, duration, kind[1]))
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
                node = str(_stats(plane, event).get("name", ""))
                if node:
                    tally.nodes[node] += 1
            else:
                node = plane.event_metadata[event.metadata_id].name.rpartition(":")[0]
                tally.nodes[node] += 1
                if what == _SEND:
                    stats = _stats(plane, event)
                    parts = str(stats.get("key", "")).split(";")
                    if len(parts) >= 3:
                        tally.moved(parts[0], parts[2], 0, start, duration)
                    entry = tally.sends.setdefault((str(stats.get("from", "")), str(stats.get("to", ""))), [0, 0.0])
                    entry[0] += 1
                    entry[1] += duration
        _kernel_times(eager, kernels)
        pending.extend((start, duration, op, (plane.name, line.id)) for start, duration, op in eager)


def _step_event(plane: Any, event: Any, kind: tuple, start: float, duration: float, line: tuple,
                steps: StepEvents) -> tuple:
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
            steps.reads.append((start, duration, str(_stats(plane, event).get("source", ""))))
        else:
            steps.stage(line, name, start, duration, _stats(plane, event))
        return kind
    stats = _stats(plane, event)
    if "tf_function_call" in stats:
        steps.call(start, duration, name, str(stats["tf_function_call"]), line)
    elif "step_num" in stats:
        steps.mark(start, duration, name, stats["step_num"])
    else:
        return (_SKIP,)
    return kind


def _kernel_times(eager: list, kernels: list) -> None:
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
    """Executions and time per device and op, and transfers, from a profile.

    Args:
      space: the `XSpace` (`Session.stop()`).
      node_devices: function node name -> device, for the nodes' events (from the capture's records,
        or the NodeDefs of the placed graphs).
      eager: (op type, device) of the block's eager ops, in the order they ran (the capture's
        "execute" records): the k-th event of an op type ran on the k-th such device.
    """
    queues: dict[str, deque] = {}
    for index, (op, device) in enumerate(eager):
        queues.setdefault(op, deque()).append((device, index))
    gpus = {plane.name: f"/device:GPU:{found[1]}" for plane in space.planes for found in [_GPU_PLANE.match(plane.name)]
            if found}
    tally = _Tally(frozenset(gpus.values()))
    pending: list = []
    for plane in space.planes:
        if plane.name in gpus:
            _gpu_planes.gpu_plane(plane, tally, gpus[plane.name], _stats)
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
