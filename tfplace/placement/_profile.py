"""TensorFlow's own profiler around a block, read back as executions and time per device and op.

What TensorFlow 2.21's profiler writes (`tf.profiler.experimental.start/stop`, one session per
process; `<logdir>/plugins/profile/<run>/<host>.xplane.pb`, an `XSpace` read with the
profiler's own schema, `xplane_pb2`), checked on CPU with two logical devices:

* The `/host:CPU` plane has one line per Python thread (`python`) and one per executor thread
  (`tf_Compute/<id>`). Times are picoseconds from the line's `timestamp_ns`.
* An eager op is an `EagerLocalExecute: MatMul` event on its Python thread's line, spanning its
  kernel (eager kernels run inline); a function call is `EagerLocalExecute: __inference_f_10`,
  spanning the function's run. No stat names the device: the k-th event of an op type is the
  k-th "execute" record of that op type in the capture's log (the capture passes them in order).
* A function's node is a `<node>:<kernel>` event on an executor line (`MatMul:_MklMatMul`,
  `Sum:Sum`): no stat names the device either; the capture passes each node's device from its
  records. A `_Send` node (`x/_1:_Send`) carries stats `from` (the producer node), `to` (the
  consumer) and `key` (`<send device>;<id>;<recv device>;<edge>;...`): one per transfer that ran.
* An eager copy between devices is an `EagerCopyToDevice` event on the Python line, with a
  `_Send input 0 from <device> to <device>` event for each tensor moved.
* A second `start` while a session runs raises `AlreadyExistsError` ("Another profiler is
  running"); a `stop` without one raises `UnavailableError`.

On a GPU, TensorFlow's device tracer adds a `/device:GPU:<n>` plane per GPU: kernels are events
on its stream lines, and copies are `MemcpyH2D`, `MemcpyD2H`, `MemcpyD2D` and `MemcpyP2P` events
whose `memcpy_details` stat reads `kind_src:... kind_dst:... size:<bytes> dest:<device> async:...`
(stat names as `tsl/profiler/utils/xplane_schema.cc` declares them). That reading is checked on
XSpace protos the tests write in the schema, not on GPU hardware.

Busy time counts leaf work once: eager ops' events, function nodes' events (not the function
call around them, nor `_Send`/`_Recv`, which are transfers), GPU kernels.

Example:
    >>> import tensorflow as tf
    >>> from tfplace.placement import _profile
    >>> x = tf.ones((64, 64))
    >>> session = _profile.Session.start()
    >>> y = tf.matmul(x, x)
    >>> timing = _profile.read_xspace(session.stop(), eager=[("MatMul", "/device:CPU:0")])
    >>> timing.ops[("/device:CPU:0", "MatMul")][0]
    1
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections import Counter, deque
from typing import Any, Iterable, Mapping, NamedTuple, Optional

from tfplace import _tensorflow
from tfplace._devices import canonical_name
from tfplace.placement import _kernels

__all__ = ["Session", "Timing", "read_xspace"]

_EAGER = "EagerLocalExecute: "
_EAGER_COPY = re.compile(r"^_Send input \d+ from (\S+) to (\S+)$")
_TRANSFERS = frozenset({"_Send", "_HostSend"})
_NOT_WORK = frozenset({"_Recv", "_HostRecv", "PartitionedCall", "StatefulPartitionedCall", "If", "StatelessIf",
                       "While", "StatelessWhile", "Case", "StatelessCase", "RemoteCall"})
_MEMCPY = {"MemcpyH2D": "HtoD", "MemcpyD2H": "DtoH", "MemcpyD2D": "DtoD", "MemcpyP2P": "PtoP"}
_HOST = "/device:CPU:0"


class Session:
    """One profiler session around a block: `Session.start()`, then `stop()` for its `XSpace`.

    Attributes:
      missing: why there is no profile ("" while there may be one): another profiler
        session was active when it started, or stopping failed.
    """

    def __init__(self, logdir: Optional[str], missing: str = "") -> None:
        self.logdir, self.missing = logdir, missing

    @classmethod
    def start(cls) -> "Session":
        """Starts TensorFlow's profiler in a fresh folder, unless another session holds it (then
        `missing` says so and nothing starts)."""
        logdir = tempfile.mkdtemp(prefix="tfplace-profile-")
        try:
            _tensorflow.profiler_start(logdir)
        except _tensorflow.ProfilerBusy as error:
            shutil.rmtree(logdir, ignore_errors=True)
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            return cls(None, "another TensorFlow profiler session was active (TensorFlow said: "
                             f"{first}); TensorFlow runs one per process")
        return cls(logdir)

    def stop(self) -> Optional[Any]:
        """Stops the profiler and returns its `XSpace` (None when it never started or stopping failed)."""
        if self.logdir is None:
            return None
        logdir, self.logdir = self.logdir, None
        try:
            try:
                _tensorflow.profiler_stop()
            except _tensorflow.ProfilerBusy as error:
                self.missing = f"TensorFlow's profiler could not stop ({str(error).strip() or type(error).__name__})"
                return None
            return _tensorflow.read_xspaces(os.path.join(root, name) for root, _, names in os.walk(logdir)
                                            for name in names if name.endswith(".xplane.pb"))
        finally:
            shutil.rmtree(logdir, ignore_errors=True)


class Timing(NamedTuple):
    """What a profile says.

    Attributes:
      devices: canonical device name -> (executions, busy µs).
      ops: (device, op type) -> (executions, µs).
      transfers: (from_device, to_device) -> (count, bytes or 0 when unknown, µs).
      nodes: function node name -> executions (`_Send` nodes included).
      sends: (producer node, consumer node) -> (executions, µs) of the `_Send` between them (in a
        loop, the send at the loop's exit runs once more per run, carrying no value).
      wall_us: the span of the profiled events.
      threads: how many thread and stream lines had work.
      eager: (device, op type) -> executions of eager ops (a part of `ops`).
      unattributed: events whose device is unknown (eager events beyond the records
        passed, nodes without a device).
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


def _stat(plane: Any, stat: Any) -> Any:
    kind = stat.WhichOneof("value")
    value = getattr(stat, kind) if kind else None
    return plane.stat_metadata[value].name if kind == "ref_value" else value


def _stats(plane: Any, event: Any) -> dict[str, Any]:
    return {plane.stat_metadata[s.metadata_id].name: _stat(plane, s) for s in event.stats}


def _memcpy(details: str) -> dict[str, str]:
    """`kind_src:Host kind_dst:Device size:4194304 dest:0 async:1` as a dict."""
    return dict(part.split(":", 1) for part in details.split() if ":" in part)


class _Tally:
    def __init__(self) -> None:
        self.ops: dict[tuple[str, str], list[float]] = {}
        self.transfers: dict[tuple[str, str], list[float]] = {}
        self.nodes: Counter = Counter()
        self.sends: dict[tuple[str, str], list] = {}
        self.first = float("inf")
        self.last = float("-inf")
        self.lines = 0
        self.eager: Counter = Counter()
        self.unattributed = 0

    def work(self, device: str, op: str, start_us: float, duration_us: float) -> None:
        if not device:
            self.unattributed += 1
            return
        entry = self.ops.setdefault((device, op), [0, 0.0])
        entry[0] += 1
        entry[1] += duration_us
        self.span(start_us, duration_us)

    def span(self, start_us: float, duration_us: float) -> None:
        self.first = min(self.first, start_us)
        self.last = max(self.last, start_us + duration_us)

    def moved(self, source: str, target: str, size: int, start_us: float, duration_us: float) -> None:
        entry = self.transfers.setdefault((canonical_name(source), canonical_name(target)), [0, 0, 0.0])
        entry[0] += 1
        entry[1] += size
        entry[2] += duration_us
        self.span(start_us, duration_us)

    def timing(self) -> Timing:
        devices: dict[str, list] = {}
        for (device, _), (count, time) in self.ops.items():
            entry = devices.setdefault(device, [0, 0.0])
            entry[0] += count
            entry[1] += time
        wall = self.last - self.first if self.last >= self.first else 0.0
        return Timing({d: (n, t) for d, (n, t) in sorted(devices.items())},
                      {k: (n, t) for k, (n, t) in sorted(self.ops.items())},
                      {k: (n, b, t) for k, (n, b, t) in self.transfers.items()},
                      dict(self.nodes), {k: (n, t) for k, (n, t) in self.sends.items()}, wall, self.lines,
                      dict(self.eager), self.unattributed)


_SKIP, _EAGER_OP, _COPY, _WORK, _SEND, _OTHER_NODE = range(6)


def _kind(name: str) -> tuple:
    """What an event name of the host plane is: (kind, op type or devices)."""
    if name.startswith(_EAGER):
        op = name[len(_EAGER):]
        if op.startswith("__") or _tensorflow.op_def(_kernels.op_type(op)) is None:
            return (_SKIP,)  # a function call: its nodes are counted on the executor's lines
        return _EAGER_OP, _kernels.op_type(op)
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
    return _WORK, op, node


def _host_plane(plane: Any, tally: _Tally, node_devices: Mapping[str, str],
                eager: dict[str, deque]) -> None:
    kinds = {key: _kind(metadata.name) for key, metadata in plane.event_metadata.items()}
    pending = []  # eager ops: matched to their records in the order they started
    busy_lines = set()
    for line in plane.lines:
        base_us = line.timestamp_ns / 1e3
        for event in line.events:
            kind = kinds.get(event.metadata_id, (_SKIP,))
            what = kind[0]
            if what == _SKIP:
                continue
            start, duration = base_us + event.offset_ps / 1e6, event.duration_ps / 1e6
            if what == _EAGER_OP:
                pending.append((start, duration, kind[1], line.name))
            elif what == _COPY:
                tally.moved(kind[1], kind[2], 0, start, duration)
            elif what == _WORK:
                node = kind[2]
                tally.nodes[node] += 1
                device = node_devices.get(node, "")
                tally.work(canonical_name(device) if device else "", kind[1], start, duration)
                busy_lines.add(line.name)
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
    pending.sort(key=lambda item: item[0])
    for start, duration, op, line_name in pending:
        queue = eager.get(op)
        device = canonical_name(queue.popleft()) if queue else ""
        tally.work(device, op, start, duration)
        if device:
            tally.eager[(device, op)] += 1
            busy_lines.add(line_name)
    tally.lines += len(busy_lines)


def _gpu_plane(plane: Any, tally: _Tally, device: str) -> None:
    busy_lines = set()
    for line in plane.lines:
        base_us = line.timestamp_ns / 1e3
        for event in line.events:
            name = plane.event_metadata[event.metadata_id].name
            start, duration = base_us + event.offset_ps / 1e6, event.duration_ps / 1e6
            stats = _stats(plane, event)
            kind = _MEMCPY.get(name)
            if kind is not None or "memcpy_details" in stats:
                details = _memcpy(str(stats.get("memcpy_details", "")))
                size = int(details.get("size", 0) or 0)
                kind = kind or ""
                if kind == "HtoD":
                    source, target = _HOST, device
                elif kind == "DtoH":
                    source, target = device, _HOST
                else:
                    dest = details.get("dest", "")
                    source, target = device, (f"/device:GPU:{dest}" if dest.isdigit() else device)
                tally.moved(source, target, size, start, duration)
                continue
            if "kernel_details" in stats or line.name.startswith("Stream"):
                tally.work(device, name, start, duration)
                busy_lines.add(line.name)
    tally.lines += len(busy_lines)


_GPU_PLANE = re.compile(r"^/device:GPU:(\d+)")


def read_xspace(space: Any, node_devices: Mapping[str, str] = {},
                eager: Iterable[tuple[str, str]] = ()) -> Timing:
    """Executions and time per device and op, and transfers, from a profile.

    Args:
      space: the `XSpace` (`Session.stop()`).
      node_devices: function node name -> device, for the nodes' events (from the capture's records).
      eager: (op type, device) of the block's eager ops, in the order they ran (the capture's
        "execute" records): the k-th event of an op type ran on the k-th such device.
    """
    queues: dict[str, deque] = {}
    for op, device in eager:
        queues.setdefault(op, deque()).append(device)
    tally = _Tally()
    for plane in space.planes:
        gpu = _GPU_PLANE.match(plane.name)
        if plane.name == "/host:CPU":
            _host_plane(plane, tally, node_devices, queues)
        elif gpu:
            _gpu_plane(plane, tally, f"/device:GPU:{gpu[1]}")
    return tally.timing()
