"""`parse_oom`: TensorFlow's out-of-memory messages as users met them (in GitHub threads), the forms each
release writes, and a real `ResourceExhaustedError` from TensorFlow's CPU BFC allocator given 64 MiB."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import PRELUDE, result_of
from tfplace.placement.records._memory_figures import OutOfMemory
from tfplace.placement.records._oom import parse_oom

HINT = ("Hint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom"
        " to RunOptions for current allocation info.")

# The messages of GitHub threads, as their users pasted them (Python traceback lines shortened where marked).
REAL = {
    # tensorflow/tensorflow#47820 (TF 2.4, eager): the title
    "tensorflow/tensorflow#47820": (
        "OOM when allocating tensor with shape[3,3,512,1024] and type float on "
        "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc [Op:Mul]",
        OutOfMemory("/device:GPU:0", 3 * 3 * 512 * 1024 * 4, "float32", (3, 3, 512, 1024), "Mul", "", "GPU_0_bfc")),
    # hotosm/fAIr#59 (TF 2.9+, Keras fit): a Python traceback (library and user frames) before the message
    "hotosm/fAIr#59": (
        'Traceback (most recent call last):\n'
        '  File "/app/core/tasks.py", line 58, in train_model\n'
        '    final_accuracy, final_model_path = train(\n'
        '  File "/usr/local/lib/python3.8/dist-packages/keras/utils/traceback_utils.py", line 67, in error_handler\n'
        '    raise e.with_traceback(filtered_tb) from None\n'
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: Graph execution error:\n\n"
        "OOM when allocating tensor with shape[16,64,64,64] and type float on "
        "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n",
        OutOfMemory("/device:GPU:0", 16 * 64 * 64 * 64 * 4, "float32", (16, 64, 64, 64), "", "", "GPU_0_bfc")),
    # Azure/MachineLearningNotebooks#880 (TF 1.x session): two root errors, the node of the first
    "Azure/MachineLearningNotebooks#880": (
        "ResourceExhaustedError: 2 root error(s) found.\n"
        "  (0) Resource exhausted: OOM when allocating tensor with shape[16,112,112,147] and type float on "
        "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
        f"\t [[{{{{node resnet_v1_50/conv1/ExtractImagePatches}}}}]]\n{HINT}\n\n\t [[Mean_1/_1047]]\n{HINT}\n\n"
        "  (1) Resource exhausted: OOM when allocating tensor with shape[16,112,112,147] and type float on "
        "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n",
        OutOfMemory("/device:GPU:0", 16 * 112 * 112 * 147 * 4, "float32", (16, 112, 112, 147),
                   "resnet_v1_50/conv1/ExtractImagePatches", "", "GPU_0_bfc")),
    # byaman14/SSDU#3 (TF 1.15): complex64
    "byaman14/SSDU#3": (
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
        "shape[2,320,160] and type complex64 on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
        "\t [[{{node SSDUModel/Weights/mapCG_8/while/CGloop/CGIters/EhE/strided_slice_3}}]]\n" + HINT,
        OutOfMemory("/device:GPU:0", 2 * 320 * 160 * 8, "complex64", (2, 320, 160),
                   "SSDUModel/Weights/mapCG_8/while/CGloop/CGIters/EhE/strided_slice_3", "", "GPU_0_bfc")),
    # mozilla/DeepSpeech#1940 (TF 1.12): `[[node N (defined at FILE:LINE)  = Op[...]`
    "mozilla/DeepSpeech#1940": (
        "ResourceExhaustedError (see above for traceback): OOM when allocating tensor with shape[2048,436631] and "
        "type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
        '\t [[node h6/Adam_1/Assign (defined at ./DeepSpeech.py:451)  = Assign[T=DT_FLOAT, _class=["lo',
        OutOfMemory("/device:GPU:0", 2048 * 436631 * 4, "float32", (2048, 436631), "h6/Adam_1/Assign",
                   "./DeepSpeech.py:451", "GPU_0_bfc")),
    # tensorflow/tensorflow#136 (a 2020 comment, TF 1.14 on Windows)
    "tensorflow/tensorflow#136": (
        "ResourceExhaustedError (see above for traceback): OOM when allocating tensor with shape[128,3,8,128,8,128] "
        "and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
        "         [[node GPU0/D_loss/G/G_synthesis/cond/cond_1/Upscale2D_2/Tile (defined at "
        "D:\\jiateng\\project\\stylegan\\stylegan\\training\\networks_stylegan.py:66) ]]\n" + HINT,
        OutOfMemory("/device:GPU:0", 128 * 3 * 8 * 128 * 8 * 128 * 4, "float32", (128, 3, 8, 128, 8, 128),
                   "GPU0/D_loss/G/G_synthesis/cond/cond_1/Upscale2D_2/Tile",
                   "D:\\jiateng\\project\\stylegan\\stylegan\\training\\networks_stylegan.py:66", "GPU_0_bfc")),
    # GKalliatakis/Keras-VGG16-places365#19 (eager, CPU): `[Op:Add] name: ...`, allocator "cpu"
    "GKalliatakis/Keras-VGG16-places365#19": (
        "OOM when allocating tensor with shape[25088,4096] and type float on "
        "/job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu [Op:Add] name: fc1_233/random_uniform/",
        OutOfMemory("/device:CPU:0", 25088 * 4096 * 4, "float32", (25088, 4096), "Add", "", "cpu")),
    # kamalkraj/BERT-NER-TF#20 (eager)
    "kamalkraj/BERT-NER-TF#20": (
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
        "shape[128,768] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc "
        "[Op:StridedSliceGrad]",
        OutOfMemory("/device:GPU:0", 128 * 768 * 4, "float32", (128, 768), "StridedSliceGrad", "", "GPU_0_bfc")),
    # IndicoDataSolutions/finetune#339: the third GPU
    "IndicoDataSolutions/finetune#339": (
        "ResourceExhaustedError: OOM when allocating tensor with shape[16,12,512,512] and type float on "
        "/job:localhost/replica:0/task:0/device:GPU:2 by allocator GPU_2_bfc",
        OutOfMemory("/device:GPU:2", 16 * 12 * 512 * 512 * 4, "float32", (16, 12, 512, 512), "", "", "GPU_2_bfc")),
    # dBeker/Faster-RCNN-TensorFlow-Python3#110 (TF 1.x): `[[Node: N = Op[...]`
    "dBeker/Faster-RCNN-TensorFlow-Python3#110": (
        "ResourceExhaustedError: OOM when allocating tensor with shape[25088,4096] and type float on "
        "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
        "\t [[Node: vgg_16/fc6/weights/Initializer/random_uniform/RandomUniform = RandomUniform[T=DT_INT32, "
        '_class=["loc:@vgg_16/fc6/weights/Assign"], dtype=DT_FLOAT, seed=3, seed2=466, '
        '_device="/job:localhost/replica:0/task:0/device:GPU:0"](vgg_16/fc6/weights/Initializer/random_uniform/'
        "shape)]]\n" + HINT,
        OutOfMemory("/device:GPU:0", 25088 * 4096 * 4, "float32", (25088, 4096),
                   "vgg_16/fc6/weights/Initializer/random_uniform/RandomUniform", "", "GPU_0_bfc")),
    # lc222/seq2seq_chatbot_new#19 (older TF): `tensor of shape [4096]`, no device
    "lc222/seq2seq_chatbot_new#19": (
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor of shape [4096] "
        "and type float",
        OutOfMemory("", 4096 * 4, "float32", (4096,), "", "", "")),
    # tensorflow/tensorflow#1355 (TF 0.x): no shape at all
    "tensorflow/tensorflow#1355": (
        "W tensorflow/core/common_runtime/executor.cc:1076] 0x18ef02bb0 Compute status: Resource exhausted: "
        "OOM when allocating tensor with shape\n"
        '\t [[Node: sub_2518 = Sub[T=DT_FLOAT, _device="/job:localhost/replica:0/task:0/gpu:0"](sub_2518/x, '
        "Variable_1955/read)]]",
        OutOfMemory("", 0, "", (), "sub_2518", "", "")),
    # NVIDIA/DeepLearningExamples#405: an XLA cluster's allocation
    "NVIDIA/DeepLearningExamples#405": (
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: 2 root error(s) found.\n"
        "  (0) Resource exhausted: Out of memory while trying to allocate 68852648264 bytes.\n"
        "         [[{{node cluster_0_1/xla_run}}]]\n" + HINT,
        OutOfMemory("", 68852648264, "", (), "cluster_0_1/xla_run", "", "")),
    # qurator-spk/eynollah#80: the second root error is the OOM
    "qurator-spk/eynollah#80": (
        f"{HINT}\n\n     [[activation_56_5/truediv/_17093]]\n{HINT}\n\n"
        "  (1) Resource exhausted: OOM when allocating tensor with shape[1,896,896,67] and type float on "
        "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
        f"     [[{{{{node concatenate_5_5/concat}}}}]]\n{HINT}\n\n0 successful operations.\n0 derived errors ignored.",
        OutOfMemory("/device:GPU:0", 896 * 896 * 67 * 4, "float32", (1, 896, 896, 67), "concatenate_5_5/concat", "",
                   "GPU_0_bfc")),
}


@pytest.mark.parametrize("thread", REAL)
def test_messages_from_github_threads(thread):
    message, expected = REAL[thread]
    assert parse_oom(message) == expected


def test_the_cpu_bfc_allocators_sentence_alone():
    oom = parse_oom("OOM when allocating tensor with shape[65536,1024] and type float on "
                    "/job:localhost/replica:0/task:0/device:CPU:0 by allocator bfc_cpu_allocator_for_gpu")
    assert oom == OutOfMemory("/device:CPU:0", 65536 * 1024 * 4, "float32", (65536, 1024), "", "",
                             "bfc_cpu_allocator_for_gpu")


def test_tf2_function_form_names_the_node_not_the_function():
    oom = parse_oom("{{function_node __inference_train_function_1234}} OOM when allocating tensor with "
                    "shape[32,64,256,256] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator "
                    f"GPU_0_bfc\n\t [[{{{{node model/conv2d/Conv2D}}}}]]\n{HINT} [Op:__inference_train_function_1234]")
    assert oom == OutOfMemory("/device:GPU:0", 32 * 64 * 256 * 256 * 4, "float32", (32, 64, 256, 256),
                             "model/conv2d/Conv2D", "", "GPU_0_bfc")


TF_2_9 = """\
Graph execution error:

