"""Programs of TensorFlow's ecosystem libraries recorded as TensorFlow logs them: the `Cast` TensorFlow's C++
runs when it converts a Python value, a library's own ops (`tf.load_op_library`) at the user's line, and the copy
of a host-memory shape computed on another device. The conformance suite checks the same against TensorFlow's log
(`tests/conformance/programs/zh_text_and_conversions.py`, `zl_host_memory_inputs.py`)."""

import pytest

from conftest import line_of, result_of, run_python

pytestmark = pytest.mark.placement


def test_a_python_value_converted_to_a_dtype_it_is_not_made_in_is_a_cast_on_the_host():
    code = """
        import numpy as np
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)
        with tfplace.capture_placement(sources=True) as log:
            a = tf.constant([1, 2, 3], dtype=tf.uint8)   # made as int32, then cast
            with tf.device("/CPU:1"):
                b = tf.convert_to_tensor([0.5], dtype=tf.bfloat16)  # cast on the host, then copied to CPU:1
            c = tf.constant(np.array([1, 2]), dtype=tf.uint8)  # NumPy converts it: no Cast
            d = tf.constant([1, 2], dtype=tf.int64)  # made so directly: no Cast
            e = tf.Variable(7, dtype=tf.int8)
        report([[r.op, r.device, r.source, dict(r.dtypes)] for r in log.records if r.op == "Cast"])
    """
    out = result_of(run_python(code))
    assert out == [["Cast", "/device:CPU:0", line_of(code, "a = "), {"SrcT": "int32", "DstT": "uint8"}],
                   ["Cast", "/device:CPU:0", line_of(code, "b = "), {"SrcT": "float32", "DstT": "bfloat16"}],
                   ["Cast", "/device:CPU:0", line_of(code, "e = "), {"SrcT": "int32", "DstT": "int8"}]]


def test_a_librarys_own_op_has_the_users_line_that_called_the_library_not_its_wrapper_nor_the_librarys_code():
    pytest.importorskip("tensorflow_text", reason="pip install --no-deps tensorflow-text (.ci/run installs it)")
    code = """
        import tensorflow as tf, tfplace
        import tensorflow_text as text
        with tfplace.capture_placement(sources=True) as log:
            tokens = text.WhitespaceTokenizer().tokenize(["hello world"])
        report(sorted({r.source for r in log.records if r.op.startswith("TFText>")}))
    """
    # neither the op wrapper TensorFlow generates (<string>) nor tensorflow-text's own file: the user's call
    assert result_of(run_python(code)) == [line_of(code, "tokens = ")]


def test_a_shape_computed_on_another_device_is_copied_to_the_host_and_a_transfer_guard_stops_there():
    code = """
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)
        with tf.device("/CPU:1"):
            y = tf.ones((4, 6))
            shape = tf.constant([6, 4]) + 0          # int32 on CPU:1
            seed = tf.constant([1, 2], tf.int64) + 0
        with tfplace.capture_placement(sources=True) as log:
            with tf.device("/CPU:1"):
                tf.reshape(y, shape)                 # Reshape's shape is wanted on the host
                tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)   # an int64 host-memory seed: read where it is
        copies = [[c.op, c.input_index, c.from_device, c.to_device, c.source] for c in log.copies]
        try:
            with tfplace.transfer_guard("disallow"), tf.device("/CPU:1"):
                tf.reshape(y, shape)
            stopped = ""
        except tfplace.ImplicitCopyError as error:
            stopped = str(error)
        report([copies, stopped])
    """
    copies, stopped = result_of(run_python(code))
    assert copies == [["Reshape", 1, "/device:CPU:1", "/device:CPU:0", line_of(code, "tf.reshape(y, shape)  ")]]
    assert stopped.startswith("implicit copy at ") and "Reshape input #1 lives on /device:CPU:1" in stopped, stopped
