"""Runs one conformance program inside `tfplace.capture_placement()` with TensorFlow's own placement log on.

    python tests/conformance/harness.py PROGRAM OUT.json

Before any TensorFlow op, with plain TensorFlow APIs (not `tfplace.configure`, so that the
referee does not depend on what it judges): `tf.debugging.set_log_device_placement(True)`,
two logical CPUs, and the "warn" device policy (TensorFlow then logs every implicit copy).
Then the program runs with `runpy.run_path(PROGRAM, run_name="__main__")` inside a capture,
and `log.to_json()` goes to OUT.json, with what the harness knows beside it:

    {"capture": <log.to_json()>, "capture_source": "to_json" | "records",
     "main_thread": <native id of the thread that ran the program>, "seconds": <float>,
     "sends": {"edges": <cross-device _Send edges of the functions the block called, one per call,
                         and of the tf.data functions its iterators instantiated, one per instantiation>,
               "dataset_edges": <those of tf.data functions>,
               "bytes": {<producer tensor>: <bytes per transfer, where the shape is static>}}}

The edges come from `sends.SendOracle`, which reads TensorFlow's partitioned graphs on its own, and,
for the functions graph collection never reports, from the partitions TensorFlow's graph dumper writes
when the caller sets `TF_DUMP_GRAPH_PREFIX` (`sends.dumped_sends`).

With `CONFORMANCE_CALLBACK_FIRST=1` in its environment, the harness first installs an op callback of its own
that only looks and returns None (as a debugger's or a numerics checker's does): it runs before the capture's,
and TensorFlow then hands the capture's callback None where it would have handed it a graph op's outputs.

A program whose text mentions `__warmup__` is first run as `__warmup__` *before* the capture
opens (its globals carry over to the main run): that is how a program calls a function that
TensorFlow placed before the capture.

Marker lines on stderr (`CONFORMANCE-BEGIN <tid>` / `CONFORMANCE-END <tid>`) delimit the capture
in TensorFlow's log; the harness writes them itself and redirects nothing: the caller reads
stdout and stderr through pipes.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
import time

from sends import SendOracle, dumped_sends  # the harness runs as a script: its folder is on sys.path

BEGIN = "CONFORMANCE-BEGIN"
END = "CONFORMANCE-END"


def _setup() -> None:
    import tensorflow as tf

    tf.debugging.set_log_device_placement(True)
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    tf.config.experimental.set_device_policy("warn")


def _looks(op_type, inputs, attrs, outputs, op_name=None, graph=None):  # pylint: disable=unused-argument
    """Another library's op callback that only looks (`CONFORMANCE_CALLBACK_FIRST=1`)."""
    return None


def _from_records(log) -> dict:
    """The contract's JSON shape from `log.records` / `log.copies`, for a tfplace without `to_json()`."""
    records = [{"op": r.op, "name": r.name, "device": r.device, "kind": r.kind, "source": r.source,
                "requested": getattr(r, "requested", ""),
                "dtypes": [list(d) for d in getattr(r, "dtypes", ())]} for r in log.records]
    copies = [{"op": c.op, "input_index": c.input_index, "from_device": c.from_device,
               "to_device": c.to_device, "source": c.source} for c in log.copies]
    return {"complete": bool(log.complete), "incomplete_reason": log.incomplete_reason,
            "records": records, "copies": copies}


def _marker(word: str) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    sys.stderr.write(f"{word} {threading.get_native_id()}\n")
    sys.stderr.flush()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    program, out = os.path.abspath(argv[1]), argv[2]
    _setup()
    if os.environ.get("CONFORMANCE_CALLBACK_FIRST") == "1":
        from tensorflow.python.framework import op_callbacks

        op_callbacks.add_op_callback(_looks)
    import tfplace

    with open(program, encoding="utf-8") as f:
        warmup = "__warmup__" in f.read()
    sys.path.insert(0, os.path.dirname(program))
    sys.argv = [program]
    carried = runpy.run_path(program, run_name="__warmup__") if warmup else None
    graphs = os.environ.get("TF_DUMP_GRAPH_PREFIX", "")
    before = frozenset(os.listdir(graphs)) if graphs and os.path.isdir(graphs) else frozenset()
    start = time.perf_counter()
    _marker(BEGIN)
    oracle = SendOracle()
    try:
        with oracle, tfplace.capture_placement() as log, oracle.calls():
            runpy.run_path(program, init_globals=carried, run_name="__main__")
    finally:
        _marker(END)
    seconds = time.perf_counter() - start
    if hasattr(log, "to_json"):
        capture, source = log.to_json(), "to_json"
    else:
        capture, source = _from_records(log), "records"
    datasets = dumped_sends(graphs, before, frozenset(oracle.exported)) if graphs and os.path.isdir(graphs) else 0
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"capture": capture, "capture_source": source,
                   "main_thread": threading.get_native_id(), "seconds": seconds,
                   "sends": {"edges": oracle.finish() + datasets, "dataset_edges": datasets,
                             "bytes": oracle.sizes}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