Detected at node 'model/conv/Relu' defined at (most recent call last):
    File "train.py", line 15, in <module>
      model.fit(x, y, batch_size=512)
    File "/usr/lib/python3/site-packages/keras/utils/traceback_utils.py", line 64, in error_handler
      return fn(*args, **kwargs)
    File "/usr/lib/python3/site-packages/keras/engine/training.py", line 1409, in fit
      tmp_logs = self.train_function(iterator)
Node: 'model/conv/Relu'
OOM when allocating tensor with shape[512,64,128,128] and type half on \
/job:localhost/replica:0/task:0/device:GPU:1 by allocator GPU_1_bfc
\t [[{{node model/conv/Relu}}]]
""" + HINT + "\n [Op:__inference_train_function_1234]"


def test_tf_2_9_form_reads_the_users_frame_of_the_quoted_node():
    oom = parse_oom(TF_2_9)
    assert oom == OutOfMemory("/device:GPU:1", 512 * 64 * 128 * 128 * 2, "float16", (512, 64, 128, 128),
                             "model/conv/Relu", "train.py:15", "GPU_1_bfc")


# Captured from TensorFlow 2.21 here: `str(error)` of the subprocess test below, run from /tmp/oomx/real.py.
TF_2_21 = """\
Graph execution error:

Detected at node Tile defined at (most recent call last):
  File "/tmp/oomx/real.py", line 8, in <module>

  File "/tmp/oomx/real.py", line 5, in grow

OOM when allocating tensor with shape[65536,1024] and type float on \
/job:localhost/replica:0/task:0/device:CPU:0 by allocator bfc_cpu_allocator_for_gpu
\t [[{{node Tile}}]]
Hint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom to \
RunOptions for current allocation info. This isn't available when running in Eager mode.
 [Op:__inference_grow_8]"""


def test_tf_2_16_form_has_no_quotes_and_the_last_frame_is_the_users():
    oom = parse_oom(TF_2_21)
    assert oom == OutOfMemory("/device:CPU:0", 65536 * 1024 * 4, "float32", (65536, 1024), "Tile",
                             "/tmp/oomx/real.py:5", "bfc_cpu_allocator_for_gpu")


def test_of_several_detected_nodes_the_traceback_of_the_failing_one():
    other = 'Detected at node Mul defined at (most recent call last):\n  File "other.py", line 3, in f\n\n'
    oom = parse_oom("Graph execution error:\n\n" + other + TF_2_21.split("\n\n", 1)[1])
    assert (oom.op, oom.source) == ("Tile", "/tmp/oomx/real.py:5")


def test_library_frames_are_skipped_unless_all_are_library_frames():
    frames = ('  File "C:\\Users\\me\\train.py", line 9, in <module>\n'
              '  File "C:\\Python311\\Lib\\site-packages\\keras\\src\\layers\\core\\dense.py", line 144, in call\n'
              '  File "/usr/lib/python3.11/threading.py", line 1002, in run\n')
    message = ("Detected at node dense/MatMul defined at (most recent call last):\n{}\nOOM when allocating tensor "
               "with shape[8,8] and type float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu")
    assert parse_oom(message.format(frames)).source == "C:\\Users\\me\\train.py:9"
    assert parse_oom(message.format(frames.split("\n", 1)[1])).source == "/usr/lib/python3.11/threading.py:1002"


@pytest.mark.parametrize("op, tail", [("RandomStandardNormal", " [Op:RandomStandardNormal]"),
                                      ("AddV2", " [Op:AddV2] name: "), ("AddV2", " [Op:AddV2] name: add/")])
def test_eager_ops(op, tail):
    oom = parse_oom("{{function_node __wrapped__" + op + "_device_/job:localhost/replica:0/task:0/device:GPU:0}} "
                    "OOM when allocating tensor with shape[1024,1024,1024] and type float on "
                    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc" + tail)
    assert oom == OutOfMemory("/device:GPU:0", 1024 ** 3 * 4, "float32", (1024, 1024, 1024), op, "", "GPU_0_bfc")


@pytest.mark.parametrize("word, dtype, size", [
    ("float", "float32", 4), ("double", "float64", 8), ("half", "float16", 2), ("bfloat16", "bfloat16", 2),
    ("int8", "int8", 1), ("int16", "int16", 2), ("int32", "int32", 4), ("int64", "int64", 8), ("uint8", "uint8", 1),
    ("uint16", "uint16", 2), ("uint32", "uint32", 4), ("uint64", "uint64", 8), ("bool", "bool", 1),
    ("complex64", "complex64", 8), ("complex128", "complex128", 16), ("string", "string", 0),
    ("float_ref", "float32", 4), ("float4_e2m1fn", "", 0), ("resource", "", 0)])
def test_dtype_words_and_their_sizes(word, dtype, size):
    oom = parse_oom(f"OOM when allocating tensor with shape[3,5] and type {word} on "
                    "/job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu")
    assert (oom.dtype, oom.requested_bytes, oom.shape) == (dtype, 15 * size, (3, 5))


def test_a_scalar_and_a_temporary_and_an_unreadable_device():
    scalar = parse_oom("OOM when allocating tensor with shape[] and type int64 on "
                       "/job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu [Op:Const]")
    assert (scalar.shape, scalar.requested_bytes, scalar.op) == ((), 8, "Const")
    temporary = parse_oom("OOM when allocating temporary tensor with shape[4096,1024]")
    assert temporary == OutOfMemory("", 0, "", (4096, 1024), "", "", "")
    # iperov/DeepFaceLab#683, as its user typed it: the device cut short
    cut = parse_oom("Error: OOM when allocating tensor with shape [3,3,512,2048] and type float on /job:localhost\n"
                    "[[{{node training/adam/mul_73}} Mul[T=DT_float]")
    assert cut == OutOfMemory("", 3 * 3 * 512 * 2048 * 4, "float32", (3, 3, 512, 2048), "training/adam/mul_73", "", "")


@pytest.mark.parametrize("message", ["", "Incompatible shapes: [2] vs. [3] [Op:AddV2]",
                                     "Graph execution error:\n\nDetected at node Tile defined at (most recent call "
                                     'last):\n  File "a.py", line 1, in <module>\n'])
def test_other_errors_are_none(message):
    assert parse_oom(message) is None


PROGRAM = """\
import tensorflow as tf

