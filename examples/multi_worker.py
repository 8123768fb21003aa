"""The ResNet training of multi_gpu_training.py on several worker processes.

Each worker reads its place in the cluster from `TF_CONFIG` and trains with
`MultiWorkerMirroredStrategy` (chosen by `tfplace.strategy()`) through a custom
loop (`strategy.run`, `experimental_distribute_dataset`): Keras 3's `fit` fails
under this strategy.

    # two workers on this machine, started and watched for you:
    python examples/multi_worker.py --launch_local=2 --width=0.0625 --epochs=2
    # one worker of a real cluster (run once per machine, with its own index):
    TF_CONFIG='{"cluster": {"worker": ["host1:12345", "host2:12345"]}, "task": {"type": "worker", "index": 0}}' \\
        python examples/multi_worker.py --epochs=10

Launcher (--launch_local=N): this process becomes `tfplace launch --workers=N`
(the same as `tfplace launch --workers=2 examples/multi_worker.py -- --epochs=2`),
which prints each worker's lines prefixed with `[worker I] `. As soon as one
worker fails it stops the others (they would wait for it forever inside their
collective ops) and exits with that worker's status, after a line naming it;
after --timeout seconds it stops them and exits with 124. Given SIGTERM, SIGINT
(Ctrl-C) or SIGHUP, it passes SIGTERM (or the SIGINT) on to its workers, waits up
to --kill_after seconds for them, SIGKILLs those still running and exits with
status 128 + the signal's number (143 for SIGTERM, 130 for SIGINT). On Linux, a
worker is also killed when its launcher dies without a chance to stop it.

Worker: `TF_CONFIG` is checked before TensorFlow starts: text that is not such
JSON, an address that is not host:port or a port outside 1..65535 ends the
worker at once with one line naming the entry (exit status 2). Then the
worker waits until every peer of the cluster answers on its host:port; one
that has not within --connect_timeout seconds (default 30) ends the worker
with one line naming it (exit status 1). If the cluster has not formed
--connect_timeout seconds after every peer answered, a watchdog process prints
one line and SIGKILLs the worker. Without these checks, TensorFlow waits for an
absent peer with no useful bound (over 13 minutes were seen), ignoring SIGTERM.
Once the cluster has formed, SIGTERM stops a worker again (TensorFlow's
coordination service turns it into a preemption notice, unused here).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple, NoReturn

from absl import app, flags

from example_checks import FAILURE, fail, output_folder

_LAUNCH = flags.DEFINE_integer("launch_local", 0, "Start this many workers on 127.0.0.1 and wait for them "
                               "(tfplace launch --workers=N).", lower_bound=0)
_TIMEOUT = flags.DEFINE_float("timeout", 600.0, "Launcher: seconds before stopping the workers (exit status 124).",
                              lower_bound=1)
_KILL_AFTER = flags.DEFINE_float(
    "kill_after", 10.0, "Launcher: when it stops its workers (one failed, --timeout, or it got a signal), "
    "seconds between passing them SIGTERM (or the SIGINT it got) and SIGKILL for those still running.",
    lower_bound=0)
_CONNECT_TIMEOUT = flags.DEFINE_float(
    "connect_timeout", 30.0, "Worker: seconds to wait for every peer of TF_CONFIG to answer on its host:port, "
    "then for the cluster to form, before failing with a line naming the peer.", lower_bound=1)
_REPORT_DIR = flags.DEFINE_string("report_dir", None, "Each worker writes worker-<index>.json (losses, weights) "
                                  "here; an existing, writable folder (checked before anything starts).")
_WIDTH = flags.DEFINE_float("width", 0.0625, "Channel multiplier of the ResNet-18.", lower_bound=0.01)
_BATCH = flags.DEFINE_integer("batch_size", 64, "Global batch size over all workers.", lower_bound=1)
_LR = flags.DEFINE_float("lr", 0.05, "SGD learning rate.", lower_bound=0.0)
_EPOCHS = flags.DEFINE_integer("epochs", 2, "Epochs.", lower_bound=1)
_TRAIN_SIZE = flags.DEFINE_integer("train_size", 512, "Training examples (synthetic set).", lower_bound=1)
_FAIL = flags.DEFINE_integer("simulate_failure", -1, "Worker index that exits with status 3 at start "
                             "(to see the launcher stop the others).")

TF_CONFIG_FORM = ('JSON like {"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": 0}}, '
                  "each port in 1..65535")


def launch(count: int, script: str, argv: list[str]) -> NoReturn:
    """Becomes `tfplace launch --workers=count` running `script` with `argv` (less --launch_local) on each worker."""
    passed: list[str] = []
    rest = iter(argv)
    for arg in rest:
        if arg in ("--launch_local", "-launch_local"):
            next(rest, None)  # its value
        elif not re.match(r"--?launch_local=", arg):
            passed.append(arg)
    command = [sys.executable, "-m", "tfplace", "launch", f"--workers={count}", f"--timeout={_TIMEOUT.value:g}",
               f"--kill_after={_KILL_AFTER.value:g}", script, "--", *passed]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)  # the same process: its pid, its signals, its exit status


# --- a worker -----------------------------------------------------------------------------------

def parse_address(address: object) -> tuple[str, int]:
    """(host, port) of a TF_CONFIG address "host:port" ("[v6 address]:port" for IPv6).

    Raises:
      ValueError: not that form, or a port outside 1..65535; the message says which.
    """
    if not isinstance(address, str):
        raise ValueError(f"is {address!r}, not a \"host:port\" string")
    host, colon, port = address.rpartition(":")
    if not colon or not host:
        raise ValueError(f"is {address!r}, not \"host:port\"")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"is {address!r}: an IPv6 host is written in brackets, \"[::1]:port\"")
    if not host or re.search(r"[\s/\[\]]", host):
        raise ValueError(f"is {address!r}: the host {host!r} is not a host name or address")
    if not re.fullmatch(r"[0-9]+", port):
        raise ValueError(f"is {address!r}: the port {port!r} is not a number")
    if not 1 <= int(port) <= 65535:
        raise ValueError(f"is {address!r}: the port {int(port)} is outside 1..65535")
    return host, int(port)


class Cluster(NamedTuple):
    """A checked TF_CONFIG: this task and the address of every task, by entry (`cluster["worker"][1]`)."""

    own: str
    task_index: int
    addresses: dict[str, tuple[str, int]]


def read_tf_config() -> Cluster | None:
    """TF_CONFIG, checked before TensorFlow starts; None when unset.

    Anything but a cluster spec whose addresses are all "host:port", with ports
    in 1..65535, ends the program with one line naming what is wrong.
    """
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return None

    def bad(reason: str) -> NoReturn:
        fail(f"TF_CONFIG={raw!r} (from environment variable TF_CONFIG) is not a cluster spec: {reason}; "
             f"allowed is {TF_CONFIG_FORM}")

    try:
        config = json.loads(raw)
    except ValueError as err:
        bad(f"it is not JSON ({err})")
    if not isinstance(config, dict):
        bad(f"it is a JSON {type(config).__name__}, not an object")
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not cluster or not all(isinstance(v, list) and v for v in cluster.values()):
        bad(f'"cluster" is {json.dumps(cluster)}, not a map of job names to lists of "host:port"')
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        bad(f'"task" is {json.dumps(task)}, not {{"type": ..., "index": ...}}')
    kind, index = task["type"], task["index"]
    if not isinstance(kind, str) or kind not in cluster:
        bad(f"the task type {kind!r} is not a job of the cluster ({', '.join(map(repr, cluster))})")
    jobs = cluster[kind]
    if isinstance(index, str) and re.fullmatch(r"[0-9]+", index):
        index = int(index)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(jobs):
        bad(f"the task index {task['index']!r} is not an index of cluster[{json.dumps(kind)}] (0..{len(jobs) - 1})")
    addresses: dict[str, tuple[str, int]] = {}
    for job, entries in cluster.items():
        for i, address in enumerate(entries):
            entry = f"cluster[{json.dumps(job)}][{i}]"
            try:
                addresses[entry] = parse_address(address)
            except ValueError as err:
                bad(f"{entry} {err}")
            same = [e for e, a in addresses.items() if a == addresses[entry] and e != entry]
            if same:
                bad(f"{entry} is {address!r}, the address of {same[0]} too")
    return Cluster(f"cluster[{json.dumps(kind)}][{index}]", index, addresses)


def hold_port(entry: str, host: str, port: int) -> socket.socket:
    """Listens on this worker's own port while it waits for its peers, so that they see it answer.

    Closed just before TensorFlow's server takes the port.
    """
    try:
        if socket.has_dualstack_ipv6():
            return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
        return socket.create_server(("", port))
    except OSError as err:
        fail(f"this worker is TF_CONFIG's {entry}={host}:{port} (from environment variable TF_CONFIG), but port "
             f"{port} cannot be opened here ({err}): allowed is a port that no other program on this machine uses",
             FAILURE)


def wait_for_peers(peers: dict[str, tuple[str, int]], timeout: float) -> None:
    """Waits until every peer accepts a TCP connection; ends the program naming those that did not in time."""
    deadline = time.monotonic() + timeout
    waiting, errors = dict(peers), {}
    while waiting:
        for entry, (host, port) in list(waiting.items()):
            try:
                with socket.create_connection((host, port), timeout=min(2.0, max(0.1, deadline - time.monotonic()))):
                    del waiting[entry]
            except OSError as err:  # refused, unreachable, unknown host name, time-out
                errors[entry] = f"{type(err).__name__}: {err}"
        if waiting and time.monotonic() >= deadline:
            missing = "; ".join(f"{entry}={host}:{port} ({errors[entry]})" for entry, (host, port) in waiting.items())
            fail(f"no answer within --connect_timeout={timeout:g} s from the peer(s) {missing}, named by environment "
                 "variable TF_CONFIG: allowed are peers that run this script with the same cluster; start them, "
                 "correct their host:port in TF_CONFIG, or raise --connect_timeout", FAILURE)
        if waiting:
            time.sleep(0.25)


# Waits, in a process of its own, for the worker to close its stdin (the cluster formed, or the
# worker ended); after the time-out it prints its line and SIGKILLs the worker. A thread could not:
# TensorFlow holds Python's lock while it waits for the cluster, and turns SIGTERM into a notice.
WATCHDOG = """
import os, select, signal, sys
pid, timeout, line = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
if not select.select([sys.stdin], [], [], timeout)[0]:
    print(line, file=sys.stderr, flush=True)
    os.kill(pid, signal.SIGKILL)
