"""d2l.ai's "GPUs" chapter for TensorFlow and Keras 3, step by step, with placement captured.

    python examples/d2l_gpus.py --logical_cpus=2
    python examples/d2l_gpus.py --logical_cpus=2 --device_policy=explicit   # X + Y fails clearly
    python examples/d2l_gpus.py --logical_cpus=2 --device_policy=warn       # TensorFlow warns too

Without GPUs, logical CPU i stands in for GPU i where d2l puts data on a second
GPU; tfplace's own `try_gpu(i)` still answers honestly (`CPU:0` without GPUs).
"""

from __future__ import annotations

import json

from absl import app, flags

import tfplace
import tfplace.flags
from example_checks import output_file


flags.adopt_module_key_flags(tfplace.flags)  # --help lists the tfplace flags
_REPORT = flags.DEFINE_string("report", None, "Write each step's placement records and values to this JSON file "
                              "(its folder is checked before the steps run).")
REPORT: dict[str, dict] = {}


def record(name: str, log: tfplace.PlacementLog, **values) -> None:
    """Keeps a step's records (op, device, kind), copies and values for --report."""
    REPORT[name] = {"records": [[r.op, r.device, r.kind] for r in log.records],
                    "copies": [list(c[:4]) for c in log.copies], **values}


def stand_in(i: int) -> tfplace.Device:
    """GPU i if it exists, else logical CPU i if it exists, else the CPU."""
    for candidate in (tfplace.gpu(i), tfplace.Device("CPU", i)):
        try:
            return tfplace.device(candidate, fallback=False)
        except tfplace.DeviceNotFoundError:
            pass
    return tfplace.cpu()


def step(title: str) -> None:
    print(f"\n== {title}")


def main(argv: list[str]) -> None:
    del argv
    if _REPORT.value:
        output_file("report", _REPORT.value)
    run_steps(tfplace.configure())
    if _REPORT.value:
        with open(_REPORT.value, "w", encoding="utf-8") as out:
            json.dump(REPORT, out, indent=1)


def run_steps(config: tfplace.Config) -> None:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)

    step("devices")
    print("cpu(), gpu(), gpu(1):", tfplace.cpu(), tfplace.gpu(), tfplace.gpu(1))
    print("num_gpus():", tfplace.num_gpus())

    step("try_gpu")
    print("try_gpu():", tfplace.try_gpu(), " try_gpu(10):", tfplace.try_gpu(10),
          " try_all_gpus():", [str(d) for d in tfplace.try_all_gpus()])

    step("tensor device")
    x = tf.constant([1, 2, 3])
    print("x.device:", x.device)

    dev0, dev1 = stand_in(0), stand_in(1)
    step(f"storage: X on {dev0}, Y on {dev1}")
    with tfplace.capture_placement() as log:
        with dev0:
            X = tf.ones((2, 3))
        with dev1:
            Y = tf.random.uniform((2, 3), seed=1)
    print("X on", tfplace.devices_of(X), " Y on", tfplace.devices_of(Y))
    print("placed:", {op: log.devices_for(op) for op in ("Fill", "RandomUniform")})
    record("storage", log, X=tfplace.devices_of(X), Y=tfplace.devices_of(Y))

    step(f"copying: Z = to_device(X, {dev1}); Y + Z")
    with tfplace.capture_placement() as log:
        Z = tfplace.to_device(X, dev1)
        with dev1:
            total = Y + Z
    print("Z on", tfplace.devices_of(Z), " Y + Z on", tfplace.devices_of(total))
    print("AddV2 placed on", log.devices_for("AddV2"))
    same = tfplace.to_device(Z, dev1) is Z
    print("to_device(Z, dev1) is Z:", same)
    record("copying", log, Z=tfplace.devices_of(Z), same=same, total=total.numpy().tolist(),
           expected=(X.numpy() + Y.numpy()).tolist())

    step(f"uncopied X + Y under {dev1} (device_policy={config.device_policy})")
    with tfplace.capture_placement(sources=True) as log:
        try:
            with dev1:
                uncopied = X + Y
            print("X + Y on", tfplace.devices_of(uncopied))
            refused = ""
        except tf.errors.InvalidArgumentError as err:
            refused = str(err).split(" Tensors can be copied")[0]
            print(f"refused, as d2l says it should be: {refused}")
    for copy in log.copies:
        print(f"implicit copy: {copy.op} input #{copy.input_index} from {copy.from_device} to {copy.to_device}"
              f" at {copy.source}")
    record("uncopied", log, refused=refused)

    step("neural network under a strategy")
    strategy = tfplace.strategy()  # all GPUs, else all logical CPUs
    with strategy.scope():
        # Keras 3 creates weights when the model is built: build inside the scope to mirror them.
        net = keras.models.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    with tfplace.capture_placement() as log:
        out = net(X)
    print("net(X):", out.numpy().round(4).tolist(), "computed on", log.devices_for("MatMul"))
    weights = net.layers[0].weights
    record("network", log, weights=tfplace.devices_of(net), strategy=type(strategy).__name__)
    print("weights on", tfplace.devices_of(weights[0]), tfplace.devices_of(weights[1]),
          "(Keras 3 variables have no .device)")


if __name__ == "__main__":
    app.run(main)
