"""Replication helpers and training correctness under MirroredStrategy (in subprocesses)."""

import pytest

import tfplace


def test_helpers_on_two_logical_cpus(python):
    out = python("""
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)
        with tfplace.capture_placement() as log:
            a = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
            b = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
            parts = tfplace.replicate(tf.matmul, ["CPU:0", "CPU:1"], a, b)
            total = tfplace.reduce_on(parts)
            mean = tfplace.reduce_on(parts, device="CPU:1", op="mean")
        xs, ys = tfplace.split_batch(tf.reshape(tf.range(8.0), (4, 2)), tf.range(4), ["CPU:0", "CPU:1"])
        errors = []
        for call in (lambda: tfplace.split_batch(tf.ones((5, 2)), tf.ones(5), ["CPU:0", "CPU:1"]),
                     lambda: tfplace.split_batch(tf.ones((4, 2)), tf.ones(3), ["CPU:0", "CPU:1"]),
                     lambda: tfplace.reduce_on(parts, op="max"),
                     lambda: tfplace.replicate(tf.matmul, ["CPU:0", "GPU:0"], a, b)):
            try:
                call()
            except tfplace.Error as err:
                errors.append(f"{type(err).__name__}: {err}")
        report({"parts": [p.device for p in parts], "total": total.numpy().tolist(), "mean": mean.numpy().tolist(),
                "addn": log.devices_for("AddN"), "shards": [x.numpy().tolist() for x in xs],
                "shard_devices": [y.device for y in ys], "errors": errors,
                "strategy": type(tfplace.strategy()).__name__, "one": type(tfplace.strategy(["CPU:1"])).__name__})
    """)
    assert out["parts"] == [f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(2)]
    assert out["total"] == [[44.0, 56.0], [98.0, 128.0]] and out["mean"] == [[22.0, 28.0], [49.0, 64.0]]
    assert out["addn"] == ["/device:CPU:0", "/device:CPU:1"]
    assert out["shards"] == [[[0.0, 1.0], [2.0, 3.0]], [[4.0, 5.0], [6.0, 7.0]]]
    assert out["shard_devices"][1].endswith("CPU:1")
    assert "a batch of 5 for 2 device(s)" in out["errors"][0] and "x with 4 examples and y with 3" in out["errors"][1]
    assert "op='max'" in out["errors"][2] and out["errors"][3].startswith(
        "DeviceNotFoundError: device GPU:0 (from tfplace.replicate's argument devices) does not exist")
    assert out["strategy"] == "MirroredStrategy" and out["one"] == "OneDeviceStrategy"


@pytest.mark.parametrize("raw,what", [("{not json", "Expecting property name"),
                                      ('{"cluster": {"worker": ["127.0.0.1:1"]}, '
                                       '"task": {"type": "worker", "index": 3}}',
                                       "is not in the cluster"),
                                      ('{"task": {"type": "worker", "index": 0}}', "'cluster'")])
def test_malformed_tf_config(monkeypatch, raw, what):
    monkeypatch.setenv("TF_CONFIG", raw)
    with pytest.raises(tfplace.ConfigurationError) as err:
        tfplace.strategy()
    assert "environment variable TF_CONFIG" in str(err.value) and what in str(err.value)


def test_training_step_correctness_on_two_logical_cpus(python):
    out = python("""
        import sys
        sys.path.insert(0, "examples")
        import numpy as np, keras, tensorflow as tf, tfplace
        import resnet_training as rt
        tfplace.configure(logical_cpus=2)

        def small_model():
            keras.utils.set_random_seed(0)
            return keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Conv2D(4, 3), keras.layers.Flatten(),
                                     keras.layers.Dense(10)])

        (x, y), _ = rt.load_data("synthetic", train_size=64, test_size=8)
        weights = {}
        two = tfplace.strategy(["CPU:0", "CPU:1"])  # one instance: its collectives keep their own keys
        for name, strategy in (("one", tfplace.strategy(["CPU:0"])), ("two", two)):
            with strategy.scope():
                model, optimizer = small_model(), rt.sgd(0.1)
            step = rt.make_train_step(strategy, model, optimizer, global_batch=64)
            for batch in rt.distribute(strategy, x, y, 64, shuffle=False):
                step(batch)
            weights[name] = [np.asarray(v.value.values[0] if hasattr(v.value, "values") else v.value)
                             for v in model.trainable_variables]

        with two.scope():
            resnet, optimizer = rt.resnet18(10, width=0.0625), rt.sgd(0.05)
        history = rt.train(two, resnet, optimizer, rt.load_data("synthetic", 256, 64), epochs=3,
                           global_batch=64, log=lambda line: None)
        replicas_equal = all(
            all(np.array_equal(np.asarray(r), np.asarray(v.value.values[0])) for r in v.value.values)
            for v in resnet.trainable_variables)
        report({"max_diff": max(float(np.max(np.abs(a - b))) for a, b in zip(weights["one"], weights["two"])),
                "moved": max(float(np.max(np.abs(a))) for a in weights["one"]),
                "replicas_equal": replicas_equal, "replica_devices": tfplace.devices_of(resnet),
                "loss": history["loss"]})
    """, timeout=600)
    assert out["max_diff"] < 1e-5 and out["moved"] > 0
    assert out["replicas_equal"] and out["replica_devices"] == ["/device:CPU:0", "/device:CPU:1"]
    assert out["loss"][2] < out["loss"][1] < out["loss"][0]