"""


def form_cluster(peers: dict[str, tuple[str, int]], timeout: float):
    """`tfplace.strategy()`; the worker is killed, with one line, if the cluster has not formed within `timeout`."""
    import tfplace

    names = ", ".join(f"{entry}={host}:{port}" for entry, (host, port) in peers.items())
    line = (f"{Path(sys.argv[0]).name}: error: the cluster of environment variable TF_CONFIG did not form within "
            f"--connect_timeout={timeout:g} s after its peers answered ({names}): allowed are peers that run this "
            "script with the same TF_CONFIG cluster and stay up; check them, or raise --connect_timeout "
            "(this worker is stopped with SIGKILL)")
    watchdog = subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid()), str(timeout), line],
                                stdin=subprocess.PIPE) if peers else None
    try:
        return tfplace.strategy()  # MultiWorkerMirroredStrategy when TF_CONFIG names a cluster
    except tfplace.ConfigurationError as err:
        fail(str(err))
    finally:
        if watchdog is not None:
            watchdog.communicate()  # closes its stdin: it ends without a word


def work() -> None:
    """One worker: check TF_CONFIG and the peers, train under the strategy TF_CONFIG implies, then report."""
    cluster = read_tf_config() or Cluster("", 0, {})
    own, index, addresses = cluster
    if index == _FAIL.value:
        print(f"worker {index}: simulated failure", flush=True)
        sys.exit(3)
    peers = {entry: address for entry, address in addresses.items() if entry != own}
    held = hold_port(own, *addresses[own]) if peers else None
    wait_for_peers(peers, _CONNECT_TIMEOUT.value)

    import numpy as np
    import tensorflow as tf

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import resnet_training as rt

    if held is not None:
        held.close()  # TensorFlow's server takes the port now
    strategy = form_cluster(peers, _CONNECT_TIMEOUT.value)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # TensorFlow made SIGTERM a preemption notice; stop on it again
    # tf.distribute.MultiWorkerMirroredStrategy's class is named CollectiveAllReduceStrategy.
    kind = ("MultiWorkerMirroredStrategy" if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            else type(strategy).__name__)
    print(f"worker {index}: {kind}, {strategy.num_replicas_in_sync} replicas in sync", flush=True)
    data = rt.load_data("synthetic", train_size=_TRAIN_SIZE.value, test_size=256)
    with strategy.scope():
        import keras

        keras.utils.set_random_seed(0)
        model, optimizer = rt.resnet18(rt.NUM_CLASSES, width=_WIDTH.value), rt.sgd(_LR.value)
    history = rt.train(strategy, model, optimizer, data, epochs=_EPOCHS.value, global_batch=_BATCH.value,
                       log=lambda line: print(f"worker {index}: {line}", flush=True))
    values = [np.asarray(v.numpy()) for v in model.trainable_variables]
    digest = hashlib.sha256(b"".join(v.tobytes() for v in values)).hexdigest()
    print(f"worker {index}: done, loss {history['loss'][0]:.4f} -> {history['loss'][-1]:.4f}, weights {digest[:12]}")
    if _REPORT_DIR.value:
        Path(_REPORT_DIR.value, f"worker-{index}.json").write_text(json.dumps(
            {"index": index, "loss": history["loss"], "weights_sha256": digest,
             "strategy": kind, "replicas": strategy.num_replicas_in_sync}))


def main(argv: list[str]) -> None:
    if _REPORT_DIR.value:
        output_folder("report_dir", _REPORT_DIR.value)
    if _LAUNCH.value:
        launch(_LAUNCH.value, argv[0], sys.argv[1:])
    work()


if __name__ == "__main__":
    app.run(main)
