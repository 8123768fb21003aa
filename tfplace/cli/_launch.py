"""`tfplace launch`: a cluster of processes on 127.0.0.1, each task with its `TF_CONFIG`, watched as one.

`launch(script, args, Options(...))` starts a process per task (free ports) and prints each line they
print prefixed with the task (`[worker 1] `). Workers and the chief run the script; ps tasks, and with
them the workers, run a `tf.distribute.Server` (`_server`) while the chief coordinates. Exit status: 0
when every task that runs the script exited 0 (the servers are then stopped), else the first failing
task's, named in one line; 124 after the timeout, 128 + the number of a SIGINT, SIGTERM or SIGHUP,
once every task is stopped (SIGINT or SIGTERM, SIGKILL `kill_after` s later). Each task has its own
process group (Ctrl-C reaches it once, through the launcher) and dies with the launcher (Linux). With
`trace`: `tfplace trace --json` in each script task, `_checks.watch` every 0.2 s (a mismatch stops
the cluster: 3), and one report of the merged traces (`_merge`).

    tfplace launch --ps=1 --workers=2 --trace --json=cluster.json coordinator.py

Example:
    >>> from tfplace.cli._launch import Options, plan
    >>> [(task.name, task.runs_script) for task in plan(Options(workers=2, ps=1))]
    [('chief', True), ('worker:0', False), ('worker:1', False), ('ps:0', False)]
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Mapping, Optional, Sequence

from tfplace.cli._server import write_trace  # pure Python at import, as is this module
from tfplace.cli._task_output import emit, forward, say

__all__ = ["Options", "Task", "plan", "free_ports", "settings_text", "launch"]


@dataclasses.dataclass(frozen=True)
class Options:
    """What `tfplace launch` is asked for (its options)."""

    workers: int
    ps: int = 0
    chief: bool = False
    trace: bool = False
    timing: bool = False
    memory: bool = False
    json: Optional[str] = None
    perfetto: Optional[str] = None
    top: int = 20
    timeout: Optional[float] = None
    kill_after: float = 10.0
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Task:
    """One task of the cluster and, once started, its process."""

    job: str
    index: int
    runs_script: bool
    process: Optional[subprocess.Popen] = None

    @property
    def name(self) -> str:
        """"chief", "worker:1", "ps:0": its key in the checks' and the merge's dictionaries."""
        return "chief" if self.job == "chief" else f"{self.job}:{self.index}"

    @property
    def label(self) -> str:
        """"chief", "worker 1": how messages and line prefixes name it."""
        return "chief" if self.job == "chief" else f"{self.job} {self.index}"

    def file(self, folder: str, extension: str) -> str:
        """Its file in `folder` under --trace: "worker-1.json", "ps-0.log"."""
        return os.path.join(folder, self.label.replace(" ", "-") + extension)

    @property
    def status(self) -> Optional[int]:
        """Its exit status as a shell says it (128 + the signal's number after a signal); None while it runs."""
        code = None if self.process is None else self.process.poll()
        return None if code is None else (128 - code if code < 0 else code)

    def ended(self) -> str:
        """How it ended, for a message: "exited with status 3", "was killed by SIGKILL (status 137)"."""
        code = None if self.process is None else self.process.returncode
        return f"was killed by {_signal_name(-code)} (status {128 - code})" if code and code < 0 else \
            f"exited with status {code}"


def _signal_name(signum: int) -> str:
    return next((known.name for known in signal.Signals if known == signum), f"signal {signum}")


def plan(options: Options) -> list[Task]:
    """The tasks, in the order they start: chief, workers, ps tasks. With ps tasks there is always a chief,
    the coordinator, and it alone runs the script."""
    tasks = [Task("chief", 0, True)] if options.chief or options.ps else []
    tasks += [Task("worker", i, options.ps == 0) for i in range(options.workers)]
    return tasks + [Task("ps", i, False) for i in range(options.ps)]


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on 127.0.0.1 (bound together, then released)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


def settings_text(settings: Mapping[str, Any]) -> dict[str, str]:
    """Each setting as its option and its `TFPLACE_<NAME>` variable write it: `{"memory_growth": "true"}`."""
    return {name: str(value).lower() if isinstance(value, bool) else
            ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
            for name, value in settings.items()}


def _command(task: Task, script: str, args: Sequence[str], options: Options, folder: str) -> list[str]:
    if not task.runs_script:
        return [sys.executable, "-m", "tfplace.cli._server"]
    if not options.trace:
        return [sys.executable, script, *args]
    return [sys.executable, "-m", "tfplace", "trace",
            *(f"--{name}={value}" for name, value in settings_text(options.settings).items()),
            *(["--log_placement"] if _logs_for_servers(options) else []),
            *(["--timing"] if options.timing else []), *(["--memory"] if options.memory else []), "--quiet",
            *([f"--perfetto={task.file(folder, '.timeline.json')}"] if options.perfetto else []),
            f"--json={task.file(folder, '.json')}", script, "--", *args]


def _logs_for_servers(options: Options) -> bool:
    """Under --trace with ps tasks and no --log_placement given: the coordinator logs placement so that the
    servers log the functions it runs on them (their traces come from those lines); its own placement lines
    are then kept out of the output, as the servers' are."""
    return options.trace and options.ps > 0 and "log_placement" not in options.settings


def _environment(task: Task, cluster: dict[str, list[str]], options: Options, folder: str) -> dict[str, str]:
    env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task.job, "index": task.index}})}
    env.setdefault("PYTHONUNBUFFERED", "1")  # lines reach the launcher as they are printed
    env.update({f"TFPLACE_{name.upper()}": value for name, value in settings_text(options.settings).items()})
    if options.trace:
        env["TFPLACE_CLUSTER_DIR"] = folder
        if not task.runs_script:
            env["TFPLACE_LOG_PLACEMENT"] = "1"  # read by _server: its placer lines go to its log
    return env


