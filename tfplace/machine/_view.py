"""TensorFlow's own view of the GPUs, read in a child process with its log at full level: the GPUs it lists
and its diagnostic lines (the loader, the driver, the GPU device factory), and with `run=True` where a
`MatMul` asked of each GPU ran and how long its first call took (PTX compiled at start shows there). The
caller's process never imports TensorFlow nor makes a CUDA context.

Example:
    >>> from tfplace.machine._view import diagnostic
    >>> diagnostic("I0000 00:00:1.2   24423 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU "
    ...            "will not be used.")
    'I cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.'
    >>> diagnostic("2026-11-27 09:10:37.5: W tensorflow/core/common_runtime/gpu/gpu_device.cc:2251] Cannot dlopen "
    ...            "some GPU libraries.")
    'W gpu_device.cc:2251] Cannot dlopen some GPU libraries.'
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any, Optional

from tfplace.machine._records import View

__all__ = ["read", "start", "finish", "diagnostic", "TIME_LIMIT"]

TIME_LIMIT = 180.0
_MARK = "TFPLACE_VIEW "
# the sources whose lines say why a GPU is (not) used; other warnings and errors are kept too
_SOURCES = ("dso_loader", "cudart_stub", "cuda_diagnostics", "cuda_platform", "cuda_executor", "cuda_driver",
            "gpu_device", "gpu_init", "cuda_dnn", "cuda_blas", "cuda_fft", "gpu_process_state", "platform_util",
            "cuda_solvers", "ptx_compiler", "nvptx_compiler", "asm_compiler", "cuda_asm_compiler", "gpu_util",
            "cuda_status", "gpu_cudamallocasync_allocator", "gpu_bfc_allocator")
_NOISE = ("cpu_feature_guard", "port.cc", "parse_flags_from_env", "dump_graph")
# TensorFlow 2.21's log prefix (`I1127 09:10:37.5647   24423 cudart_stub.cc:31] `), then 2.16-2.20's
# (`2026-11-27 09:10:37.5647: I external/local_xla/xla/stream_executor/cuda/cudart_stub.cc:28] `).
_LINE = re.compile(r"^([IWEF])\d{4} [\d:.]+\s+\d+ ((\w+)\.cc:\d+)\] (.*)$")
_DATED_LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:.]+: ([IWEF]) (?:\S*/)?((\w+)\.cc:\d+)\] (.*)$")
_CHILD = r"""
import json, sys, time
import tensorflow as tf
gpus = tf.config.list_physical_devices("GPU")
names = []
for gpu in gpus:
    try:
        names.append(tf.config.experimental.get_device_details(gpu).get("device_name") or gpu.name)
    except Exception:
        names.append(gpu.name)
view = {"gpus": names}
if sys.argv[1] == "run":
    view["run"] = []
    for device in ["/CPU:0"] + [f"/GPU:{i}" for i in range(len(gpus))]:
        try:
            with tf.device(device):
                a = tf.random.uniform((1024, 1024))
                start = time.perf_counter(); c = tf.matmul(a, a); c.numpy(); first = time.perf_counter() - start
                start = time.perf_counter(); tf.matmul(a, a).numpy(); after = time.perf_counter() - start
            view["run"].append({"device": device, "ran_on": c.device, "first_ms": first * 1e3, "next_ms": after * 1e3,
                                "error": None})
        except Exception as err:
            view["run"].append({"device": device, "ran_on": None, "error": f"{type(err).__name__}: {err}"[:500]})
print("TFPLACE_VIEW " + json.dumps(view), flush=True)
"""


def diagnostic(line: str) -> Optional[str]:
    """A log line worth showing, shortened to `severity source:line] message`, else None."""
    match = _LINE.match(line.strip()) or _DATED_LINE.match(line.strip())
    if not match or match.group(3) in _NOISE or match.group(2) in _NOISE:
        return None
    if match.group(1) == "I" and match.group(3) not in _SOURCES:
        return None
    return f"{match.group(1)} {match.group(2)}] {match.group(4)}"


def start(run: bool = False) -> subprocess.Popen[str]:
    """Starts the child (so that the caller can read the machine's facts meanwhile)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_MAX_VLOG_LEVEL": "1"}
    return subprocess.Popen([sys.executable, "-c", _CHILD, "run" if run else "list"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="backslashreplace")


def finish(child: subprocess.Popen[str], limit: float = TIME_LIMIT) -> View:
    """TensorFlow's view (the facts' `"tensorflow_view"`) from a started child: its GPUs and diagnostic lines; a
    child that fails or outlives `limit` gives no GPUs and says so in its log."""
    try:
        out, err = child.communicate(timeout=limit)
        ended = (None if child.returncode == 0 else
                 f"the child importing TensorFlow ended with status {child.returncode}")
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        ended = f"the child importing TensorFlow did not finish within {limit:.0f} s"
    log = list(dict.fromkeys(line for line in map(diagnostic, err.splitlines()) if line))
    view: dict[str, Any] = {"gpus": []}
    for line in out.splitlines():
        if line.startswith(_MARK):
            view = json.loads(line[len(_MARK):])
    if ended:
        tail = [line for line in err.splitlines() if line.strip()][-3:]
        log += [f"E tfplace] {ended}"] + [f"E tfplace] {line}" for line in tail]
    view["log"] = log
    return View.from_json(view, "the child importing TensorFlow")


def read(run: bool = False, limit: float = TIME_LIMIT) -> View:
    """TensorFlow's view, read in a child process (see the module's docstring)."""
    return finish(start(run), limit)
