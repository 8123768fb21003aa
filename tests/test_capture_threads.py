"""Captures side by side: a capture's op callback belongs to the threads it was given and goes with the block;
each capture keeps its own sources, and each function its own lines."""

from unittest import mock

import pytest

from conftest import line_of

pytestmark = pytest.mark.placement  # reads where ops ran: CI runs it again with oneDNN off


CODE = """
        import threading, tensorflow as tf, tfplace
        from tfplace.placement.taking import _callback
        x = tf.ones(2)
        seen = {}

        # a capture held by a generator that a worker thread finishes
        def held():
            with tfplace.capture_placement() as log:
                yield log
        opened = held()
        first = next(opened)
        x * 2.0
        def finish():
            try:
                next(opened, None)
                seen["finish"] = "closed"
            except BaseException as error:
                seen["finish"] = f"{type(error).__name__}: {error}"
        worker = threading.Thread(target=finish)
        worker.start()
        worker.join()
        seen["callbacks after"] = len(_callback.thread_hooks())
        with tfplace.capture_placement() as later:   # this thread works on
            x * 3.0
        seen["later"] = [r.op for r in later.records]
        seen["first"] = [r.op for r in first.records]

        # an outer capture without sources, an inner one with
        with tfplace.capture_placement() as outer:
            with tfplace.capture_placement(sources=True) as inner:
                x + 1.0   # inner line
        seen["outer sources"] = sorted({r.source for r in outer.records})
        seen["inner sources"] = sorted({r.source for r in inner.records})

        # a thread started in an all_threads capture, living on after the block
        block_done, checked = threading.Event(), threading.Event()
        def long_lived():
            x * 4.0
            block_done.wait()
            seen["thread callbacks after"] = len(_callback.thread_hooks())
            x * 5.0
            checked.set()
        with tfplace.capture_placement(all_threads=True) as threaded:
            thread = threading.Thread(target=long_lived)
            thread.start()
            while not threaded.records:
                pass
        block_done.set()
        checked.wait()
        thread.join()
        seen["threaded"] = [r.op for r in threaded.records]
        report(seen)
"""


def test_captures_leave_no_callback_behind_and_keep_their_own_sources(python):
    out = python(CODE)
    assert out["finish"] == "closed"
    assert out["callbacks after"] == 0
    assert out["later"] == ["Mul"] and out["first"] == ["Mul"]
    assert out["outer sources"] == [""]
    assert out["inner sources"] == [line_of(CODE, "# inner line")], out["inner sources"]
    assert out["thread callbacks after"] == 0
    assert out["threaded"] == ["Mul"]


SAME_NAMES = """
    import tensorflow as tf, tfplace
    x = tf.ones(2)
    with tfplace.capture_placement(sources=True) as log:
        f = tf.function(lambda v: v * 2.0).get_concrete_function(tf.TensorSpec([2]))  # f's line
        g = tf.function(lambda v: v * 3.0).get_concrete_function(tf.TensorSpec([2]))  # g's line
        f(x)
        g(x)
        f(x)
    report([r.source for r in log.records if r.op == "Mul" and r.kind == "place"])
"""


def test_functions_with_the_same_node_names_traced_before_either_runs_keep_their_own_lines(python):
    assert python(SAME_NAMES) == [line_of(SAME_NAMES, "# f's line"), line_of(SAME_NAMES, "# g's line")]


def test_captures_in_threads_keep_their_own_functions_under_concurrent_first_calls(python):
    out = python("""
        import threading, tensorflow as tf, tfplace
        x = tf.ones((8, 8))

        def run_once(one_at_a_time):
            barrier, first = threading.Barrier(4), threading.Lock()
            found = {}

            def work(index):
                op = [tf.matmul, tf.add, tf.multiply, tf.subtract][index]
                f = tf.function(lambda a: op(a, a))   # its own function, traced and placed in the block
                with tfplace.capture_placement() as log:
                    barrier.wait()
                    if one_at_a_time:
                        with first:
                            f(x)
                    else:
                        f(x)
                    f(x)
                found[index] = (sorted({r.op for r in log.records if r.kind in ("place", "removed")
                                        and not r.op.startswith("_") and r.op != "Identity"}),
                                log.complete, log.incomplete_reason)

            threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            own = ["MatMul", "AddV2", "Mul", "Sub"]
            return [(found[i][0] if set(found[i][0]) <= {own[i]} else ["another thread's"] + found[i][0],
                     *found[i][1:]) for i in range(4)]

        together = [entry for _ in range(10) for entry in run_once(False)]
        apart = [entry for _ in range(10) for entry in run_once(True)]
        report({"together": sorted({(tuple(ops), complete, reason.split(":")[0])
                                    for ops, complete, reason in together}),
                "apart": sorted({(tuple(ops), complete) for ops, complete, _ in apart})})
    """)
    own = {("MatMul",), ("AddV2",), ("Mul",), ("Sub",)}
    # first calls one thread at a time, later calls at once: each log complete, with its own node only
    assert {tuple(ops) for ops, complete in out["apart"]} == own and all(complete for _, complete in out["apart"])
    # first calls at the same instant: TensorFlow's collection merges the threads' graphs and hands them to
    # whichever call ends first; taken apart again, each log has its own function's nodes and no other's. A call
    # that ended while another still held its graphs says so, never that its function was placed before the block
    for ops, complete, reason in out["together"]:
        assert tuple(ops) in own if complete else not ops
        assert complete or reason.startswith("TensorFlow placed functions of several threads at the same time")
    assert {tuple(ops) for ops, complete, _ in out["together"] if complete} == own