def _task_start(launcher: int, libc: Any) -> None:
    """Runs in each task's process before it starts: its own process group (a terminal's Ctrl-C reaches it
    once, through the launcher); on Linux, the kernel SIGKILLs it when the launcher dies."""
    os.setpgid(0, 0)
    if libc is not None:
        libc.prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != launcher:  # the launcher died before prctl took effect
            os._exit(1)


class _Cluster:
    """The tasks' processes: start, watch, stop."""

    def __init__(self, tasks: list[Task], options: Options, folder: str, received: list[int]) -> None:
        self.tasks, self.options, self.folder, self.received = tasks, options, folder, received
        self.threads: list[threading.Thread] = []
        self.stopped: set[str] = set()  # the servers the launcher stopped: their end is no failure (status 0)

    def start(self, script: str, args: Sequence[str]) -> None:
        hosts = [f"127.0.0.1:{port}" for port in free_ports(len(self.tasks))]
        cluster: dict[str, list[str]] = {}
        for task, host in zip(self.tasks, hosts):
            cluster.setdefault(task.job, []).append(host)
        libc = _libc() if sys.platform.startswith("linux") else None
        launcher = os.getpid()
        for task in self.tasks:  # every process before any reader thread: no fork copies a held lock
            task.process = subprocess.Popen(
                _command(task, script, args, self.options, self.folder),
                env=_environment(task, cluster, self.options, self.folder), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=lambda: _task_start(launcher, libc))
        for task in self.tasks:
            assert task.process is not None and task.process.stdout and task.process.stderr
            hide = self.options.trace and (not task.runs_script or _logs_for_servers(self.options))
            log = open(task.file(self.folder, ".log"), "wb", buffering=0) if hide and not task.runs_script else None
            for pipe, stream, keep in ((task.process.stdout, sys.stdout, None), (task.process.stderr, sys.stderr, log)):
                thread = threading.Thread(target=forward, daemon=True, name=f"tfplace launch {task.label}",
                                          args=(pipe, f"[{task.label}] ".encode(), stream, keep, hide))
                thread.start()
                self.threads.append(thread)
        say("started " + ", ".join(f"{t.label} (pid {t.process.pid}, {host})" for t, host in zip(self.tasks, hosts)
                                    if t.process) + (f"; traces in {self.folder}" if self.options.trace else ""))

    def statuses(self) -> dict[str, Optional[int]]:
        return {task.name: task.status for task in self.tasks}

    def failures(self) -> list[tuple[Task, int]]:
        """The tasks that failed, each with the launcher's exit status for it (a server that ended: its
        status, 1 for 0)."""
        return [(task, task.status or 1) for task in self.tasks
                if task.status is not None and (task.status != 0 or not task.runs_script)]

    def stop(self, signum: int) -> None:
        """Sends `signum` to the running tasks' process groups, waits up to `kill_after` seconds (or until a
        further signal reaches the launcher), then SIGKILLs those still running."""
        signals_before = len(self.received)
        self.stopped |= {task.name for task in self.tasks if task.status is None and not task.runs_script}
        self._signal(signum)
        deadline = time.monotonic() + self.options.kill_after
        while any(task.status is None for task in self.tasks):
            again = len(self.received) > signals_before
            if again or time.monotonic() >= deadline:
                running = ", ".join(f"{t.label} (pid {t.process.pid})" for t in self.tasks
                                    if t.process is not None and t.status is None)
                when = "at a further signal" if again else f"--kill_after={self.options.kill_after:g} s"
                say(f"SIGKILL for {running}: still running {when} after {_signal_name(signum)}")
                self._signal(signal.SIGKILL)
                break
            time.sleep(0.05)
        for task in self.tasks:
            if task.process is not None:
                task.process.wait()

    def _signal(self, signum: int) -> None:
        for task in self.tasks:
            if task.process is not None and task.status is None:
                try:
                    os.killpg(task.process.pid, signum)  # the task and the processes it started
                except OSError:
                    task.process.send_signal(signum)

    def finish(self) -> None:
        """Waits briefly for the tasks' last lines (a process a task left behind may hold its pipes open)."""
        deadline = time.monotonic() + 2.0
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def _run(cluster: _Cluster) -> int:
    """Watches the tasks until the script's tasks end, one fails, the checks find a mismatch, time runs out
    or a signal comes; stops them all; returns the launcher's exit status."""
    options, received, signum = cluster.options, cluster.received, int(signal.SIGTERM)
    watch: Any = None
    if options.trace:
        try:
            from tfplace.cluster._checks import watch
        except ImportError:  # the checks are not there: the cluster runs unchecked
            pass
    jobs = {task.job: task.index + 1 for task in cluster.tasks}  # a device of no task of these is a mismatch
    deadline = None if options.timeout is None else time.monotonic() + options.timeout
    closing: dict[str, int] = {}  # tasks that died as they closed their traces, after their scripts ended
    while True:
        if received:
            signum = received[0] if received[0] == signal.SIGINT else int(signal.SIGTERM)
            say(f"received {_signal_name(received[0])}; stopping every task ({_signal_name(signum)}, then "
                 f"SIGKILL after --kill_after={options.kill_after:g} s)")
            status = 128 + received[0]
            break
        failed = [(task, status) for task, status in cluster.failures() if task.name not in closing]
        script = _script_statuses(cluster.folder) if failed and watch is not None else {}
        for task, status in failed:
            if task.runs_script and task.name in script:  # its work is done: the others' traces are still wanted
                closing[task.name] = status
                say(f"{task.label} {task.ended()} as it closed its trace, after its script ended (status "
                    f"{script[task.name]}); the other tasks go on")
        failed = [(task, status) for task, status in failed if task.name not in closing]
        if failed:
            task, status = failed[0]
            server = "" if task.runs_script else ", but a server runs until the script's tasks end"
            say(f"{task.label} {task.ended()}{server}; stopping the other tasks")
            break
        if all(task.status is not None for task in cluster.tasks if task.runs_script):
            status = next(iter(closing.values()), 0)
            break
        if watch is not None:
            try:
                mismatch = watch(cluster.folder, cluster.statuses(), jobs=jobs)
            except Exception as error:  # the checks' own failure must not take the cluster down
                say(f"the checks across tasks failed ({type(error).__name__}: {error}); going on without them")
                watch, mismatch = None, None
            if mismatch:
                say(mismatch.removeprefix("tfplace: "))
                status = 3
                break
        if deadline is not None and time.monotonic() >= deadline:
            say(f"tasks still running after --timeout={options.timeout:g} s; stopping every task")
            status = 124
            break
        time.sleep(0.2)
    cluster.stop(signum)
    if received:  # also when the signal came while the tasks were being stopped
        status = 128 + received[0]
    cluster.finish()
    if status != 0:
        say("tasks ended: " + ", ".join(f"{t.label} {t.ended()}" for t in cluster.tasks))
    return status


