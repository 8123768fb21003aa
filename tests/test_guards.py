"""transfer_guard() and device_guard(): stop at an implicit copy or a misplaced op, naming the line."""

import pytest

from conftest import TWO_CPUS_XY as SETUP, line_of

pytestmark = pytest.mark.placement  # reads where ops ran: CI runs it again with oneDNN off

DISALLOW = SETUP + """
    try:
        with tfplace.transfer_guard():
            with tf.device("CPU:1"):
                z = x + y  # implicit
        error = None
    except tfplace.ImplicitCopyError as err:
        error = [str(err), isinstance(err, RuntimeError), isinstance(err, tfplace.Error)]
    with tfplace.transfer_guard("disallow"):
        with tf.device("CPU:1"):
            fine = tfplace.to_device(x, "CPU:1") + y
    report({"error": error, "fine": fine.numpy().tolist()})
"""


def test_disallow_raises_at_the_implicit_copy_and_explicit_copies_pass(python):
    out = python(DISALLOW)
    message, is_runtime_error, is_tfplace_error = out["error"]
    assert is_runtime_error and is_tfplace_error
    assert message.startswith(f"implicit copy at {line_of(DISALLOW, '# implicit')}: AddV2 input #0 lives on "
                              "/device:CPU:0, but AddV2 runs on /device:CPU:1")
    assert "tfplace.to_device(x, '/device:CPU:1')" in message
    assert out["fine"] == [[2.0, 2.0], [2.0, 2.0]]


def test_log_level_logs_each_copy_and_goes_on(python):
    code = SETUP + """
    import io, logging as std_logging
    from absl import logging
    stream = io.StringIO()
    handler = std_logging.StreamHandler(stream)
    logging.get_absl_logger().addHandler(handler)
    with tfplace.transfer_guard("log"):
        with tf.device("CPU:1"):
            a = x + y  # first copy
            b = x * y  # second copy
            c = tf.identity(x)  # explicit, under the scope: no copy to log
        d = tf.identity(y)  # third copy: under no scope, the identity runs on CPU:0
    logging.get_absl_logger().removeHandler(handler)
    report({"lines": stream.getvalue().splitlines(), "a": a.numpy().tolist(), "b": b.numpy().tolist()})
    """
    out = python(code)
    assert out["a"] == [[2.0, 2.0], [2.0, 2.0]] and out["b"] == [[1.0, 1.0], [1.0, 1.0]]
    assert len(out["lines"]) == 3
    assert out["lines"][0].startswith(
        f"tfplace.transfer_guard: implicit copy at {line_of(code, '# first copy')}: AddV2")
    assert out["lines"][1].startswith(f"tfplace.transfer_guard: implicit copy at {line_of(code, '# second copy')}: Mul")
    assert out["lines"][2].startswith(f"tfplace.transfer_guard: implicit copy at {line_of(code, '# third copy')}: "
                                      "Identity input #0 lives on /device:CPU:1, but Identity runs on /device:CPU:0")


def test_a_capture_inside_a_guard_records_every_op_and_the_guard_keeps_watching(python):
    out = python(SETUP + """
    from tensorflow.python.framework import op_callbacks
    from tensorflow.python.eager import context
    def held():
        return len(context.context().op_callbacks)
    events = []
    with tfplace.transfer_guard():
        events.append(("guard alone", held()))
        with tfplace.capture_placement() as log:
            events.append(("guard and capture", held()))
            x * 2.0
            with tf.device("CPU:1"):
                tfplace.to_device(x, "CPU:1") + 1.0
        events.append(("capture closed", held()))
        for where in ("inside", "after"):
            try:
                with tf.device("CPU:1"):
                    x + y  # a copy
            except tfplace.ImplicitCopyError:
                events.append(("copy stopped", where))
            if where == "inside":
                with tfplace.capture_placement() as inner:
                    pass
    events.append(("no guard", held()))
    report({"events": events, "ops": [(r.op, r.device) for r in log.records if r.kind == "execute"]})
    """)
    assert out["events"] == [["guard alone", 1], ["guard and capture", 1], ["capture closed", 1],
                             ["copy stopped", "inside"], ["copy stopped", "after"], ["no guard", 0]]
    assert ["Mul", "/device:CPU:0"] in out["ops"] and ["AddV2", "/device:CPU:1"] in out["ops"]


def test_nested_allow_and_restoring_the_outer_level(python):
    out = python(SETUP + """
    from tensorflow.python.eager import context
    events = []
    with tfplace.transfer_guard("disallow"):
        with tfplace.transfer_guard("allow"):
            with tf.device("CPU:1"):
                x + y
        events.append("allowed inside")
        try:
            with tfplace.transfer_guard("allow"):
                raise KeyError("leave by exception")
        except KeyError:
            pass
        try:
            with tf.device("CPU:1"):
                x + y
        except tfplace.ImplicitCopyError:
            events.append("outer disallows again")
    with tf.device("CPU:1"):
        x + y
    events.append("no guard after")
    try:
        tfplace.transfer_guard("sometimes").__enter__()
    except tfplace.ConfigurationError as err:
        events.append(str(err))
    report({"events": events, "callbacks": len(context.context().op_callbacks)})
    """)
    assert out["events"][:3] == ["allowed inside", "outer disallows again", "no guard after"]
    assert out["events"][3] == ("transfer_guard received level='sometimes' (from argument level): "
                                "allowed are 'disallow', 'log', 'allow'")
    assert out["callbacks"] == 0


DEVICE = SETUP + """
    outcome = {}
    with tfplace.device_guard("CPU:1"):
        with tf.device("CPU:1"):
            outcome["ok"] = (y * 2).device
    try:
        with tfplace.device_guard("CPU:1"):
            x * 2  # off the guarded device
    except tfplace.PlacementError as err:
        outcome["error"] = [str(err), isinstance(err, RuntimeError)]
    with tfplace.device_guard("/device:CPU:1", allow_ops=("Mul",)):
        x * 2
        outcome["allowed"] = True
    for bad in ("CPU:7", "cpu one"):
        try:
            with tfplace.device_guard(bad):
                outcome["ran"] = True
        except ValueError as err:
            outcome[bad] = [type(err).__name__, str(err)]
    report(outcome)
"""


def test_device_guard(python):
    out = python(DEVICE)
    assert out["ok"].endswith("device:CPU:1") and out["allowed"] is True and "ran" not in out
    message, is_runtime_error = out["error"]
    assert is_runtime_error
    assert message.startswith(f"Mul ran on /device:CPU:0 at {line_of(DEVICE, '# off the guarded')} "
                              "(asked for: no device (TensorFlow chose)), but device_guard('/device:CPU:1')")
    assert "allow_ops=('Mul',)" in message
    assert out["CPU:7"] == ["DeviceNotFoundError", "device CPU:7 (from tfplace.device_guard's argument device) "
                                                   "does not exist: this process has /device:CPU:0, /device:CPU:1"]
    assert (out["cpu one"][0] == "DeviceSpecError"
            and "(from tfplace.device_guard's argument device)" in out["cpu one"][1])