def test_two_threads_each_with_its_own_capture_and_first_call_record_their_own_function(python):
    # a server or a threaded test runner: each thread opens a capture and makes its function's first call in it
    out = python("""
        import collections, threading, tensorflow as tf, tfplace
        x = tf.ones((8, 8))
        found = collections.Counter()
        for _ in range(40):
            functions = [tf.function(lambda a: tf.add(a, a)), tf.function(lambda a: tf.matmul(a, a))]
            start = threading.Barrier(2)

            def work(index):
                with tfplace.capture_placement(sources=True) as log:
                    start.wait()
                    functions[index](x)
                ops = sorted({r.op for r in log.records if r.kind in ("place", "removed")} - {"_Arg", "_Retval"})
                found[(index, log.complete, log.incomplete_reason.split(",")[0], tuple(ops))] += 1

            threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        report(sorted([*key, count] for key, count in found.items()))
    """)
    assert out == [[0, True, "", ["AddV2", "Identity"], 40], [1, True, "", ["Identity", "MatMul"], 40]]


FIRST_CALLS = """
    import collections, sys, threading, tensorflow as tf, tfplace
    same = sys.argv[1] == "same"
    x = tf.ones((8, 8))
    found = collections.Counter()
    ops = [tf.matmul, tf.add, tf.multiply, tf.subtract]
    for _ in range(20):
        start = threading.Barrier(4)

        def work(index):
            op = tf.multiply if same else ops[index]
            f = tf.function(lambda a: op(a, a))   # a new function, traced and placed in the block, called once
            with tfplace.capture_placement() as log:
                start.wait()
                f(x)
            own = sorted({r.op for r in log.records if r.kind in ("place", "removed")}
                         - {"_Arg", "_Retval", "Identity"})
            found[(index, log.complete, log.incomplete_reason.split(",")[0], tuple(own))] += 1

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    report(sorted([*key, count] for key, count in found.items()))
"""


@pytest.mark.parametrize("functions", ["distinct", "same"])
def test_four_threads_each_calling_a_new_function_once_in_its_own_capture_record_its_nodes_every_time(python,
                                                                                                     functions):
    # a server or a threaded test runner capturing per request: 80 first calls released together, each log
    # complete with its own function's node; where the four functions have the same code, TensorFlow's
    # graphs cannot be told apart by their nodes, and each call still gets one of them
    out = python(FIRST_CALLS, args=[functions])
    own = ["MatMul", "AddV2", "Mul", "Sub"] if functions == "distinct" else ["Mul"] * 4
    assert out == [[index, True, "", [own[index]], 20] for index in range(4)]


def test_a_call_of_a_kernel_collected_before_takes_no_graph_another_threads_function_of_the_same_code_awaits():
    # h's first call takes one of two graphs with the same nodes (g's, whose call is in flight, and its own);
    # h's next call places nothing and leaves the other to g
    from tfplace.placement.functions import _graphs
    from tfplace.placement.session import _session

    nodes = (("a", "_Arg"), ("MatMul", "MatMul"), ("Identity", "Identity"), ("identity_RetVal", "_Retval"))
    session = _session.Session()
    owners = frozenset({"__inference_g_1", "__inference_h_2"})
    session.pending[:] = [(owners, Entry(graph(*nodes), graph(*nodes)))] * 2
    empty = type("Metadata", (), {"function_graphs": []})()
    with mock.patch.object(_graphs._tensorflow, "export_run_metadata", return_value=empty), \
            mock.patch.object(_graphs._function_sources, "functions_with_nodes", return_value=sorted(owners)):
        first = _graphs._ours(session, "__inference_h_2", frozenset({"__inference_g_1"}), (set(), set()), True)
        again = _graphs._ours(session, "__inference_h_2", frozenset({"__inference_g_1"}), (set(), set()), False)
        g_call = _graphs._ours(session, "__inference_g_1", frozenset(), (set(), set()), True)
    assert (len(first), len(again), len(g_call), session.pending) == (1, 0, 1, [])