def _script_statuses(folder: str) -> dict[str, int]:
    """The tasks whose scripts ended, with their statuses, as they published them under --trace."""
    from tfplace.cluster._checks import script_statuses

    return script_statuses(folder)


def _report(cluster: _Cluster) -> bool:
    """Under --trace, once the tasks ended: each server's trace from its log, then the merged report and
    `--json`; or the list of the tasks' trace files where they cannot be merged (then False: they are kept)."""
    statuses = {name: 0 if name in cluster.stopped else status for name, status in cluster.statuses().items()}
    for task in (task for task in cluster.tasks if not task.runs_script):
        try:
            write_trace(task.file(cluster.folder, ".log"), task.file(cluster.folder, ".json"), statuses[task.name] or 0)
        except Exception as error:  # one task's trace must not lose the others'
            say(f"no trace for {task.label}: {type(error).__name__}: {error}")
    paths = {t.name: path for t in cluster.tasks if os.path.isfile(path := t.file(cluster.folder, ".json"))}
    listing = "\n".join(f"  {name}: {path}" for name, path in paths.items()) or "  (none)"
    try:
        from tfplace.cluster._merge import merge_files
        from tfplace.cluster._report import render
        merged = merge_files(paths, statuses, _script_statuses(cluster.folder))
        for entry in merged["tasks"]:
            entry.pop("file", None)  # the tasks' files are temporary: removed once merged
        text = render(merged, top=cluster.options.top)
    except Exception as error:  # not there yet, or a trace that cannot be merged: the files are there
        say(f"the traces were not merged ({type(error).__name__}: {error}); the tasks' traces are kept:\n{listing}")
        return False
    emit(sys.stdout, (text.rstrip("\n") + "\n").encode("utf-8", "backslashreplace"))
    if cluster.options.json:
        from tfplace._files import write_json  # whole or not at all

        write_json(cluster.options.json, merged)
        say(f"wrote the merged traces of {len(paths)} task(s) to {cluster.options.json}")
    if cluster.options.perfetto:
        from tfplace.placement.shown._perfetto import merge_tasks, write

        timelines = {t.label: path for t in cluster.tasks
                     if os.path.isfile(path := t.file(cluster.folder, ".timeline.json"))}
        write(cluster.options.perfetto, merge_tasks(timelines))
        say(f"wrote the timelines of {len(timelines)} task(s) to {cluster.options.perfetto} (open it in "
             "ui.perfetto.dev or chrome://tracing)")
    return True


def launch(script: str, args: Sequence[str], options: Options) -> int:
    """Starts the cluster `options` describes, `script` with `args` on the tasks that run the script, watches
    it and stops it; returns the launcher's exit status (see the module's documentation). SIGINT, SIGTERM
    and SIGHUP are the launcher's while it runs (called from the main thread); their handlers come back after."""
    received: list[int] = []
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[signum] = signal.signal(signum, lambda number, frame: received.append(number))
    options = dataclasses.replace(options, json=os.path.abspath(options.json) if options.json else None,
                                  perfetto=os.path.abspath(options.perfetto) if options.perfetto else None)
    folder = tempfile.mkdtemp(prefix="tfplace-launch-") if options.trace else ""
    cluster = _Cluster(plan(options), options, folder, received)
    try:
        cluster.start(os.path.abspath(script), args)
        status = _run(cluster)
        if options.trace and _report(cluster):
            shutil.rmtree(folder, ignore_errors=True)
        return status
    finally:
        cluster.stop(signal.SIGKILL)  # nothing is left running, whatever happened above
        for number, handler in previous.items():
            signal.signal(number, handler)


def _libc() -> object:
    from tfplace._tensorflow._cluster import libc

    return libc()
