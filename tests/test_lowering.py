"""tfplace.placement.functions._lowering against TensorFlow 2.21 itself.

Each program runs in a fresh interpreter with device placement logging, graph collection
and TensorFlow's graph dumps on. For every function graph collection reports, the
`placer.cc` lines TensorFlow prints for it must be exactly `placer_nodes(...)` as a set
(op types compared after mapping oneDNN kernel names back); the `before_placer` dump of
the same function must list the same nodes in the same order, with the same inputs and
requested devices. tf.data functions are rebuilt with `function_graph_def` from their
FunctionDefs and checked the same way. The programs inherit TF_ENABLE_ONEDNN_OPTS: run the
file with it set to 0 and to 1.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest
from google.protobuf import text_format
from tensorflow.core.framework import function_pb2, graph_pb2
from tensorflow.core.protobuf import config_pb2

from tfplace.placement.functions import _instantiation, _lowering
from tfplace.placement.ops import _kernels

ROOT = Path(__file__).resolve().parents[1]

PRELUDE = """
import os, sys
import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.core.framework import function_pb2
if {two_cpus}:
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
tf.debugging.set_log_device_placement(True)
context.context().enable_graph_collection()
"""

EPILOGUE = """
open(sys.argv[1], "wb").write(context.context().export_run_metadata().SerializeToString())
library = function_pb2.FunctionDefLibrary()
for name in sorted({f.split(".")[0] for f in os.listdir(os.environ["TF_DUMP_GRAPH_PREFIX"])}):
    if context.context().has_function(name):
        library.function.add().CopyFrom(context.context().get_function_def(name))
open(sys.argv[2], "wb").write(library.SerializeToString())
"""

CONTROL_FLOW = """
v = tf.Variable(1.0)
with tf.device("CPU:1"):
    w = tf.Variable(2.0)

@tf.function
def stateful_inner(x):
    v.assign_add(x)
    return v * 2.0

@tf.function
def pure_inner(x):
    return tf.sin(x)

@tf.function(experimental_attributes={"_noinline": True})
def not_inlined(x):
    return x + v, v.handle

@tf.function(experimental_attributes={"api_implements": "triple", "api_preferred_device": "CPU"})
def implementation(x):
    return x * 3.0

@tf.function
def scaled_ones(n):                                                          # called without a tensor input
    return tf.ones(()) * n

@tf.function(jit_compile=True)
def jitted(x):
    return x * x + 1.0

@tf.function
def f(x, i):
    y = tf.cond(x > 0.0, lambda: stateful_inner(x), lambda: x - 1.0)        # If, StatefulPartitionedCall
    p = tf.cond(x > 2.0, lambda: pure_inner(x), lambda: x)                 # StatelessIf, PartitionedCall
    z = tf.switch_case(i, [lambda: x + 1.0, lambda: pure_inner(x), lambda: w * x])
    with tf.device("CPU:1"):
        a = pure_inner(y) + z + p
        def body(k, acc):                                                    # cond inside a while
            acc = tf.cond(acc > 100.0, lambda: acc / 2.0, lambda: acc * 3.0)
            w.assign_add(1.0)
            return k + 1, acc
        k, acc = tf.while_loop(lambda k, acc: k < 3, body, [tf.constant(0), a])
    with tf.control_dependencies([acc]):
        b = tf.identity(x)
        c = tf.cond(i > 1, lambda: tf.while_loop(lambda j: j < 10.0, lambda j: j + v, [b])[0],
                    lambda: b)                                               # while inside a cond
    d, _ = not_inlined(c)
    e = jitted(implementation(d))
    s = tf.parallel_stack([x, d])
    n = tf.raw_ops.AccumulateNV2(inputs=[x, e], shape=[])
    return acc + c + tf.reduce_sum(s) + n + scaled_ones(3)

@tf.function
def no_args():
    tf.cond(tf.random.uniform([]) > 0.5, lambda: tf.print("a"), lambda: tf.print("b"))
    tf.while_loop(lambda i: i < 2, lambda i: i + 1, [tf.constant(0)])

