"""examples/multi_gpu_training.py end to end, and its data loader's offline error."""

import re
import subprocess
import sys
import urllib.error

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "examples"))
import resnet_training

pytestmark = pytest.mark.slow  # slow tier: the example scripts, each a whole program


def test_trains_on_two_logical_cpus_and_prints_d2ls_summary(tmp_path):
    plot = tmp_path / "acc.png"
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "multi_gpu_training.py"), "--num_devices=2", "--width=0.0625",
         "--dataset=synthetic", "--epochs=3", "--train_size=512", "--batch_size=64", "--lr=0.05",
         *([f"--plot={plot}"] if _has_matplotlib() else [])],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = [float(m) for m in re.findall(r"epoch \d/3: loss ([\d.]+)", done.stdout)]
    assert len(losses) == 3 and losses[2] < losses[0]
    assert re.search(r"^test acc: 0\.\d\d, \d+\.\d sec/epoch on \['/device:CPU:0', '/device:CPU:1'\]$",
                     done.stdout, re.M)
    # the first epoch's steps, measured: 512 / 64 = 8 steps, the first (tracing) apart; each replica's busy time
    steps = re.search(r"^steps \(epoch 1\): 7 x [\d.]+ ms median; busy per step per replica: CPU:0 ([\d.]+) ms, "
                      r"CPU:1 ([\d.]+) ms; .*compute (\d+)%", done.stdout, re.M)
    assert steps and float(steps[1]) > 0 and float(steps[2]) > 0 and int(steps[3]) >= 50, done.stdout[-2000:]
    assert "advice: none (no rule holds for these steps)" in done.stdout  # the loss is read once per epoch
    if _has_matplotlib():
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_trains_under_the_explicit_device_policy():
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "multi_gpu_training.py"), "--num_devices=2", "--width=0.01",
         "--dataset=synthetic", "--epochs=1", "--train_size=64", "--batch_size=32", "--device_policy=explicit"],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"^epoch 1/1: loss [\d.]+, test acc", done.stdout, re.M)
    assert re.search(r"^test acc: 0\.\d\d, .* on \['/device:CPU:0', '/device:CPU:1'\]$", done.stdout, re.M)


def _has_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def test_offline_fashion_mnist_names_the_synthetic_set(monkeypatch):
    import keras

    def offline():
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(keras.datasets.fashion_mnist, "load_data", offline)
    with pytest.raises(RuntimeError, match="--dataset=fashion_mnist could not be downloaded .*--dataset=synthetic"):
        resnet_training.load_data("fashion_mnist")


def test_synthetic_set_is_deterministic():
    (x1, y1), _ = resnet_training.load_data("synthetic", train_size=16, test_size=4)
    (x2, y2), _ = resnet_training.load_data("synthetic", train_size=16, test_size=4)
    assert (x1 == x2).all() and (y1 == y2).all() and x1.shape == (16, 28, 28, 1)
