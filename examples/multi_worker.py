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

The launcher exits non-zero as soon as one worker fails (the others would
wait for it forever inside their collective ops), or after --timeout seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from absl import app, flags

import tfplace

_LAUNCH = flags.DEFINE_integer("launch_local", 0, "Start this many workers on 127.0.0.1 and wait for them.",
                               lower_bound=0)
_TIMEOUT = flags.DEFINE_float("timeout", 600.0, "Launcher: seconds before giving up on the workers.", lower_bound=1)
_REPORT_DIR = flags.DEFINE_string("report_dir", None, "Each worker writes worker-<index>.json (losses, weights) here.")
_WIDTH = flags.DEFINE_float("width", 0.0625, "Channel multiplier of the ResNet-18.", lower_bound=0.01)
_BATCH = flags.DEFINE_integer("batch_size", 64, "Global batch size over all workers.", lower_bound=1)
_LR = flags.DEFINE_float("lr", 0.05, "SGD learning rate.", lower_bound=0.0)
_EPOCHS = flags.DEFINE_integer("epochs", 2, "Epochs.", lower_bound=1)
_TRAIN_SIZE = flags.DEFINE_integer("train_size", 512, "Training examples (synthetic set).", lower_bound=1)
_FAIL = flags.DEFINE_integer("simulate_failure", -1, "Worker index that exits with status 3 at start "
                             "(to see the launcher stop the others).")


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on 127.0.0.1."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def launch(count: int, script: str, argv: list[str]) -> int:
    """Starts `count` workers running `script` with `argv` and their TF_CONFIG; returns 0 when all succeed."""
    hosts = [f"127.0.0.1:{port}" for port in free_ports(count)]
    logs = Path(tempfile.mkdtemp(prefix="tfplace-workers-"))
    passed = [a for a in argv if not a.startswith("--launch_local")]
    workers = []
    for index in range(count):
        env = {**os.environ, "TF_CONFIG": json.dumps(
            {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}})}
        out = open(logs / f"worker-{index}.log", "w")
        workers.append((subprocess.Popen([sys.executable, script, *passed], env=env, stdout=out,
                                         stderr=subprocess.STDOUT), out))
    print(f"launched {count} workers on {', '.join(hosts)}; logs in {logs}", flush=True)
    deadline = time.monotonic() + _TIMEOUT.value
    status = 0
    while True:
        codes = [proc.poll() for proc, _ in workers]
        failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            index, code = failed[0]
            print(f"worker {index} exited with status {code}; stopping the others", flush=True)
            status = 1
            break
        if all(c == 0 for c in codes):
            break
        if time.monotonic() > deadline:
            print(f"workers still running after --timeout={_TIMEOUT.value:g} s; stopping them", flush=True)
            status = 1
            break
        time.sleep(0.2)
    for proc, out in workers:
        if proc.poll() is None:
            proc.terminate()
    for proc, out in workers:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()
    for index in range(count):
        tail = (logs / f"worker-{index}.log").read_text(errors="replace").splitlines()[-3:]
        print(f"--- worker {index} (exit {workers[index][0].returncode}):", *tail, sep="\n  ")
    return status


def work() -> None:
    """One worker: train under the strategy TF_CONFIG implies, then report."""
    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import resnet_training as rt

    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    index = config.get("task", {}).get("index", 0)
    if index == _FAIL.value:
        print(f"worker {index}: simulated failure", flush=True)
        sys.exit(3)
    import tensorflow as tf

    strategy = tfplace.strategy()  # MultiWorkerMirroredStrategy when TF_CONFIG names a cluster
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
    if _LAUNCH.value:
        sys.exit(launch(_LAUNCH.value, argv[0], sys.argv[1:]))
    try:
        work()
    except tfplace.ConfigurationError as err:
        raise app.UsageError(str(err)) from None


if __name__ == "__main__":
    app.run(main)
