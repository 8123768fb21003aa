"""Programs of TensorFlow's ecosystem libraries recorded as TensorFlow logs them: the `Cast` TensorFlow's C++
runs when it converts a Python value, and a library's own ops (`tf.load_op_library`) at the user's line. The
conformance suite checks the same against TensorFlow's log (`tests/conformance/programs/zh_text_and_conversions.py`)."""

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


def test_a_librarys_own_op_has_the_line_that_called_it_not_its_generated_wrapper():
    pytest.importorskip("tensorflow_text", reason="pip install --no-deps tensorflow-text (.ci/run installs it)")
    out = result_of(run_python("""
        import tensorflow as tf, tfplace
        import tensorflow_text as text
        with tfplace.capture_placement(sources=True) as log:
            tokens = text.WhitespaceTokenizer().tokenize(["hello world"])
        report(sorted({r.source.rpartition("/")[2] for r in log.records if r.op.startswith("TFText>")}))
    """))
    assert len(out) == 1 and out[0].startswith("whitespace_tokenizer.py:")  # tensorflow-text's call, not <string>
