"""`tfplace.cluster_guard()`: the checks of `tfplace.cluster._checks` inside a task started any way.

Each task publishes its state (`_checks.Publisher`) into the cluster's coordination-service key-value
store and reads its peers'; before a function first joins its collective groups it waits briefly for
every peer's groups and compares, and a thread compares again every `period` seconds. On a mismatch
the task prints the one line and exits with status 3. A task that leaves the guard waits until each
peer has read its exit (or left too): the task that hosts the coordination service takes the store
with it, and a peer left waiting in a collective must learn why before it goes.

Example:
    >>> import tfplace
    >>> with tfplace.cluster_guard():   # outside a cluster it does nothing
    ...     pass
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time
from typing import Any, Callable, Iterator

from tfplace.cluster import _checks
from tfplace.cluster._checks import MISMATCH_STATUS, Publisher, mismatch

__all__ = ["cluster_guard"]

_STORE_KEY = "tfplace/check/"
_SEEN_KEY = "tfplace/seen/"  # + "<task that left>/<peer that read it>"


def _store_writer(task: str) -> Callable[[str], None]:
    from tfplace import _tensorflow

    return lambda text: _tensorflow.store_set(_STORE_KEY + task, text)


class _Peers:
    """The peers' states as this task last read them from the cluster's key-value store."""

    def __init__(self, publisher: Publisher, peers: list[str], jobs: dict[str, int]) -> None:
        self.publisher, self.peers, self.jobs = publisher, peers, jobs
        self.last: dict[str, dict[str, Any]] = {}
        self.seen: set[str] = set()  # the peers whose exit this task read (and said so in the store)

    def check(self) -> None:
        """Reads the peers' states (saying in the store which exits it read); on a mismatch prints its line
        and ends the task with status 3."""
        from tfplace import _tensorflow

        for peer in self.peers:
            text = _tensorflow.store_get(_STORE_KEY + peer)
            if text is not None:
                self.last[peer] = json.loads(text)
                if self.last[peer].get("exit") is not None and peer not in self.seen:
                    self.seen.add(peer)
                    _tensorflow.store_set(f"{_SEEN_KEY}{peer}/{self.publisher.task}", "1")
        states = {self.publisher.task: self.publisher.state, **self.last}
        found = mismatch(states, {task: state.get("exit") for task, state in states.items()}, self.jobs)
        if found is not None:
            print(found, file=sys.__stderr__, flush=True)
            os._exit(MISMATCH_STATUS)

    def before_first_call(self, groups: list, wait: float = 5.0) -> None:
        """Before a function first joins its groups: waits (up to `wait` s) for every peer to publish
        them too, and compares, so that a mismatch is named before TensorFlow fails or hangs on it."""
        keys = {g["group_key"] for g in groups if g["group_key"] is not None}
        deadline = time.monotonic() + wait
        while True:
            self.check()
            joined = [p for p in self.peers
                      if keys <= {g["group_key"] for g in self.last.get(p, {}).get("groups", ())}]
            if len(joined) == len(self.peers) or time.monotonic() > deadline:
                return
            time.sleep(0.05)

    def leave(self, status: int, wait: float) -> None:
        """Publishes this task's exit `status`, then waits (up to `wait` s) until every peer has read it or
        published its own exit (a peer whose exit this task read already may have taken the store with it)."""
        from tfplace import _tensorflow

        self.publisher.exited(status)
        pending = [p for p in self.peers if p not in self.seen]
        deadline = time.monotonic() + wait
        while pending and time.monotonic() < deadline:
            pending = [p for p in pending if _tensorflow.store_get(f"{_SEEN_KEY}{self.publisher.task}/{p}") is None
                       and json.loads(_tensorflow.store_get(_STORE_KEY + p) or "{}").get("exit") is None]
            if pending:
                time.sleep(0.05)


def _guard_thread(peers: _Peers, period: float, stop: threading.Event) -> None:
    """Polls the peers' states (`_Peers.check`) until `stop` is set."""
    while not stop.wait(period):
        peers.check()


@contextlib.contextmanager
def cluster_guard(*, period: float = 0.5) -> Iterator[None]:
    """Checks this task against its peers while the block runs, as `tfplace launch --trace` does: a
    collective group that differs between tasks, uneven calls of a group, a device no task has. On a
    mismatch the task prints one line naming both tasks, what differs and the user's line, and exits
    with status 3 (instead of TensorFlow's hang or late "crashed" error). Tasks exchange their state
    through the cluster's coordination service (every task must enter the guard); under `tfplace
    launch --trace` the launcher checks and the guard only publishes.

    >>> import tfplace
    >>> with tfplace.cluster_guard():   # in a task of a MultiWorkerMirroredStrategy cluster
    ...     pass

    Outside a cluster (no `TF_CONFIG` task, no cluster joined) it does nothing.
    """
    from tfplace._devices import local_task
    from tfplace.cluster._names import task_name

    directory = os.environ.get(_checks.DIRECTORY)
    if directory:
        with _checks.publishing(directory):
            yield
        return
    prefix = local_task()
    if not prefix:
        yield
        return
    task = task_name(prefix)
    jobs = _checks.cluster_jobs()
    peers = [name for job, count in jobs.items() for i in range(count)
             for name in [("chief" if job == "chief" else f"{job}:{i}")] if name != task and job != "ps"]
    publisher = Publisher(task, prefix, _store_writer(task))
    watching = _Peers(publisher, peers, jobs)
    publisher.first_call = watching.before_first_call
    stop = threading.Event()
    thread = threading.Thread(target=_guard_thread, args=(watching, period, stop), name="tfplace-cluster-guard",
                              daemon=True)
    wait = max(2.0, 4 * period)  # a peer blocked in a collective reads within `period`
    _checks.install(publisher)
    publisher.publish()
    atexit.register(watching.leave, 0, wait)  # the process ends inside the block (os._exit excepted)
    thread.start()
    status = 1
    try:
        yield
        status = 0
    except SystemExit as exiting:
        status = exiting.code if isinstance(exiting.code, int) else int(exiting.code is not None)
        raise
    finally:
        stop.set()
        _checks.uninstall(publisher)
        publisher.stop()
        atexit.unregister(watching.leave)
        watching.leave(status, wait)