f(tf.constant(1.0), tf.constant(2))
f(tf.constant(-1.0), tf.constant(0))
no_args()
"""

DATASET = """
ds = tf.data.Dataset.range(5).map(lambda x: x * 2).batch(2)

@tf.function
def over_dataset():
    total = tf.constant(0, tf.int64)
    for b in ds:                      # ScanDataset + ReduceDataset
        total += tf.reduce_sum(b)
    return total

@tf.function
def over_iterator():
    total = tf.constant(0, tf.int64)
    for b in iter(ds):                # a While loop over IteratorGetNextAsOptional
        total += tf.reduce_sum(b)
    return total

over_dataset()
over_iterator()
"""

KERAS_FIT = """
import numpy as np
import keras
model = keras.Sequential([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(np.random.rand(32, 4).astype("float32"), np.random.rand(32, 1).astype("float32"),
          epochs=1, batch_size=8, verbose=0)
"""

PROGRAMS = {"control_flow": (CONTROL_FLOW, True), "dataset": (DATASET, False), "keras_fit": (KERAS_FIT, False)}
PLACER_LINE = re.compile(r"^\S+ \S+\s+(\d+) placer\.cc:\d+\] (\S+): \((\S+)\): (\S+)$", re.M)
PINNED = {"_Arg", "_DeviceArg", "_Retval", "_DeviceRetval", "Enter", "Merge", "Switch", "Exit", "NextIteration"}


def _load_text(path: Path) -> graph_pb2.GraphDef:
    return text_format.Parse(path.read_text(), graph_pb2.GraphDef())


def _run(tmp_path: Path, program: str):
    code, two_cpus = PROGRAMS[program]
    source = tmp_path / f"{program}.py"
    source.write_text(PRELUDE.format(two_cpus=two_cpus) + textwrap.dedent(code) + EPILOGUE)
    dump = tmp_path / "dump"
    dump.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CPP", "TFPLACE_"))}
    env.update(TF_CPP_MIN_LOG_LEVEL="0", TF_DUMP_GRAPH_PREFIX=str(dump),
               TF_DUMP_GRAPH_NAME_FILTER="*")
    done = subprocess.run([sys.executable, str(source), str(tmp_path / "md.pb"), str(tmp_path / "lib.pb")],
                          capture_output=True, text=True, env=env, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    metadata = config_pb2.RunMetadata.FromString((tmp_path / "md.pb").read_bytes())
    library = function_pb2.FunctionDefLibrary.FromString((tmp_path / "lib.pb").read_bytes())
    log = defaultdict(list)  # thread -> [(name, op, device)] in log order
    for thread, name, op, device in PLACER_LINE.findall(done.stderr):
        log[thread].append((name, _kernels.op_type(op), device))
    dumps = []  # (function name, initial dump, before_placer dump), one per instantiation
    for path in sorted(dump.glob("*.initial.pbtxt")):
        function, number = path.name.split(".")[:2]
        later = sorted(p for p in dump.glob(f"{function}.*.before_placer.pbtxt") if p.name.split(".")[1] > number)
        if later:
            dumps.append((function, _load_text(path), _load_text(later[0])))
    return metadata, library, log, dumps


def _log_block(log, expected: set, what: str, taken: dict):
    """The placer lines of one function: a run of one thread's lines equal to `expected` as a
    set, overlapping no block taken before; the first one after the thread's last block if
    there is one (functions are checked in the order TensorFlow instantiated them)."""
    size, best, found = len(expected), (-1, ()), []
    for thread, lines in log.items():
        hits = [line[:2] in expected for line in lines]
        count, blocks = sum(hits[:size]), taken.setdefault(thread, [])
        for start in range(len(lines) - size + 1):
            if start:
                count += hits[start + size - 1] - hits[start - 1]
            window = lines[start:start + size]
            if count > best[0]:
                best = (count, window)
            if count == size and len({w[:2] for w in window}) == size and \
                    all(start >= end or start + size <= begin for begin, end in blocks):
                found.append((start < max((end for _, end in blocks), default=0), thread, start))
    if not found:
        window = {w[:2] for w in best[1]}
        pytest.fail(f"{what}: no placer log block equals placer_nodes()\n"
                    f"  only in placer_nodes: {sorted(expected - window)[:40]}\n"
                    f"  only in the closest log block: {sorted(window - expected)[:40]}")
    _, thread, start = min(found)
    taken[thread].append((start, start + size))
    return log[thread][start:start + size]


def _check_against_dump(mine, before_placer: graph_pb2.GraphDef, what: str):
    theirs = [(n.name, n.op, tuple(n.input)) for n in before_placer.node]
    ours = [(n.name, n.op, n.inputs) for n in mine]
    if ours != theirs:
        first = next(i for i, (a, b) in enumerate(zip(ours + [None] * len(theirs), theirs + [None] * len(ours)))
                     if a != b)
        pytest.fail(f"{what}: node {first} differs from TensorFlow's before_placer dump\n"
                    f"  placer_nodes: {ours[first:first + 3]}\n  dump:         {theirs[first:first + 3]}")
    for node, dumped in zip(mine, before_placer.node):
        # The dump shows the assigned device where there is one: TensorFlow pins `_Arg`/`_Retval`
        # nodes, and the Enter/Merge/Switch/Exit/NextIteration of a loop variable copy the pin.
        if node.requested != dumped.device and not (node.op in PINNED and not node.requested):
            pytest.fail(f"{what}: {node.name} requests {node.requested!r}, TensorFlow's node {dumped.device!r}")


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_placer_nodes_match_tensorflow(tmp_path, program):
    metadata, library, log, dumps = _run(tmp_path, program)
    fdefs = {f.signature.name: f for f in library.function}
    taken, checked = {}, []

    def check(graph: graph_pb2.GraphDef, what: str, before_placer=None):
        mine = _lowering.placer_nodes(graph)
        block = _log_block(log, {(n.name, n.op) for n in mine}, what, taken)
        placed = {name: device for name, _, device in block}
        for node in mine:
            if node.requested.endswith("CPU:1"):
                assert placed[node.name].endswith("CPU:1"), (what, node)
        if before_placer is not None:
            pinned = {n.name: placed[n.name] for n in mine if n.op in ("_Arg", "_DeviceArg")}
            _check_against_dump(_lowering.placer_nodes(graph, arg_devices=pinned), before_placer, what)
        checked.append(what)

    # Functions graph collection reports (in the order TensorFlow instantiated them), each
    # with its dump when TensorFlow wrote one (not for single eager ops).
    unmatched = list(dumps)
    for i, collected in enumerate(metadata.function_graphs):
        graph = collected.pre_optimization_graph
        names = sorted(n.name for n in graph.node)
        match = next((d for d in unmatched if sorted(n.name for n in d[1].node) == names), None)
        if match:
            unmatched.remove(match)
        check(graph, match[0] if match else f"collected function {i}", match[2] if match else None)
    # The others are tf.data functions: rebuilt from their FunctionDef where the program could
    # get it (tf.data's rewrites add FakeSink nodes to the functions of a dataset it iterates).
    for function, initial, before_placer in unmatched:
        graph = initial
        if function in fdefs:
            graph = _instantiation.function_graph_def(fdefs[function], library, fake_sinks="_Dataset_" in function)
            assert [(n.name, n.op, tuple(n.input)) for n in graph.node] == \
                [(n.name, n.op, tuple(n.input)) for n in initial.node], function
        check(graph, function, before_placer)
    covered = {(thread, k) for thread, blocks in taken.items() for begin, end in blocks for k in range(begin, end)}
    unexplained = [line for thread, lines in log.items() for k, line in enumerate(lines) if (thread, k) not in covered]
    assert not unexplained, f"placer lines of no checked function: {unexplained[:20]}"
    expected = {"control_flow": ["__inference_f_", "__inference_no_args_", "__inference_not_inlined_"],
                "dataset": ["__inference_over_iterator_", "__inference_Dataset_map_lambda_"],
                "keras_fit": ["__inference_multi_step_on_iterator_", "__inference_Dataset_map_"]}[program]
    assert all(any(c.startswith(e) for c in checked) for e in expected), checked
