"""Memory inside functions, on programs whose truth is known: what each device held at its peak by the user's line
(`at_peak`), growth per step, and what it held when an allocation failed (`Memory.oom`), under both CPU allocator
modes (a BFC allocator that reports every allocation; the default, which reports those of 256 KiB and more with
oneDNN, none without it)."""

from __future__ import annotations

import os

import pytest

from conftest import line_of

pytestmark = pytest.mark.placement  # (run again with oneDNN off: what the allocators report differs)

MiB = 2 ** 20
ONEDNN = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") != "0"  # CI runs both; this machine's default is on
MODES = ["bfc", "default"]


def _env(mode: str, **more: str) -> dict[str, str]:
    return {"TF_CPU_ALLOCATOR_USE_BFC": "1" if mode == "bfc" else "0", **more}


def _seen(mode: str) -> bool:
    """Whether the allocator in force reports allocations of 4 MiB and more."""
    return mode == "bfc" or ONEDNN


REPORT = """
    def rows(memory, device="/device:CPU:0"):
        m = memory.devices[device]
        return {"peak": m.peak_bytes, "rows": [list(r._replace(shape=list(r.shape))) for r in m.at_peak],
                "top": [list(t) for t in m.top], "growth": [list(g) for g in m.growth], "coverage": m.coverage,
                "peak_node": m.peak_node}
"""

PEAK = REPORT + """
    import tensorflow as tf, tfplace

    @tf.function
    def step(x):
        big = tf.tile(x, [4, 1])                      # 64 MiB inside the function
        return tf.reduce_sum(big) + tf.reduce_sum(x)

    x = tf.ones((4096, 1024))                         # 16 MiB, alive before the block
    with tfplace.capture_placement(memory=True, sources=True) as log:
        y = step(x)
    report(rows(log.memory()) | {"json": log.memory().to_json()["devices"][0]})
"""


@pytest.mark.parametrize("mode", MODES)
def test_the_peak_inside_a_function_is_named_by_its_line(python, mode):
    found = python(PEAK, env=_env(mode))
    if not _seen(mode):  # the default allocator without oneDNN reports nothing: said, not guessed
        assert found["peak"] < MiB and "allocations inside functions" in found["coverage"]
        return
    assert 80 * MiB <= found["peak"] < 80 * MiB + 4096  # 16 MiB before the block + 64 MiB inside the call
    assert sum(row[1] for row in found["rows"]) == found["peak"]
    tile, before = found["rows"][:2]
    assert tile == [line_of(PEAK, "# 64 MiB"), 64 * MiB, "intermediate", "Tile", "Tile", "float32", [16384, 1024], 1]
    assert before[1:3] == [16 * MiB, "before"]
    assert found["top"][0][0] == line_of(PEAK, "# 64 MiB") and 64 * MiB <= found["top"][0][1] < 64 * MiB + 1024
    assert found["coverage"] == ("" if mode == "bfc" else found["coverage"]) and (
        mode == "bfc" or "under 256 KiB" in found["coverage"])
    assert set(found["json"]) >= {"device", "peak_bytes", "at_peak", "growth", "coverage", "peak_node", "top"}
    assert found["json"]["at_peak"][0]["kind"] == "intermediate" and found["json"]["at_peak"][0]["shape"] == [16384,
                                                                                                              1024]


LEAK = REPORT + """
    import tensorflow as tf, tfplace

    @tf.function
    def step(x):
        return x * 2.0

    x = tf.ones((1024, 1024))
    kept = []
    with tfplace.capture_placement(memory=True, sources=True) as log:
        for i in range(8):
            kept.append(step(x))                      # 4 MiB kept per step
    report(rows(log.memory()) | {"advice": [[a.rule, a.source, a.message] for a in log.advice()
                                            if a.rule == "memory-growth"]})
"""


@pytest.mark.parametrize("mode", MODES)
def test_a_list_the_loop_keeps_grows_by_its_line(python, mode):
    found = python(LEAK, env=_env(mode))
    line = line_of(LEAK, "# 4 MiB kept")
    [growth] = found["growth"]
    assert growth[0] == line and abs(growth[1] - 4 * MiB) < 1024 and growth[2] >= 3
    if _seen(mode):
        assert 36 * MiB <= found["peak"] < 37 * MiB  # 8 kept, and x before the block
    else:  # only the census: what the block's calls returned (what was alive before is not seen)
        assert found["peak"] == 32 * MiB and "allocations inside functions" in found["coverage"]
    assert found["top"][0][0] == line and found["top"][0][1] >= 28 * MiB
    [advice] = found["advice"]
    assert advice[1] == line and "4.0 MiB per step" in advice[2]


