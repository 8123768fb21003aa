"""d2l's "Concise Implementation for Multiple GPUs", in TensorFlow, on tfplace.

Trains d2l's ResNet-18 variant under `tfplace.strategy()` on `--num_devices`
GPUs, or as many logical CPUs where there is no GPU, and prints d2l's summary:
`test acc: 0.NN, N.N sec/epoch on [devices]`.

    python examples/multi_gpu_training.py --num_devices=2 --width=0.125 --dataset=synthetic --epochs=3
"""

from __future__ import annotations

import statistics

from absl import app, flags

import resnet_training as rt
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
_PLOT = flags.DEFINE_string("plot", None, "Write a PNG of test accuracy per epoch here (needs matplotlib).")


def main(argv: list[str]) -> None:
    del argv
    gpus = tfplace.num_gpus()
    if gpus:
        tfplace.configure()
    else:  # logical CPUs stand in for GPUs; --logical_cpus, when given, wins
        tfplace.configure(logical_cpus=flags.FLAGS.logical_cpus or _NUM_DEVICES.value)
    kind = "GPU" if gpus else "CPU"
    devices = [f"{kind}:{i}" for i in range(_NUM_DEVICES.value)]
    if _BATCH.value % len(devices):
        raise app.UsageError(f"--batch_size={_BATCH.value} must be a multiple of --num_devices={len(devices)}")
    try:
        data = rt.load_data(_DATASET.value, train_size=_TRAIN_SIZE.value)
    except RuntimeError as err:
        raise app.UsageError(str(err)) from None
    strategy = tfplace.strategy(devices)
    with strategy.scope():
        model = rt.resnet18(rt.NUM_CLASSES, width=_WIDTH.value)
        optimizer = rt.sgd(_LR.value)
    history = rt.train(strategy, model, optimizer, data, epochs=_EPOCHS.value, global_batch=_BATCH.value)
    per_epoch = statistics.median(history["seconds"][1:] or history["seconds"])
    names = [str(tfplace.parse_device(d)) for d in strategy.extended.worker_devices]
    print(f"test acc: {history['test_acc'][-1]:.2f}, {per_epoch:.1f} sec/epoch on {names}")
    if _PLOT.value:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        plt.plot(range(1, len(history["test_acc"]) + 1), history["test_acc"], marker="o")
        plt.xlabel("epoch")
        plt.ylabel("test accuracy")
        plt.title(f"ResNet-18 (width {_WIDTH.value}) on {len(names)} device(s)")
        plt.savefig(_PLOT.value, dpi=100)


if __name__ == "__main__":
    app.run(main)
