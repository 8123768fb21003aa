"""TensorFlow's "Use a GPU" guide, section by section, with placement captured as data.

Each section prints the guide's placement lines in the guide's own format
(`Executing op MatMul in device /job:localhost/replica:0/task:0/device:GPU:0`)
from the records of `tfplace.capture_placement()`, then the value. Without a
GPU, `--logical_cpus=N` gives N logical CPUs that stand in for GPUs (CPU:i for
GPU:i), and the output has the same shape. Constants made from Python values
(the guide's `_EagerConst` lines) are created by TensorFlow's C layer, which
has no Python hook: `--log_placement` shows TensorFlow's own lines, those
included, on stderr.

    python examples/gpu_guide.py --section=log_placement
    python examples/gpu_guide.py --logical_cpus=2 --section=log_placement --log_placement
    python examples/gpu_guide.py --logical_cpus=4 --section=manual_replication

Every section also runs under --device_policy=explicit: manual_replication then
copies the products to the CPU with `tfplace.to_device` before summing them,
since that policy refuses the implicit copies of the guide's code.
"""

from __future__ import annotations

from typing import Callable

from absl import app, flags

import tfplace
import tfplace.flags

SECTIONS = (
    "log_placement", "manual_placement", "memory_growth", "memory_limit", "single_gpu",
    "soft_placement", "mirrored_strategy", "manual_replication",
)
flags.adopt_module_key_flags(tfplace.flags)  # --help lists the tfplace flags
_SECTION = flags.DEFINE_enum("section", "all", SECTIONS + ("all",), "Which section of the guide to run.")

# The machine of d2l's GPU chapter, to show what a plan looks like with GPUs.
V100_MACHINE = [tfplace.GpuInfo(i, "Tesla V100-SXM2-16GB", 16160) for i in range(8)]


def accelerators() -> list[tfplace.Device]:
    """The GPUs, or the logical CPUs standing in for them."""
    gpus = tfplace.try_all_gpus()
    if gpus != [tfplace.cpu()]:
        return gpus
    return [tfplace.device(name) for name in tfplace.configure().logical_devices if "CPU" in name]


def stand_in(index: int) -> tfplace.Device:
    """GPU `index`, or the logical CPU standing in for it (which may not exist)."""
    return tfplace.gpu(index) if tfplace.num_gpus() else tfplace.Device("CPU", index)


def matrices():
    import tensorflow as tf

    a = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    return a, b


def show(log: tfplace.PlacementLog, value=None) -> None:
    for line in log.guide_lines():
        print(line)
    if value is not None:
        print(value)


def log_placement() -> None:
    import tensorflow as tf

    with tfplace.capture_placement() as log:
        a, b = matrices()
        c = tf.matmul(a, b)
    show(log, c)


def manual_placement() -> None:
    import tensorflow as tf

    with tfplace.capture_placement() as log:
        with tf.device("/CPU:0"):
            a, b = matrices()
        c = tf.matmul(a, b)
    show(log, c)


def memory_growth() -> None:
    plan = tfplace.plan_gpus(V100_MACHINE, memory_growth=True)
    print(f"On d2l's 8 x Tesla V100 machine: memory growth on GPUs {list(plan.visible)}.")
    _configure_now(memory_growth=True)


def memory_limit() -> None:
    plan = tfplace.plan_gpus(V100_MACHINE, memory_fraction=0.4)
    print("On d2l's 8 x Tesla V100 machine, memory_fraction=0.4 caps each GPU at "
          f"{plan.memory_limits[0][0]} MiB (of 16160 MiB); memory_limit_mb=1024 caps each at 1024 MiB.")
    _configure_now(memory_limit_mb=1024)
    if not tfplace.num_gpus():
        _configure_now(logical_cpus=len(accelerators()) + 1)


def _configure_now(**setting) -> None:
    """Calls configure() with `setting` now, showing what happens on this machine."""
    asked = ", ".join(f"{k}={v}" for k, v in setting.items())
    try:
        tfplace.configure(**setting)
    except tfplace.RuntimeInitializedError as err:
        print(f"configure({asked}): RuntimeInitializedError: {err}")
        return
    gpus = tfplace.num_gpus()
    print(f"configure({asked}): applied" + ("" if gpus else " (this machine has no GPU: nothing to cap)"))


def _on_gpu2() -> None:
    import tensorflow as tf

    print(f"The guide's /device:GPU:2: here {stand_in(2).name} stands in for it")
    with tfplace.capture_placement() as log:
        with tf.device(stand_in(2).name):
            a, b = matrices()
            c = tf.matmul(a, b)
    show(log, c)


def single_gpu() -> None:
    import tensorflow as tf

    tf.config.set_soft_device_placement(False)
    try:
        _on_gpu2()
    except (tf.errors.InvalidArgumentError, RuntimeError) as err:
        devices = ", ".join(tfplace.configure().logical_devices)
        print(f"{stand_in(2).name} does not exist and soft placement is off, so TensorFlow refused: "
              f"{type(err).__name__}: {str(err).splitlines()[0][:160]} (devices here: {devices})")
    finally:
        tf.config.set_soft_device_placement(True)


def soft_placement() -> None:
    tfplace.configure(soft_placement=True)
    _on_gpu2()


def mirrored_strategy() -> None:
    import keras

    with tfplace.capture_placement() as log:
        strategy = tfplace.strategy([d.name for d in accelerators()])
        with strategy.scope():
            inputs = keras.layers.Input(shape=(1,))
            predictions = keras.layers.Dense(1)(inputs)
            model = keras.models.Model(inputs=inputs, outputs=predictions)
            model.compile(loss="mse", optimizer=keras.optimizers.SGD(learning_rate=0.2))
    print(f"Using {type(strategy).__name__} with devices {tuple(strategy.extended.worker_devices)}")
    for line in log.guide_lines():
        if " VarHandleOp " in line:  # each variable created once per replica
            print(line)
    print(f"weights on {tfplace.devices_of(model)}")


def manual_replication() -> None:
    import tensorflow as tf

    explicit = tf.config.experimental.get_device_policy() == "explicit"
    copied = 0
    with tfplace.capture_placement() as log:
        c = []
        for dev in accelerators():
            with dev:
                a, b = matrices()
                c.append(tf.matmul(a, b))
        if explicit:  # the policy refuses AddN's implicit copies from the other devices: copy first
            on_cpu = tfplace.to_device(c, "/cpu:0")  # the same tensor where it is there already
            copied = sum(moved is not product for moved, product in zip(on_cpu, c))
            c = on_cpu
        with tf.device("/cpu:0"):
            matmul_sum = tf.add_n(c)
    if copied:
        print(f"--device_policy=explicit: {copied} product(s) copied to /device:CPU:0 with tfplace.to_device "
              "(the Identity lines) before AddN")
    show(log, matmul_sum)


RUNNERS: dict[str, Callable[[], None]] = {name: globals()[name] for name in SECTIONS}


def main(argv: list[str]) -> None:
    del argv
    config = tfplace.configure()
    if tfplace.num_gpus():
        print(f"Devices: {', '.join(config.logical_devices)}")
    else:
        cpus = [n for n in config.logical_devices if "CPU" in n]
        print(f"No GPU: {len(cpus)} logical CPU(s) stand in for GPUs "
              f"({', '.join(f'{n} for GPU:{i}' for i, n in enumerate(cpus))})")
    for name in SECTIONS if _SECTION.value == "all" else (_SECTION.value,):
        print(f"\n== {name}")
        RUNNERS[name]()


if __name__ == "__main__":
    app.run(main)