@tf.function
def grow():
    return tf.tile(tf.ones((4096, 1024)), [16, 1])  # the graph's allocation

errors = {}
try:
    grow()
except tf.errors.ResourceExhaustedError as error:
    errors["graph"] = str(error)
try:
    tf.zeros((8192, 4096))
except tf.errors.ResourceExhaustedError as error:
    errors["eager"] = str(error)
report(errors)
"""


@pytest.mark.slow  # each allocation TensorFlow's BFC allocator refuses, it retries for 10 s first
@pytest.mark.parametrize("onednn", ["1", "0"])
def test_real_errors_of_the_cpu_bfc_allocator(tmp_path, onednn):
    path = tmp_path / "oom_program.py"
    path.write_text(PRELUDE + textwrap.dedent(PROGRAM), encoding="utf-8")
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "the graph's allocation" in text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFPLACE_", "TF_CPP"))}
    env.update(TF_CPU_ALLOCATOR_USE_BFC="1", TF_CPU_BFC_MEM_LIMIT_IN_MB="64", TF_ENABLE_ONEDNN_OPTS=onednn)
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=240)
    errors = result_of(done)
    graph, eager = parse_oom(errors["graph"]), parse_oom(errors["eager"])
    assert graph is not None and eager is not None, errors
    assert graph._replace(source="") == OutOfMemory("/device:CPU:0", 65536 * 1024 * 4, "float32", (65536, 1024),
                                                   "Tile", "", "bfc_cpu_allocator_for_gpu"), errors["graph"]
    file, _, number = graph.source.rpartition(":")
    assert (Path(file).name, int(number)) == ("oom_program.py", line), errors["graph"]
    assert eager == OutOfMemory("/device:CPU:0", 8192 * 4096 * 4, "float32", (8192, 4096), "Fill", "",
                               "bfc_cpu_allocator_for_gpu"), errors["eager"]