def graph(*nodes):
    """A GraphDef of (name, op) nodes on CPU:0."""
    from tensorflow.core.framework import graph_pb2

    made = graph_pb2.GraphDef()
    for name, op in nodes:
        made.node.add(name=name, op=op, device="/job:localhost/replica:0/task:0/device:CPU:0")
    return made


class Entry:
    """One entry of TensorFlow's graph collection (`FunctionGraphs`): graphs as written and placed, no partitions."""

    def __init__(self, written, placed):
        self.pre_optimization_graph, self.post_optimization_graph, self.partition_graphs = written, placed, []


def test_merged_graphs_pair_each_placed_graph_with_the_graph_it_was_written_as():
    from tensorflow.core.framework import graph_pb2
    from tfplace.placement.functions import _instances

    # one entry of TensorFlow's collection: two threads' graphs as written, one placed graph
    written = graph(("a", "_Arg"), ("MatMul", "MatMul"), ("Identity", "Identity"), ("identity_RetVal", "_Retval"),
                    ("a", "_Arg"), ("Add", "AddV2"), ("Identity", "Identity"), ("identity_RetVal", "_Retval"))
    # Grappler placed `Add` as a multiplication named after it
    placed = graph(("a", "_Arg"), ("ArithmeticOptimizer/SimplifyAggregation_Mul_Add", "Mul"),
                   ("identity_RetVal", "_Retval"))
    unplaced = []
    [instance] = _instances.split([Entry(written, placed)], unplaced)
    assert [n.op for n in instance.pre_optimization_graph.node] == ["_Arg", "AddV2", "Identity", "_Retval"]
    # the graph as written whose placed graph another thread's collection holds waits for it
    [waiting] = unplaced
    assert [n.op for n in waiting.pre_optimization_graph.node] == ["_Arg", "MatMul", "Identity", "_Retval"]
    later = Entry(graph_pb2.GraphDef(), graph(("a", "_Arg"), ("MatMul", "MatMul"), ("identity_RetVal", "_Retval")))
    [paired] = _instances.split([waiting, later], [])
    assert [n.op for n in paired.pre_optimization_graph.node] == ["_Arg", "MatMul", "Identity", "_Retval"]


def test_an_entry_whose_placed_graph_holds_two_functions_gives_each_its_own_graph_as_written():
    # TensorFlow's collection gave one thread's entry its own graph as written and two placed graphs: the
    # other thread's graph as written waited (`unplaced`) for its placed graph, which came merged with this one
    from tensorflow.core.framework import graph_pb2
    from tfplace.placement.functions import _graphs, _instances
    from tfplace.placement.session import _session

    matmul = (("a", "_Arg"), ("MatMul", "MatMul"), ("Identity", "Identity"), ("identity_RetVal", "_Retval"))
    sub = (("a", "_Arg"), ("Sub", "Sub"), ("Identity", "Identity"), ("identity_RetVal", "_Retval"))
    session = _session.Session()
    session.unplaced.append(_instances.Instance(graph(*sub), graph_pb2.GraphDef(), (), ""))
    found = _graphs._taken_apart(session, [Entry(graph(*matmul), graph(*matmul[:2], matmul[3], *sub[:2], sub[3]))])
    assert sorted(([n.op for n in g.pre_optimization_graph.node], [n.op for n in g.post_optimization_graph.node], whole)
                  for g, whole in found) == [
        (["_Arg", "MatMul", "Identity", "_Retval"], ["_Arg", "MatMul", "_Retval"], True),
        (["_Arg", "Sub", "Identity", "_Retval"], ["_Arg", "Sub", "_Retval"], True)]
    assert session.unplaced == []


