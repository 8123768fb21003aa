"""A task of a cluster that only serves: TensorFlow's own `tf.distribute.Server`, and its trace.

`python -m tfplace.cli._server` is what `tfplace launch` runs for each ps task (and, with
`--ps`, each worker): it reads `TF_CONFIG` through `TFConfigClusterResolver`, starts
`tf.distribute.Server(cluster_spec, job_name=..., task_index=..., protocol="grpc", start=True)` and
joins it; it never exits on its own. The tfplace settings in the environment (`TFPLACE_<NAME>`, as
`tfplace launch --logical_cpus=2` passes them) go into the server's `ConfigProto`:
`TFPLACE_LOGICAL_CPUS=N` gives it N CPU devices, `TFPLACE_LOG_PLACEMENT=1` (set under `tfplace
launch --trace`) logs the placement of the graphs it runs with its own options (the functions a
coordinator runs on it are logged when the coordinator logs placement, as `--trace --ps=M` has it do).
SIGTERM and SIGINT end it at once (their default actions again once it serves: a Python handler
would wait for `join()`).

Under `tfplace launch --trace`, a server's placement lines (`is_placement_line`) are kept in its log,
not echoed; `write_trace(log_path, json_path, status)` then writes its `tfplace trace --json` data,
read from that saved standard error (`PlacementLog.from_text`).

    TF_CONFIG='{"cluster": {"ps": ["127.0.0.1:2222"], "chief": ["127.0.0.1:2223"]},
                "task": {"type": "ps", "index": 0}}' python -m tfplace.cli._server

Example:
    >>> from tfplace.cli._server import server_options
    >>> server_options({"TFPLACE_LOGICAL_CPUS": "2", "TFPLACE_LOG_PLACEMENT": "1"})
    {'log_device_placement': True, 'device_count': {'CPU': 2}}
"""

from __future__ import annotations

import os
import re
import signal
import sys
from typing import Any, Mapping

__all__ = ["server_options", "is_placement_line", "trace_json", "write_trace", "main"]

# TensorFlow's placement lines (placer, eager execution; printf's copy of a placer line on standard output).
_PLACEMENT_LINE = re.compile(rb"placer\.cc:\d+\]|Executing op |^[\w.\-/>]+: \(\w+\): /job:")

# `configure()` settings that concern the eager runtime only, or need the GPU plan: not for a server.
_NOT_FOR_SERVERS = {"device_policy": "it concerns eager ops; a server runs graphs",
                    "memory_limit_mb": "a server takes no per-GPU memory cap",
                    "logical_gpus": "a server takes no logical GPUs"}


def server_options(environ: Mapping[str, str]) -> dict[str, Any]:
    """The `ConfigProto` fields that the tfplace settings in `environ` (`TFPLACE_<NAME>`, ...) ask for.

    Raises:
      tfplace.ConfigurationError: a variable's value is not allowed (the message names it).
    """
    from tfplace.config._settings import resolve

    chosen = {name: sourced.value for name, sourced in resolve({}, {}, environ).items()}
    options: dict[str, Any] = {}
    gpu: dict[str, Any] = {}
    if "log_placement" in chosen:
        options["log_device_placement"] = chosen["log_placement"]
    if "soft_placement" in chosen:
        options["allow_soft_placement"] = chosen["soft_placement"]
    if "logical_cpus" in chosen:
        options["device_count"] = {"CPU": chosen["logical_cpus"]}
    if "memory_growth" in chosen:
        gpu["allow_growth"] = chosen["memory_growth"]
    if "memory_fraction" in chosen:
        gpu["per_process_gpu_memory_fraction"] = chosen["memory_fraction"]
    if "visible_gpus" in chosen:
        gpu["visible_device_list"] = ",".join(str(i) for i in chosen["visible_gpus"])
    if gpu:
        options["gpu_options"] = gpu
    for name, why in _NOT_FOR_SERVERS.items():
        if name in chosen:
            print(f"tfplace server: {name}={chosen[name]!r} is not applied to this server: {why}",
                  file=sys.stderr, flush=True)
    return options


def is_placement_line(line: bytes) -> bool:
    """Whether `line` is one of TensorFlow's placement lines: under `tfplace launch --trace` a server's are kept
    in its log, for its trace, and not echoed."""
    return _PLACEMENT_LINE.search(line) is not None


def trace_json(log_text: str, status: int) -> dict[str, Any]:
    """The `tfplace trace --json` data of a server task, from the placement lines of its standard error."""
    from tfplace.cli import _trace
    from tfplace.placement.api._log import PlacementLog

    log = PlacementLog.from_text(log_text)
    return _trace.to_json(log, _trace.findings(log, gpus_visible=False), script="(server)", args=[],
                          exit_status=status)


def write_trace(log_path: str, json_path: str, status: int) -> None:
    """Writes the trace of the server whose standard error is saved at `log_path` to `json_path`, whole."""
    from tfplace import _files

    with open(log_path, encoding="utf-8", errors="replace") as log:
        _files.write_json(json_path, trace_json(log.read(), status))


def main() -> int:
    """Starts this task's server from `TF_CONFIG` and joins it (never returns while it serves)."""
    if not os.environ.get("TF_CONFIG"):
        print("tfplace server: error: environment variable TF_CONFIG is not set: allowed is JSON like "
              '{"cluster": {"ps": ["host:port"], ...}, "task": {"type": "ps", "index": 0}}', file=sys.stderr)
        return 2
    from tfplace._errors import ConfigurationError

    try:
        options = server_options(os.environ)
    except ConfigurationError as err:
        print(f"tfplace server: error: {err}", file=sys.stderr)
        return 2
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")  # TensorFlow's parameter server tutorial
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type not in resolver.cluster_spec().jobs:
        print(f"tfplace server: error: TF_CONFIG's task type {resolver.task_type!r} (from environment variable "
              f"TF_CONFIG) is not a job of its cluster: allowed are {resolver.cluster_spec().jobs}", file=sys.stderr)
        return 2
    gpu = options.pop("gpu_options", None)
    config = tf.compat.v1.ConfigProto(**options)
    for field, value in (gpu or {}).items():
        setattr(config.gpu_options, field, value)
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol=resolver.rpc_layer or "grpc",
                                  config=config, start=True)
    for signum in (signal.SIGTERM, signal.SIGINT):  # end at once: join() holds the main thread in C++
        signal.signal(signum, signal.SIG_DFL)
    print(f"tfplace server: {resolver.task_type} {resolver.task_id} serving at {server.target}", flush=True)
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
