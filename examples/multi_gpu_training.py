"""d2l's "Concise Implementation for Multiple GPUs", in TensorFlow, on tfplace.

Trains d2l's ResNet-18 variant under `tfplace.strategy()` on `--num_devices`
GPUs, or as many logical CPUs where there is no GPU, and prints d2l's summary:
`test acc: 0.NN, N.N sec/epoch on [devices]`, then the first epoch's steps as
`tfplace.capture_placement(timing=True)` measured them (the first step, which traces, apart): time per step, each
replica's busy time per step, the phases, and the advice that holds.

    python examples/multi_gpu_training.py --num_devices=2 --width=0.125 --dataset=synthetic --epochs=3

Flags are checked before training, each failure one line on stderr: more
--num_devices than devices (exit status 2), a --batch_size that is not a
multiple of --num_devices (2), a --plot file that cannot be written or
matplotlib missing (2), Fashion-MNIST that cannot be downloaded (1).
Under --device_policy=explicit the batches stay on the host until the step
function copies them (see resnet_training.distribute).
"""

from __future__ import annotations

import contextlib
import importlib.util
import statistics

from absl import app, flags

import resnet_training as rt
from example_checks import FAILURE, fail, output_file
import tfplace
import tfplace.flags

flags.adopt_module_key_flags(tfplace.flags)  # --help lists the tfplace flags
_NUM_DEVICES = flags.DEFINE_integer("num_devices", 2, "GPUs to train on (logical CPUs without GPUs).", lower_bound=1)
_WIDTH = flags.DEFINE_float("width", 1.0, "Channel multiplier (0.125 gives 8-16-32-64 channels for CPU runs).",
                            lower_bound=0.01)
_BATCH = flags.DEFINE_integer("batch_size", 256, "Global batch size (split over the devices).", lower_bound=1)
_LR = flags.DEFINE_float("lr", 0.1, "SGD learning rate.", lower_bound=0.0)
_EPOCHS = flags.DEFINE_integer("epochs", 10, "Epochs.", lower_bound=1)
_DATASET = flags.DEFINE_enum("dataset", "fashion_mnist", ["fashion_mnist", "synthetic"], "Data set.")
_TRAIN_SIZE = flags.DEFINE_integer("train_size", 6000, "Training examples used.", lower_bound=1)
_PLOT = flags.DEFINE_string("plot", None,
                            "Write a PNG of test accuracy per epoch here (needs matplotlib; checked before training).")


def main(argv: list[str]) -> None:
    del argv
    count = _NUM_DEVICES.value
    if _BATCH.value % count:
        fail(f"--batch_size={_BATCH.value} (flag) is not a multiple of --num_devices={count}: allowed are "
             f"multiples of {count}, so that each device gets an equal share of every batch")
    if _PLOT.value:
        output_file("plot", _PLOT.value)
        if importlib.util.find_spec("matplotlib") is None:
            fail(f"--plot={_PLOT.value} (flag) needs matplotlib, which is not installed: "
                 "pip install -e '.[plot]', or leave --plot out")
    gpus = tfplace.num_gpus()
    if gpus:
        config = tfplace.configure()
    else:  # logical CPUs stand in for GPUs; --logical_cpus, when given, wins
        config = tfplace.configure(logical_cpus=flags.FLAGS.logical_cpus or count)
    kind = "GPU" if gpus else "CPU"
    existing = [name for name in config.logical_devices if tfplace.parse_device(name).device_type == kind]
    if len(existing) < count:
        made = (f"this machine has no GPU and --logical_cpus={flags.FLAGS.logical_cpus} (flag) made "
                f"{len(existing)} logical CPU(s)" if kind == "CPU" else f"this process sees {len(existing)} GPU(s)")
        change = ("lower --num_devices, or raise --logical_cpus (without it, --num_devices logical CPUs are made)"
                  if kind == "CPU" else "lower --num_devices")
        fail(f"--num_devices={count} (flag) asks for {count} {kind} devices, but {made}: "
             f"{', '.join(existing)}; allowed is --num_devices from 1 to {len(existing)}: {change}")
    devices = [f"{kind}:{i}" for i in range(count)]
    try:
        data = rt.load_data(_DATASET.value, train_size=_TRAIN_SIZE.value)
    except RuntimeError as err:
        fail(str(err), FAILURE)
    strategy = tfplace.strategy(devices)
    with strategy.scope():
        model = rt.resnet18(rt.NUM_CLASSES, width=_WIDTH.value)
        optimizer = rt.sgd(_LR.value)
    logs: list = []

    @contextlib.contextmanager
    def measured(epoch: int):  # the first epoch, which places the step function (its tracing is warm-up)
        if epoch:
            yield
            return
        with tfplace.capture_placement(timing=True, sources=True) as log:
            yield
        logs.append(log)

    history = rt.train(strategy, model, optimizer, data, epochs=_EPOCHS.value, global_batch=_BATCH.value,
                       around=measured)
    seconds = history["seconds"]
    per_epoch = statistics.median(seconds[1:] or seconds)  # after the first: neither warm-up nor measured
    names = [str(tfplace.parse_device(d)) for d in strategy.extended.worker_devices]
    print(f"test acc: {history['test_acc'][-1]:.2f}, {per_epoch:.1f} sec/epoch on {names}")
    if logs:
        _print_steps(logs[0], 1)
    if _PLOT.value:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        plt.plot(range(1, len(history["test_acc"]) + 1), history["test_acc"], marker="o")
        plt.xlabel("epoch")
        plt.ylabel("test accuracy")
        plt.title(f"ResNet-18 (width {_WIDTH.value}) on {len(names)} device(s)")
        plt.savefig(_PLOT.value, dpi=100)


def _print_steps(log, epoch: int) -> None:
    """Epoch `epoch`'s steps as tfplace measured them: time per step, each replica's busy time per step, where
    the rest went, and the advice that holds."""
    steps = log.steps()
    if not steps.count or steps.median_us is None:
        print(f"steps (epoch {epoch}): {steps.reason}")
        return
    replicas = ", ".join(f"{device.rpartition('device:')[2]} {busy / steps.count / 1000:.1f} ms"
                         for device, (busy, _) in steps.per_device.items())
    rest = ", ".join(f"{phase} {share:.0%}" for phase, share in (steps.shares or {}).items())  # every phase, in order
    print(f"steps (epoch {epoch}): {steps.count} x {steps.median_us / 1000:.1f} ms median; busy per step per "
          f"replica: {replicas}; {rest}")
    found = log.advice()
    for advice in found:
        print(f"advice: [{advice.severity}] {advice.rule} at {advice.source}: {advice.message}")
    if not found:
        print("advice: none (no rule holds for these steps)")


if __name__ == "__main__":
    app.run(main)
