"""Checks that name what breaks a cluster, before TensorFlow hangs or reports a crashed peer.

Each task publishes what it is about to run (`Publisher`): at the start of every call of a function
that joins collective groups, the groups (op, group size and key, device type, dtype, shape,
communication hint, the user's line) and how many calls of it started and ended; the devices its
graphs name; at exit, its status. `mismatch(states, statuses)` compares the tasks' states and says,
in one line naming both tasks, what differs:

* a collective group whose size, device type, dtype, shape or hint differs between tasks
  (TensorFlow: "joining a group with size3, but that group has size 2", or a hang);
* uneven calls: a task that ended after fewer calls of a group than a peer now waiting in it
  (TensorFlow aborts the waiting peer about 10 s later, saying a task "crashed");
* a device a graph names that no task of the cluster has.

Under `tfplace launch --trace` tasks publish into a folder (`TFPLACE_CLUSTER_DIR`) that the launcher
watches (`watch`); `tfplace.cluster_guard()` (`tfplace.cluster._guard`) does the same inside a task
started another way, through the cluster's coordination service.

Example:
    >>> from tfplace.cluster._checks import mismatch
    >>> group = {"op": "CollectiveReduceV2", "group_key": 1, "group_size": 2, "device_type": "CPU",
    ...          "dtype": "float32", "shape": [8], "hint": "auto", "node": "CollectiveReduceV2",
    ...          "source": "train.py:20", "function": "f"}
    >>> states = {"worker:0": {"groups": [group], "calls": {"f": [3, 3]}},
    ...           "worker:1": {"groups": [dict(group, group_size=3)], "calls": {"f": [1, 0]}}}
    >>> print(mismatch(states, {"worker:0": None, "worker:1": None}))  # doctest: +NORMALIZE_WHITESPACE
    tfplace: collective group 1 (CollectiveReduceV2) differs between worker:0 and worker:1: group size 2 vs 3
    (worker:0 at train.py:20, worker:1 at train.py:20)
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from typing import Any, Callable, Iterator, Optional, Sequence

__all__ = ["DIRECTORY", "MISMATCH_STATUS", "Publisher", "mismatch", "watch", "script_statuses", "publishing",
           "install", "uninstall", "cluster_jobs", "last_state"]

DIRECTORY = "TFPLACE_CLUSTER_DIR"  # where tasks publish under `tfplace launch --trace`
MISMATCH_STATUS = 3
_COMPARED = (("group_size", "group size"), ("device_type", "device type"), ("hint", "communication hint"))
_PER_TENSOR = (("dtype", "dtype"), ("shape", "shape"))


# --- comparing -------------------------------------------------------------------------------------

def _calls(state: dict[str, Any], key: Any) -> tuple[int, int]:
    """(started, ended) calls of group `key` in a task: the sum over its functions that join it."""
    functions = {g["function"] for g in state.get("groups", ()) if g["group_key"] == key}
    started = ended = 0
    for function in functions:
        s, e = state.get("calls", {}).get(function, (0, 0))
        started, ended = started + s, ended + e
    return started, ended


def _signature_mismatch(states: dict[str, dict[str, Any]]) -> Optional[str]:
    first: dict[Any, tuple[str, dict]] = {}
    tensors: dict[tuple, tuple[str, dict]] = {}
    for task, state in sorted(states.items()):
        for group in state.get("groups", ()):
            key = group["group_key"]
            if key is None:
                continue
            checks = [(first, key, _COMPARED), (tensors, (key, group["op"], group.get("instance_key"),
                                                          group.get("node")), _PER_TENSOR)]
            for seen, at, fields in checks:
                if at not in seen:
                    seen[at] = (task, group)
                    continue
                other_task, other = seen[at]
                if other_task == task:
                    continue
                for field, words in fields:
                    if other.get(field) != group.get(field):
                        return (f"tfplace: collective group {key} ({group['op']}) differs between {other_task} and "
                                f"{task}: {words} {_shown(other.get(field))} vs {_shown(group.get(field))} "
                                f"({other_task} at {other.get('source') or 'an unknown line'}, {task} at "
                                f"{group.get('source') or 'an unknown line'})")
    return None


def _shown(value: Any) -> str:
    return "none" if value is None else "x".join(map(str, value)) if isinstance(value, list) else str(value)


def _uneven(states: dict[str, dict[str, Any]], statuses: dict[str, Optional[int]]) -> Optional[str]:
    for task, status in statuses.items():
        state = states.get(task)
        if status is None or state is None:
            continue
        for group in state.get("groups", ()):
            key = group["group_key"]
            done, _ = _calls(state, key)
            for peer, other in states.items():
                if peer == task or not any(g["group_key"] == key for g in other.get("groups", ())):
                    continue
                started, ended = _calls(other, key)
                if started > done and started > ended:
                    how = "exited" if status == 0 else f"ended with status {status}"
                    return (f"tfplace: uneven calls of collective group {key} ({group['op']} at "
                            f"{group.get('source') or 'an unknown line'}): {task} {how} after {done} call(s), "
                            f"{peer} waits in call {started}; give every task the same number of steps "
                            "(as many batches per worker), or stop them all at the same step")
    return None


def _device_mismatch(states: dict[str, dict[str, Any]], jobs: dict[str, int]) -> Optional[str]:
    have = {d for state in states.values() for d in state.get("devices", ())}
    published = {state.get("prefix") for state in states.values()}
    for task, state in states.items():
        for device, (function, source) in state.get("named", {}).items():
            job, _, rest = device[len("/job:"):].partition("/")
            index = int(rest.split("task:")[1].split("/")[0]) if "task:" in rest else 0
            prefix = device.rpartition("/device:")[0]
            if jobs and (job not in jobs or index >= jobs[job]):
                return (f"tfplace: {task}'s function {function} (at {source or 'an unknown line'}) names device "
                        f"{device}, which no task of the cluster has: its jobs are "
                        + ", ".join(f"{name} ({count} task(s))" for name, count in sorted(jobs.items())))
            if "/device:" in device and prefix in published and device not in have:  # (a task alone: any device)
                owner = next(t for t, s in states.items() if s.get("prefix") == prefix)
                return (f"tfplace: {task}'s function {function} (at {source or 'an unknown line'}) names device "
                        f"{device}, which {owner} does not have: its devices are "
                        + ", ".join(sorted(d for d in have if d.startswith(prefix + "/"))))
    return None


def mismatch(states: dict[str, dict[str, Any]], statuses: dict[str, Optional[int]],
             jobs: Optional[dict[str, int]] = None) -> Optional[str]:
    """One line naming what breaks the cluster, or None. `states`: what each task published, by task
    name ("worker:1"); `statuses`: each task's exit status, None while it runs; `jobs`: the cluster's
    jobs and their task counts (from TF_CONFIG)."""
    return (_signature_mismatch(states) or _uneven(states, statuses)
            or _device_mismatch(states, jobs or {}))


# --- publishing --------------------------------------------------------------------------------------

class Publisher:
    """What this task publishes: while it is started, every call of a function that joins collective
    groups (through `tfplace._tensorflow.CALL_FLAT`). `write(state)` sends the whole state: at once for a
    function's first call (its groups, before it can block) and at exit, else from a thread at most every
    `interval` seconds while something changed (a task blocked in a collective has published its calls
    within `interval`). Without `write`, the state is only kept (`tfplace trace`'s cluster section)."""

    def __init__(self, task: str, prefix: str, write: Optional[Callable[[str], None]],
                 first_call: Optional[Callable[[list], None]] = None, interval: float = 0.2) -> None:
        self.task, self.write, self.first_call, self.interval = task, write, first_call, interval
        self.state: dict[str, Any] = {"task": task, "prefix": prefix, "devices": [], "groups": [], "calls": {},
                                      "named": {}, "remote": {}, "exit": None}
        self._known: dict[str, tuple[list, list]] = {}  # function -> (its groups, devices its nodes name)
        self._collectives: dict[str, tuple] = {}  # function -> its own nodes' collectives (`collectives_in`)
        # (function, device asked: None outside any tf.device scope) -> its "remote" keys
        self._remote_keys: dict[tuple[str, Optional[str]], list[str]] = {}
        self._lock = threading.Lock()
        self._changed = False
        self._stopped = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def publish(self) -> None:
        """Sends the state now."""
        if self.write is None:
            return
        with self._lock:
            text, self._changed = json.dumps(self.state), False
        self.write(text)

    def _later(self) -> None:
        """The state changed: the publishing thread sends it within `interval`."""
        if self.write is None:
            return
        self._changed = True
        if self._thread is None:
            self._thread = threading.Thread(target=self._publishing, daemon=True, name="tfplace cluster publisher")
            self._thread.start()

    def _publishing(self) -> None:
        while not self._stopped.wait(self.interval):
            if self._changed:
                self.publish()

    def stop(self) -> None:
        """Ends the publishing thread, sending what changed last."""
        self._stopped.set()
        if self._changed:
            self.publish()

    def _about(self, function: Any) -> tuple[str, list, list]:
        from tfplace import _tensorflow
        from tfplace.cluster._names import tensor_bytes

        name = _tensorflow.call_name(function)
        known = self._known.get(name)
        if known is None:
            definition = _tensorflow.call_definition(function)
            groups = [{"op": c.op, "group_key": c.group_key, "group_size": c.group_size,
                       "instance_key": c.instance_key, "node": c.node,
                       "device_type": c.device.rpartition(":")[0].rpartition(":")[2] if c.device else "",
                       "dtype": c.dtype, "shape": None if c.shape is None else list(c.shape), "hint": c.hint,
                       "function": name, "bytes_per_call": tensor_bytes(c.dtype, c.shape), "in_loop": c.in_loop}
                      for c in _tensorflow.collectives_in(name, definition, _tensorflow.call_graph(function),
                                                        self._collectives)]
            named = sorted({_named(node.device) for node in definition.node_def if node.device.startswith("/job:")})
            known = self._known[name] = (groups, named)
        return name, known[0], known[1]

    def _remote(self, function: Any, name: str, args: Sequence[Any]) -> None:
        """Counts the call's reads and writes of variables on another task than the one it runs on (the
        handles a function captured are the same at every call: found once per function and device)."""
        from tfplace import _tensorflow

        asked = _tensorflow.device_name()
        keys = self._remote_keys.get((name, asked))
        if keys is None:
            keys = self._remote_keys[(name, asked)] = self._remote_accesses(function, name, args, asked)
        if keys:
            with self._lock:  # "remote": variables read or written on another task, by access
                for key in keys:
                    self.state["remote"][key]["count"] += 1

    def _remote_accesses(self, function: Any, name: str, args: Sequence[Any], asked: Optional[str]) -> list[str]:
        from tfplace import _tensorflow
        from tfplace._devices import local_task
        from tfplace.cluster._names import task_of, tensor_bytes
        from tfplace.cluster._variables import variable_name

        accesses = _tensorflow.variable_accesses(function)
        if not accesses:
            return []
        asked = asked or next(iter(_tensorflow.logical_device_names()), "") or local_task()
        runs_on = _named(asked)
        keys = []
        for access in accesses:
            handle = args[access.argument] if access.argument < len(args) else None
            held = getattr(handle, "device", "") or ""  # "" in a graph being exported (tf.saved_model.save)
            if not task_of(held) or task_of(held) == task_of(runs_on):
                continue
            held = _named(held)
            source, target = (held, runs_on) if access.read else (runs_on, held)
            keys.append(" ".join((source, target, access.op, access.node, name)))
            with self._lock:
                self.state["remote"].setdefault(keys[-1], {
                    "from_device": source, "to_device": target, "count": 0, "function": name,
                    "what": f"{access.op} {variable_name(handle) or access.node}",
                    "bytes_per_call": tensor_bytes(access.dtype, access.shape)})
        return keys

    def call(self, function: Any, args: Sequence[Any], run: Callable[[], Any]) -> Any:
        """Runs a function call (`run`, with `args`), publishing its groups and calls around it when it joins
        any; counts its reads and writes of variables on other tasks."""
        name, groups, named = self._about(function)
        self._remote(function, name, args)
        if not groups and not named:
            return run()
        with self._lock:
            first = name not in self.state["calls"]
            if first:
                self._first(name, groups, named)
            self.state["calls"][name][0] += 1
        if first:
            self.publish()
            if self.first_call is not None and groups:
                self.first_call(groups)
        else:
            self._later()
        result = run()
        with self._lock:
            self.state["calls"][name][1] += 1
        self._later()
        return result

    def _first(self, name: str, groups: list, named: list) -> None:
        """A function's first call: its groups (each with the line that made its collective, where the function
        was watched, else the call's) and the devices it names, with the user's line."""
        from tfplace import _tensorflow
        from tfplace._devices import canonical_name
        from tfplace.placement.functions._function_sources import lines
        from tfplace.placement.session._sources import user_line

        source = user_line()
        made = lines(name)
        if not self.state["devices"]:
            self.state["devices"] = sorted({canonical_name(n) for n in _tensorflow.logical_device_names()})
        for device in named:
            self.state["named"].setdefault(device, (name, source))
        self.state["groups"] += [dict(g, source=made.get(g["node"]) or source)
                                 for g in groups]
        self.state["calls"][name] = [0, 0]

    def exited(self, status: int) -> None:
        self.state["exit"] = status
        self.publish()


def _named(device: str) -> str:
    """A device's canonical name; a task's name alone (`/job:localhost/replica:0/task:0`, as a strategy's
    `tf.device` scope gives) stays as it is."""
    from tfplace._devices import canonical_name
    from tfplace.cluster._names import task_of

    return canonical_name(device) if device and device.rstrip("/") != task_of(device) else device


def _file_writer(directory: str, task: str) -> Callable[[str], None]:
    """Writes the state whole into `directory/<task>.state.json` (a rename: readers never see half)."""
    path = os.path.join(directory, f"{task}.state.json")
    temporary = path + f".{os.getpid()}.tmp"

    def write(text: str) -> None:
        with open(temporary, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)

    return write


def _read_states(directory: str) -> dict[str, dict[str, Any]]:
    states = {}
    for name in os.listdir(directory):
        if name.endswith(".state.json"):  # one that cannot be read now is left out
            with contextlib.suppress(OSError, ValueError), open(os.path.join(directory, name), encoding="utf-8") as f:
                states[name[:-len(".state.json")]] = json.load(f)
    return states


def cluster_jobs() -> dict[str, int]:
    """The jobs of this process's `TF_CONFIG` cluster and their task counts ({} without one)."""
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster") or {}
        return {job: len(tasks) for job, tasks in cluster.items() if isinstance(tasks, list)}
    except (ValueError, AttributeError):
        return {}


def watch(directory: str, statuses: dict[str, Optional[int]], jobs: Optional[dict[str, int]] = None) -> Optional[str]:
    """The launcher's check: what the tasks published in `directory`, compared (`mismatch`)."""
    return mismatch(_read_states(directory), statuses, jobs)


def script_statuses(directory: str) -> dict[str, int]:
    """Each task's script's exit status, published before its trace closes (`Publisher.exited`), if it ended."""
    return {task: s["exit"] for task, s in _read_states(directory).items() if isinstance(s.get("exit"), int)}


# --- in a task ---------------------------------------------------------------------------------------

_active: list[Publisher] = []  # the publisher of this process while one is started (one per process)


def install(publisher: Publisher) -> None:
    from tfplace import _tensorflow

    _active.append(publisher)
    if len(_active) == 1:
        original = _tensorflow.CALL_FLAT

        def call_flat(function: Any, *args: Any) -> Any:
            if not _active:
                return original.original(function, *args)
            return _active[-1].call(function, args, lambda: original.original(function, *args))

        original.install(call_flat)


def uninstall(publisher: Publisher) -> None:
    from tfplace import _tensorflow

    _active.remove(publisher)
    if not _active:
        _tensorflow.CALL_FLAT.remove()


def last_state() -> Optional[dict[str, Any]]:
    """The state the last `publishing()` block of this process kept (None before any)."""
    return _last[0] if _last else None


_last: list[dict[str, Any]] = []


@contextlib.contextmanager
def publishing(directory: Optional[str]) -> Iterator[Publisher]:
    """Keeps this task's state while the block runs (`tfplace trace` lists its collective groups from it)
    and, with a `directory` (`tfplace launch --trace`), publishes it there for the launcher's checks."""
    from tfplace._devices import local_task
    from tfplace.cluster._names import task_name

    prefix = local_task()
    task = task_name(prefix) or f"pid-{os.getpid()}"
    publisher = Publisher(task, prefix, _file_writer(directory, task) if directory else None)
    _last[:] = [publisher.state]
    install(publisher)
    try:
        yield publisher
    finally:
        uninstall(publisher)
        publisher.stop()
