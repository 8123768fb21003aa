"""Devices: spec parsing, equality, resolution, copying and devices_of."""

import pytest
import tensorflow as tf

import tfplace
from tfplace import DeviceNotFoundError


@pytest.mark.parametrize("spec", ["GPU:1", "gpu:1", "/gpu:1", "/GPU:1", "/device:GPU:1", "device:GPU:1",
                                  "/job:localhost/replica:0/task:0/device:GPU:1"])
def test_every_accepted_form_is_the_same_device(spec):
    assert tfplace.gpu(1) == spec
    assert tfplace.parse_device(spec) == tfplace.gpu(1)
    assert hash(tfplace.parse_device(spec)) == hash(tfplace.gpu(1))
    assert str(tfplace.parse_device(spec)) == "/device:GPU:1"


def test_other_devices_and_jobs_differ():
    assert tfplace.gpu(1) != "GPU:0" and tfplace.gpu(1) != "CPU:1"
    remote = tfplace.parse_device("/job:worker/replica:0/task:1/device:CPU:0")
    assert remote != tfplace.cpu() and remote.name == "/job:worker/replica:0/task:1/device:CPU:0"
    assert len({tfplace.cpu(), tfplace.parse_device("/cpu:0"), tfplace.gpu(0)}) == 2


@pytest.mark.parametrize("spec", ["GPU:x", "/device:TPU:-1", "", "GPU", "/job:localhost/GPU:0:1"])
def test_malformed_spec(spec):
    with pytest.raises(ValueError) as err:
        tfplace.device(spec)
    assert isinstance(err.value, tfplace.DeviceSpecError)
    assert f"{spec!r} (from tfplace.device's argument spec) is not a device" in str(err.value)
    assert "'/device:GPU:1'" in str(err.value)


def test_missing_gpu_falls_back_with_a_log_line(caplog):
    with caplog.at_level("WARNING"):
        dev = tfplace.device("GPU:3")
    assert dev == "CPU:0"
    assert "device /device:GPU:3 does not exist" in caplog.text and "using /device:CPU:0" in caplog.text


def test_missing_gpu_without_fallback_lists_real_devices():
    with pytest.raises(DeviceNotFoundError,
                       match=r"GPU:3 \(from tfplace.device's argument spec\) does not exist: "
                             r"this process has /device:CPU:0"):
        tfplace.device("GPU:3", fallback=False)


def test_d2l_helpers_without_gpu():
    assert tfplace.num_gpus() == 0
    assert tfplace.try_gpu() == tfplace.cpu() and tfplace.try_gpu(10) == tfplace.cpu()
    assert tfplace.try_all_gpus() == [tfplace.cpu()]
    assert tfplace.gpu(2).name == "/device:GPU:2"


def test_device_is_a_reentrant_context_manager():
    dev = tfplace.cpu()
    with dev:
        with dev:
            x = tf.ones(2)
        y = x + 1
    assert x.device.endswith("CPU:0") and y.device.endswith("CPU:0")


def test_to_device_returns_the_same_object_when_already_there():
    z = tf.ones((2, 2))
    assert tfplace.to_device(z, "CPU:0") is z
    assert tfplace.to_device(z, tfplace.cpu()) is z
    nested = tfplace.to_device({"a": z, "b": [z, 3.0]}, "/cpu:0")
    assert nested["a"] is z and nested["b"][0] is z
    assert float(nested["b"][1]) == 3.0 and nested["b"][1].device.endswith("CPU:0")
    with pytest.raises(DeviceNotFoundError, match=r"GPU:0 \(from tfplace.to_device's argument device\)"):
        tfplace.to_device(z, device="GPU:0")


def test_devices_of_tensors_variables_and_keras():
    import keras

    assert tfplace.devices_of(tf.ones(1)) == ("/device:CPU:0",)
    assert tfplace.devices_of(keras.Variable(1.0)) == ("/device:CPU:0",)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    assert tfplace.devices_of(model) == ("/device:CPU:0",)
    with pytest.raises(TypeError, match="devices_of\\(\\) received int"):
        tfplace.devices_of(3)


def test_copies_mirrored_and_keras_on_two_logical_cpus(python):
    out = python("""
        import tensorflow as tf, keras, tfplace
        tfplace.configure(logical_cpus=2)
        x = tf.ones((2, 2))
        y = tfplace.to_device(x, "CPU:1")
        strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
        with strategy.scope():
            v = tf.Variable(1.0)
            model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        report({"copy": y.device, "same": tfplace.to_device(y, "/cpu:1") is y,
                "mirrored": tfplace.devices_of(v), "keras_var": tfplace.devices_of(model.weights[0]),
                "model": tfplace.devices_of(model), "try_all": [str(d) for d in tfplace.try_all_gpus()]})
    """)
    assert out == {"copy": "/job:localhost/replica:0/task:0/device:CPU:1", "same": True,
                   "mirrored": ["/device:CPU:0", "/device:CPU:1"], "keras_var": ["/device:CPU:0", "/device:CPU:1"],
                   "model": ["/device:CPU:0", "/device:CPU:1"], "try_all": ["/device:CPU:0"]}


def test_device_hash_agrees_with_its_canonical_name_and_numpy_arrays_have_no_tensorflow_device(python):
    out = python("""
        import numpy as np, tfplace
        moved = tfplace.to_device(np.ones(3, np.float32), "CPU:0")
        nested = tfplace.to_device({"a": np.zeros(2), "b": 1.5}, "CPU:0")
        try:
            tfplace.devices_of(np.ones(3))
            error = None
        except TypeError as err:
            error = str(err)
        report({"in_set": "/device:CPU:0" in {tfplace.cpu()}, "gpu_in_set": "/device:GPU:1" in {tfplace.gpu(1)},
                "as_key": {tfplace.cpu(): 1}.get("/device:CPU:0"), "moved": moved.device,
                "values": moved.numpy().tolist(), "nested": sorted(v.device for v in nested.values()),
                "error": error})
    """)
    assert out["in_set"] and out["gpu_in_set"] and out["as_key"] == 1
    assert out["moved"].endswith("/device:CPU:0") and out["values"] == [1.0, 1.0, 1.0]
    assert all(d.endswith("/device:CPU:0") for d in out["nested"])
    assert out["error"].startswith("devices_of() received ndarray, which has no device")