LATE_GRAPH = """
    import sys, threading, warnings, tensorflow as tf, tfplace
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.framework import op_callbacks
    from tfplace import _tensorflow
    mode, calls = sys.argv[1], int(sys.argv[2])
    x = tf.ones((4, 4))
    in_g, done = threading.Event(), threading.Event()

    def pause(op_type, inputs, attrs, outputs, op_name=None, graph=None):
        name = op_type.decode() if isinstance(op_type, bytes) else op_type
        if graph is None and name.startswith("__inference_g"):
            in_g.set()       # g's call stays in flight while the main thread calls f
            done.wait(30)

    @tf.function
    def g(a):
        return tf.matmul(a, a)

    def other():
        op_callbacks.add_op_callback(pause)   # runs before the capture's own callback
        with tfplace.capture_placement():
            g(x)

    # TensorFlow's collection hands f's graphs to a later collection ("later") or to none ("never")
    real, held = _tensorflow.export_run_metadata, []
    def export():
        metadata = real()
        entries = list(metadata.function_graphs)
        own = [e for e in entries if any(n.op == "Sub" for n in e.pre_optimization_graph.node)]
        shown = config_pb2.RunMetadata()
        shown.function_graphs.extend([e for e in entries if e not in own] + (held if mode != "never" else []))
        held[:] = own
        return shown
    _tensorflow.export_run_metadata = export

    thread = threading.Thread(target=other)
    thread.start()
    in_g.wait(30)
    f = tf.function(lambda a: tf.subtract(a, a))
    h = tf.function(lambda a: tf.matmul(a, a))
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        with tfplace.capture_placement() as log:
            for _ in range(calls):
                f(x)
            for _ in range(3 if mode == "other" else 0):
                h(x)   # another function's calls, while f's graphs come: they are never h's
    done.set()
    thread.join()
    runs = {}
    for (device, op, category), count in log.runs.items():
        runs[op] = runs.get(op, 0) + count
    report({"ops": sorted({r.op for r in log.records if r.kind in ("place", "removed")}
                          - {"_Arg", "_Retval", "Identity"}),
            "complete": log.complete, "reason": log.incomplete_reason, "warned": [str(w.message) for w in warned],
            "runs": {op: count for op, count in runs.items() if not op.startswith("_")}})
"""


@pytest.mark.parametrize("calls", [1, 2])
def test_a_first_call_whose_graph_comes_with_a_later_collection_keeps_its_nodes_and_the_log_stays_complete(python,
                                                                                                          calls):
    # its first call, while another thread's call is in flight, finds no graph; the next call's collection
    # (or the block's last, at its end) brings it
    out = python(LATE_GRAPH, args=["later", str(calls)])
    assert {key: out[key] for key in ("ops", "complete", "reason", "warned")} == \
        {"ops": ["Sub"], "complete": True, "reason": "", "warned": []}
    assert out["runs"] == ({"Sub": 1} if calls == 2 else {})  # counted from the call whose collection brought them


def test_a_first_calls_late_graph_is_never_another_functions_and_comes_at_the_end_of_the_block(python):
    # f's graphs come with the read after h's first call: they wait for the capture's end, and none of h's
    # calls counts f's nodes as its own
    out = python(LATE_GRAPH, args=["other", "1"])
    assert {key: out[key] for key in ("ops", "complete", "reason", "warned")} == \
        {"ops": ["MatMul", "Sub"], "complete": True, "reason": "", "warned": []}
    assert out["runs"] == {"MatMul": 3}


def test_a_first_call_whose_graph_never_comes_makes_the_log_incomplete_at_the_end_of_the_block(python):
    out = python(LATE_GRAPH, args=["never", "1"])
    assert out["ops"] == [] and not out["complete"]
    assert out["reason"].startswith("TensorFlow placed functions of several threads at the same time, and its graph "
                                    "collection gave the graphs of __inference_<lambda>_")
    assert out["warned"] == ["tfplace: incomplete placement log: " + out["reason"]]

def test_a_capture_closing_while_another_thread_is_in_its_first_call_leaves_that_call_its_function(python):
    out = python("""
        import threading, tensorflow as tf, tfplace
        from tensorflow.python.framework import op_callbacks
        x = tf.ones((4, 4))
        placed, closed = threading.Event(), threading.Event()

        def pause(op_type, inputs, attrs, outputs, op_name=None, graph=None):
            name = op_type.decode() if isinstance(op_type, bytes) else op_type
            if graph is None and name.startswith("__inference_g"):
                placed.set()      # g ran: TensorFlow's collection holds its graph, the capture's callback comes next
                closed.wait(30)   # the other thread's capture closes meanwhile

        @tf.function
        def g(a):
            return tf.matmul(a, a)

        found = {}

        def second():
            op_callbacks.add_op_callback(pause)   # runs before the capture's own callback
            with tfplace.capture_placement() as log:
                g(x)
            found["g"] = (sorted({r.op for r in log.records if r.kind == "place"}), log.complete, log.incomplete_reason)

        with tfplace.capture_placement() as first:
            x * 2.0
            thread = threading.Thread(target=second)
            thread.start()
            placed.wait(30)
        closed.set()
        thread.join()
        report({"g": found["g"], "first": sorted({r.op for r in first.records})})
    """)
    ops, complete, reason = out["g"]
    assert complete, reason
    assert "MatMul" in ops
    assert out["first"] == ["Mul"]  # the closing capture did not take g's nodes