ACTIVATIONS = REPORT + """
    import numpy as np, keras, tfplace
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(2048, activation="relu", name="wide"),
                              keras.layers.Dense(1, name="out")])
    model.compile(optimizer="sgd", loss="mse")
    data, labels = np.ones((2048, 64), "float32"), np.ones((2048, 1), "float32")
    with tfplace.capture_placement(memory=True, sources=True) as log:
        model.fit(data, labels, batch_size=512, epochs=1, verbose=0)
    found = rows(log.memory())
    report(found | {"weights": sum(int(np.prod(w.shape)) * 4 for w in model.weights)})
"""


def test_activations_outweigh_weights_and_the_wide_layer_makes_the_largest(python):
    found = python(ACTIVATIONS, env=_env("bfc"))
    intermediate = [row for row in found["rows"] if row[2] == "intermediate"]
    assert intermediate, found["rows"]
    most = max(row[1] for row in intermediate)
    assert most == 512 * 2048 * 4  # a batch's activations of "wide" (and their gradient), the largest
    assert any("wide" in row[4] and row[1] == most for row in intermediate), intermediate
    assert sum(row[1] for row in intermediate) > found["weights"]


OOM = REPORT + """
    import tensorflow as tf, tfplace

    @tf.function
    def step(x):
        kept = tf.tile(x, [3, 1])                     # 48 MiB alive
        more = tf.tile(kept[:4096], [6, 1])           # 96 MiB asked: more than the cap leaves
        with tf.control_dependencies([more]):         # (kept stays alive until more is made)
            total = tf.reduce_sum(kept)
        return total + tf.reduce_sum(more)

    x = tf.ones((4096, 1024))                         # 16 MiB
    try:
        with tfplace.capture_placement(memory=True, sources=True) as log:
            step(x)
    except tf.errors.ResourceExhaustedError as error:
        oom = log.memory().oom
        report({"oom": [oom.device, oom.requested_bytes, oom.dtype, list(oom.shape), oom.op, oom.source,
                        oom.allocator], "held": [[r.source, r.bytes, r.kind, r.op] for r in oom.held],
                "note": error.__notes__[-1]})
"""


def test_an_out_of_memory_error_on_a_capped_allocator_names_the_request_and_what_was_held(python):
    found = python(OOM, env=_env("bfc", TF_CPU_BFC_MEM_LIMIT_IN_MB="128"))
    assert found["oom"] == ["/device:CPU:0", 96 * MiB, "float32", [24576, 1024], "Tile",  # the node Tile_1
                            line_of(OOM, "# 96 MiB"), "bfc_cpu_allocator_for_gpu"]
    assert found["held"][0] == [line_of(OOM, "# 48 MiB alive"), 48 * MiB, "intermediate", "Tile"]
    assert [16 * MiB, "before"] in [row[1:3] for row in found["held"]]
    first = found["note"].splitlines()[0]
    assert first.startswith("tfplace (memory=True): out of memory on /device:CPU:0: 96.0 MiB requested for "
                            "float32[24576,1024] by Tile at "), first


GATHER = REPORT + """
    import sys
    import tensorflow as tf, tfplace
    table = tf.Variable(tf.ones((4096, 1024)))        # 16 MiB
    ids = tf.constant([1, 5, 9, 4000])                # (a captured constant: its nodes keep their lines)

    @tf.function
    def step(dense):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(table, ids))
        grad = tape.gradient(loss, table)
        if dense:
            grad = tf.convert_to_tensor(grad)         # the dense twin
            table.assign_sub(grad * 0.1)
        else:
            table.scatter_sub(tf.IndexedSlices(grad.values * 0.1, grad.indices))
        return loss

    found = {}
    for dense in (False, True):
        with tfplace.capture_placement(memory=True, sources=True) as log:
            step(dense)
        found[str(dense)] = rows(log.memory())
    report(found)
"""


@pytest.mark.parametrize("mode", MODES)
def test_a_dense_gradient_of_a_gathered_table_holds_the_table_its_sparse_twin_does_not(python, mode):
    found = python(GATHER, env=_env(mode))
    if not _seen(mode):
        return  # (nothing inside functions is seen: the coverage test above says so)
    sparse = [row for row in found["False"]["rows"] if row[2] == "intermediate"]
    dense = [row for row in found["True"]["rows"] if row[2] == "intermediate"]
    assert all(row[1] < MiB for row in sparse), sparse  # the rows gathered and their gradient: 16 KiB each
    densified = [row for row in dense if row[0] == line_of(GATHER, "# the dense twin")]
    assert densified and densified[0][1] == 16 * MiB, dense  # the whole table's shape
    assert found["True"]["peak"] - found["False"]["peak"] >= 16 * MiB
