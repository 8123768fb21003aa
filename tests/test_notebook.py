"""Notebooks: the `%%placement` cell magic and the example notebooks, run by a real IPython kernel of
this interpreter (nbclient); the HTML display and the DataFrame of a `PlacementLog`.

Each kernel starts TensorFlow: the magic's cells run in one notebook, executed once for the module.
"""

from __future__ import annotations

import html.parser
import json
import os
import re
import sys
import time

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from conftest import ROOT

from tfplace import PlacementLog, PlacementRecord

pytestmark = pytest.mark.slow  # slow tier: notebooks: a Jupyter kernel per notebook

KERNEL = "tfplace-test-python"
TIMEOUT = 300  # seconds per cell; each kernel imports TensorFlow
ANSI = re.compile(r"\x1b\[[0-9;]*m")
ONEDNN = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") != "0"  # kernels inherit it; without it no CPU allocator reports
HELD = ("device", "line", "bytes", "kind", "op (node)", "tensor", "count")  # the display's tables of held bytes


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory):
    """A kernelspec that runs this interpreter (no global kernelspec is relied on)."""
    kernels = tmp_path_factory.mktemp("kernels")
    (kernels / KERNEL).mkdir()
    (kernels / KERNEL / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "tfplace tests", "language": "python"}), encoding="utf-8")
    return kernels


def execute(nb, kernel_dir, cwd, *, allow_errors: bool = False):
    """Runs `nb` in a fresh kernel of this interpreter, in `cwd`, and returns it with its outputs."""
    manager = KernelManager(kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernel_dir)]))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFPLACE_", "TF_CPP"))}
    client = NotebookClient(nb, km=manager, timeout=TIMEOUT, allow_errors=allow_errors,
                            resources={"metadata": {"path": str(cwd)}})
    client.execute(env=env)
    return nb


def outputs(cell, output_type: str) -> list:
    return [o for o in cell.outputs if o.output_type == output_type]


def shown(cell) -> tuple[str, str]:
    """The placement a %%placement cell displayed: (text/html, text/plain)."""
    found = [o for o in outputs(cell, "display_data") if 'class="tfplace-placement"' in o.data.get("text/html", "")]
    assert len(found) == 1, cell.outputs
    return found[0].data["text/html"], found[0].data["text/plain"]


def stream(cell, name: str = "stdout") -> str:
    return "".join(o.text for o in outputs(cell, "stream") if o.name == name)


class _Tables(html.parser.HTMLParser):
    """The tables of an HTML page: each a list of rows, each a list of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self.cell).strip())
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def tables(page: str) -> list[list[list[str]]]:
    parser = _Tables()
    parser.feed(page)
    return parser.tables


def table_with(page: str, *head: str) -> list[list[str]]:
    """The display's table whose header starts with `head` (rows include the header)."""
    return next(table for table in tables(page) if table[0][:len(head)] == list(head))


TRANSFERS = ("line", "op (node in function)")  # the header of the display's table of implicit transfers


def placed(page: str) -> dict[str, set[str]]:
    """From the display's table of ops per device (headed "op", "kind", devices): op -> the devices it ran on."""
    head, *rows = next(table for table in tables(page) if table[0][:2] == ["op", "kind"])
    found: dict[str, set[str]] = {}
    for row in rows:
        if len(row) == len(head):
            found.setdefault(row[0], set()).update(d for d, n in zip(head[2:], row[2:]) if n.isdigit())
    return found


def value_text(text: str) -> str:
    """A printed tensor with NumPy's alignment spaces removed: `[[44. 56.] [98. 128.]]`."""
    return re.sub(r"\s+", " ", re.sub(r"\[\s+", "[", text))


# --- the cell magic: one notebook, one kernel ------------------------------------------------

CELLS = {
    "load": 'import sys\n%load_ext tfplace\nprint("tensorflow" in sys.modules)',
    "configure": "import tensorflow as tf, tfplace\ntfplace.configure(logical_cpus=2)",
    "matmul": ('%%placement\nwith tf.device("CPU:1"):\n    c = tf.matmul(tf.ones((2, 3)), tf.ones((3, 2)))\n'
               'print("printed by the cell")\nc'),
    "kept": '_placement.devices_for("MatMul"), _placement.complete',
    "quiet": "%%placement\ntf.ones(2) * 2.0;",
    "copy": ('%%placement --transfer-guard=disallow\nwith tf.device("CPU:0"):\n    w = tf.ones((2, 2))\n'
             'with tf.device("CPU:1"):\n    y = tf.matmul(w, w)\nprint("not reached")'),
    "copy_kept": "[c.source for c in _placement.copies]",
    "bad_level": '%%placement --transfer-guard=nope\nprint("ran")',
    "bad_option": '%%placement --source\nprint("ran")',
    "bad_device": '%%placement --device-guard=GPU:7\nprint("ran")',
    "bad_perfetto": '%%placement --perfetto=cell.txt\nprint("ran")',
    "perfetto": ('%%placement --sources --perfetto=cell.json\nwith tf.device("CPU:0"):\n    w = tf.ones((2, 2))\n'
                 'with tf.device("CPU:1"):\n    y = tf.matmul(w, w)'),
    "perfetto_file": ('import json\nevents = json.load(open("cell.json"))["traceEvents"]\n'
                      'sorted({e["args"].get("line", "") for e in events '
                      'if e["ph"] == "X" and e["name"] == "MatMul"})'),
    "device_guard": "%%placement --device-guard=CPU:1\n\ny = tf.ones(2) * 2.0",
    "why": ('%%placement --sources\nwith tf.device("GPU:0"):\n    m = tf.ones((2, 2)) * 2.0\ntry:\n'
            "    tf.matmul(tf.ones((2, 3)), tf.ones((2, 3)))\nexcept tf.errors.InvalidArgumentError:\n"
            '    print("refused")'),
    "function": "@tf.function\ndef f(x):\n    return x * 2.0\n\nf(tf.ones(2));",
    "incomplete": "%%placement\nf(tf.ones(2))",
    "repr": "_placement",
    "timing": ('%%placement --timing\nfor device in ("CPU:0", "CPU:1"):\n    with tf.device(device):\n'
               "        for _ in range(20):\n            t = tf.matmul(tf.ones((64, 64)), tf.ones((64, 64)))"),
    "memory": '%%placement --memory --sources\nwith tf.device("CPU:1"):\n    held = tf.zeros((256, 256))',
    "oom": "%%placement --memory --sources\nkept = tf.ones((512, 512))\ntf.zeros((2**40,))",
}
FAILING = ("copy", "bad_level", "bad_option", "bad_device", "bad_perfetto", "device_guard", "oom")


def executed_once(tmp_path_factory, name: str, run) -> nbformat.NotebookNode:
    """`run()`'s notebook, executed by one pytest-xdist worker of this session and read by the others
    (the kernel and TensorFlow start once, not once per worker)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # this session's folder, common to its workers
    done, failed = shared / f"{name}.ipynb", shared / f"{name}.failed"
    try:
        os.close(os.open(shared / f"{name}.lock", os.O_CREAT | os.O_EXCL))
    except FileExistsError:  # another worker runs it
        deadline = time.monotonic() + TIMEOUT * 2
        while not done.exists() and not failed.exists():
            if time.monotonic() > deadline:
                pytest.fail(f"the worker that executes {name} did not finish in {TIMEOUT * 2} s")
            time.sleep(0.2)
        if failed.exists():
            pytest.fail(f"the worker that executes {name} failed:\n{failed.read_text(encoding='utf-8')}")
        return nbformat.read(done, as_version=4)
    try:
        nb = run()
    except BaseException as err:
        failed.write_text(f"{type(err).__name__}: {err}", encoding="utf-8")
        raise
    nbformat.write(nb, shared / f"{name}.partial")
    os.replace(shared / f"{name}.partial", done)
    return nb


@pytest.fixture(scope="module")
def magic(kernel_dir, tmp_path_factory):
    """The magic's notebook, executed: cell name -> executed cell."""
    cells = []
    for name, source in CELLS.items():
        cell = nbformat.v4.new_code_cell(source)
        if name in FAILING:
            cell.metadata["tags"] = ["raises-exception"]
        cells.append(cell)
    nb = executed_once(tmp_path_factory, "tfplace-magic", lambda: execute(
        nbformat.v4.new_notebook(cells=cells), kernel_dir, tmp_path_factory.mktemp("magic")))
    return dict(zip(CELLS, nb.cells))


def test_loading_the_extension_does_not_import_tensorflow(magic):
    assert outputs(magic["load"], "error") == []
    assert stream(magic["load"]) == "False\n"


def test_placement_shows_matmul_on_cpu1_after_the_cells_output_and_result(magic):
    cell = magic["matmul"]
    assert [o.output_type for o in cell.outputs] == ["stream", "execute_result", "display_data"]
    assert stream(cell) == "printed by the cell\n"
    assert "[[3., 3.]" in cell.outputs[1].data["text/plain"]
    page, text = shown(cell)
    assert "MatMul" in page and "/device:CPU:1" in page
    assert placed(page)["MatMul"] == {"/device:CPU:1"}
    assert text.splitlines()[0] == "PlacementLog: 3 records, 0 implicit copies, complete"
    assert re.search(r"MatMul +/device:CPU:1 +execute +1", text)


def test_the_log_is_kept_for_the_next_cell(magic):
    assert magic["kept"].outputs[0].data["text/plain"] == "(('/device:CPU:1',), True)"


def test_a_trailing_semicolon_hides_the_result_not_the_placement(magic):
    cell = magic["quiet"]
    assert outputs(cell, "execute_result") == []
    assert placed(shown(cell)[0])["Mul"] == {"/device:CPU:0"}


def test_transfer_guard_disallow_fails_the_cell_naming_its_line(magic):
    cell = magic["copy"]
    error, = outputs(cell, "error")
    number = cell.execution_count
    assert error.ename == "ImplicitCopyError"
    assert error.evalue.startswith(f"implicit copy at In[{number}]:5: MatMul input #0 lives on /device:CPU:0")
    traceback = ANSI.sub("", "\n".join(error.traceback))
    assert f"Cell In[{number}], line 5" in traceback and "y = tf.matmul(w, w)" in traceback
    assert "not reached" not in stream(cell)
    page, text = shown(cell)  # what ran until then, shown before the error
    copies = [row for row in table_with(page, *TRANSFERS) if row[:2] == [f"In[{number}]:5", "MatMul"]]
    assert copies and copies[0][3:5] == ["CPU:0", "CPU:1"], tables(page)
    assert f"In[{number}]:5  x1  16 B  MatMul input #0 CPU:0 -> CPU:1" in text
    assert cell.outputs[-1].output_type == "error"
    assert magic["copy_kept"].outputs[0].data["text/plain"] == repr([f"In[{number}]:5"] * 2)


@pytest.mark.parametrize("name, said", [
    ("bad_level", "--transfer-guard=nope is not a level"),
    ("bad_option", "unrecognized arguments: --source"),
    ("bad_device", "device GPU:7 (from tfplace.device_guard's argument device)"),
    ("bad_perfetto", "--perfetto=cell.txt does not end .json or .json.gz"),
])
def test_a_bad_option_is_one_usage_line_and_the_cell_does_not_run(magic, name, said):
    cell = magic[name]
    assert stream(cell) == ""  # print("ran") did not run
    assert outputs(cell, "display_data") == []
    line, = stream(cell, "stderr").splitlines()
    assert line.startswith(f"UsageError: %%placement received {CELLS[name].splitlines()[0][len('%%placement '):]!r}: ")
    assert said in line
    assert ("allowed: %%placement [--sources] [--timing] [--memory] [--perfetto=FILE] [--transfer-guard=LEVEL] "
            "[--device-guard=DEVICE]" in line)


def test_perfetto_writes_the_cells_timeline_with_its_lines(magic):
    number = magic["perfetto"].execution_count
    assert "tfplace: wrote the cell's timeline to cell.json (open it in ui.perfetto.dev or chrome://tracing)" in \
        stream(magic["perfetto"])
    assert magic["perfetto_file"].outputs[0].data["text/plain"] == repr([f"In[{number}]:5"])


def test_device_guard_fails_the_cell_naming_its_line(magic):
    cell = magic["device_guard"]
    error, = outputs(cell, "error")
    assert error.ename == "PlacementError"
    assert error.evalue.startswith(f"Fill ran on /device:CPU:0 at In[{cell.execution_count}]:3 ")  # after a blank line
    assert "device_guard('/device:CPU:1')" in error.evalue


def test_explanations_and_failed_ops_with_cell_lines(magic):
    cell = magic["why"]
    number = cell.execution_count
    assert stream(cell) == "refused\n"
    page, text = shown(cell)
    failed = table_with(page, "line", "op", "device", "asked for")
    why = tables(page)[-1]  # the explanations come last
    assert [f"In[{number}]:5", "MatMul", "/device:CPU:0", "–", "1"] in failed
    reasons = {(row[0], row[1], row[4]) for row in why if len(row) == 6}
    assert {(f"In[{number}]:3", "Fill", "no-device"), (f"In[{number}]:3", "Mul", "no-device")} <= reasons
    assert "Failed ops" in page and "Not where asked, and why" in page
    assert "which does not exist here" in page
    assert "  failed ops:\n    MatMul on /device:CPU:0" in text
    assert f"Mul on /device:CPU:0 (asked for /device:GPU:0): no-device at In[{number}]:3  x1" in text


def test_an_incomplete_log_says_so(magic):
    page, text = shown(magic["incomplete"])
    assert "INCOMPLETE" in page and "Incomplete log" in page
    assert "which TensorFlow placed before the block opened" in page
    assert "INCOMPLETE" in text.splitlines()[0] and "(incomplete log: the block ran function" in text


def test_timing_leads_the_display_with_each_devices_busy_time(magic):
    page, text = shown(magic["timing"])
    head, *rows = table_with(page, "device / direction", "executions", "busy", "share")
    shares = {row[0]: float(row[3].rstrip("%")) for row in rows if row[0].startswith("CPU:") and "→" not in row[0]}
    assert set(shares) == {"CPU:0", "CPU:1"} and abs(sum(shares.values()) - 100) <= 1
    assert tables(page)[0][0] == head  # the first table of the display
    lines = text.splitlines()
    assert lines[1] == "  where the time and bytes went:" and "% of all devices' busy time" in lines[2]


def test_the_kept_log_displays_as_html(magic):
    result, = outputs(magic["repr"], "execute_result")
    assert 'class="tfplace-placement"' in result.data["text/html"]
    assert result.data["text/plain"].startswith("<PlacementLog: ")


# --- the display and the DataFrame, in this process --------------------------------------------

def test_the_magic_knows_the_transfer_guard_levels_without_importing_tensorflow():
    from tfplace.placement.api import _guards
    from tfplace.integrations import _notebook

    assert _notebook._LEVELS == _guards.LEVELS


def test_repr_html_escapes_node_and_op_names():
    log = PlacementLog([
        PlacementRecord("MatMul", "model/<lambda>&dense", "/device:CPU:0", "place", requested="/device:GPU:0",
                        dtypes=(("T", "float32"),)),
        PlacementRecord("Op<T>", "", "/device:CPU:0", "failed"),
    ])
    page = log._repr_html_()
    assert "model/&lt;lambda&gt;&amp;dense" in page and "Op&lt;T&gt;" in page
    assert "<lambda>" not in page and "Op<T>" not in page
    assert "no-device" in page  # GPU:0 does not exist here
    assert str(log).splitlines()[0] == "PlacementLog: 2 records, 0 implicit copies, complete"


def test_repr_html_of_a_saved_log_counts_ops_per_device_and_function_plumbing():
    log = PlacementLog.from_text(
        "Executing op _MklMatMul in device /job:localhost/replica:0/task:0/device:CPU:1\n"
        "x: (_Arg): /job:localhost/replica:0/task:0/device:CPU:0\n"
        "y: (Mul): /job:localhost/replica:0/task:0/device:CPU:0\n")
    page = log._repr_html_()
    assert placed(page) == {"MatMul": {"/device:CPU:1"}, "Mul": {"/device:CPU:0"}}
    assert "+plumbing (Identity, Const, NoOp, arguments, results, removed nodes): 1 (_Arg 1)" in page


def test_repr_html_says_when_a_log_is_incomplete():
    log = PlacementLog([PlacementRecord("MatMul", "", "/device:CPU:0", "execute")])
    with pytest.warns(RuntimeWarning):
        log.mark_incomplete("the block ran function <f> & more")
    page = log._repr_html_()
    assert "INCOMPLETE" in page and "the block ran function &lt;f&gt; &amp; more" in page


def test_to_dataframe_has_one_row_per_record():
    log = PlacementLog.from_text(
        "Executing op MatMul in device /job:localhost/replica:0/task:0/device:CPU:0\n"
        "Executing op AddN in device /job:localhost/replica:0/task:0/device:CPU:1\n")
    log.add([PlacementRecord("Mul", "f/mul", "/device:CPU:0", "place", "cell.py:3", "/device:CPU:0",
                             (("T", "float32"),))])
    frame = log.to_dataframe()
    assert list(frame.columns) == ["op", "name", "device", "kind", "source", "requested", "dtypes", "line",
                                   "requested_by", "origin"]
    assert len(frame) == len(log) == 3
    assert frame["op"].tolist() == ["MatMul", "AddN", "Mul"]
    assert frame.iloc[2].tolist()[:7] == ["Mul", "f/mul", "/device:CPU:0", "place", "cell.py:3", "/device:CPU:0",
                                          "T=float32"]
    assert frame.iloc[1]["line"].startswith("Executing op AddN")
    assert list(PlacementLog().to_dataframe().columns) == list(frame.columns)


def test_to_dataframe_without_pandas_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'tfplace\[notebook\]'"):
        PlacementLog().to_dataframe()


# --- the example notebooks ----------------------------------------------------------------------

EXAMPLES = ROOT / "examples"


def example(name: str, kernel_dir) -> dict[str, object]:
    """The example notebook, executed: its first line -> code cell (the first cell with that line)."""
    nb = execute(nbformat.read(EXAMPLES / name, as_version=4), kernel_dir, EXAMPLES)
    found: dict[str, object] = {}
    for cell in nb.cells:
        if cell.cell_type == "code":
            found.setdefault(cell.source, cell)
    return found


def cell_with(cells: dict, text: str):
    return next(cell for source, cell in cells.items() if text in source)


@pytest.mark.parametrize("name", ["gpu_guide.ipynb", "d2l_gpus.ipynb", "d2l_multi_gpu.ipynb"])
def test_example_notebooks_are_committed_without_outputs(name):
    nb = nbformat.read(EXAMPLES / name, as_version=4)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code and all(cell.outputs == [] and cell.execution_count is None for cell in code)
    assert "tfplace.configure(logical_cpus=2)" in code[0].source and "%load_ext tfplace" in code[0].source


def test_gpu_guide_notebook_shows_the_guides_placement(kernel_dir):
    cells = example("gpu_guide.ipynb", kernel_dir)
    first = cell_with(cells, "c = tf.matmul(a, b)\nprint(c)")
    assert value_text(stream(first)) == "tf.Tensor( [[22. 28.] [49. 64.]], shape=(2, 2), dtype=float32) "
    assert placed(shown(first)[0]) == {"MatMul": {"/device:CPU:0"}}
    assert stream(cell_with(cells, "print(\"\\n\".join(_placement.guide_lines()))")) == (
        "Executing op MatMul in device /job:localhost/replica:0/task:0/device:CPU:0\n")
    missing = cell_with(cells, "/device:GPU:2")
    assert "no-device" in shown(missing)[0] and f"In[{missing.execution_count}]:6" in shown(missing)[0]

    replicated = cell_with(cells, "tf.add_n(c)")
    assert "[[44. 56.] [98. 128.]]" in value_text(stream(replicated))
    page, _ = shown(replicated)
    assert placed(page) == {"MatMul": {"/device:CPU:0", "/device:CPU:1"}, "AddN": {"/device:CPU:0"}}
    copy_rows = table_with(page, *TRANSFERS)[1:]
    assert copy_rows == [[f"In[{replicated.execution_count}]:9", "AddN", "#1", "CPU:1", "CPU:0", "1", "16 B", "16 B"]]
    assert stream(cell_with(cells, '_placement.assert_placed("AddN", "CPU:0")')).splitlines()[-1] == (
        "Executing op AddN in device /job:localhost/replica:0/task:0/device:CPU:0")

    guarded = cell_with(cells, "--transfer-guard=disallow")
    assert "[[44., 56.], [98., 128.]]" in value_text(outputs(guarded, "execute_result")[0].data["text/plain"])
    assert placed(shown(guarded)[0])["AddN"] == {"/device:CPU:0"}
    mirrored = cell_with(cells, "MirroredStrategy(")
    assert outputs(mirrored, "execute_result")[0].data["text/plain"] == "('/device:CPU:0', '/device:CPU:1')"
    # the strategy makes each replica's variables: its own machinery, counted in one line, not rows of the user's ops
    assert "VarHandleOp" not in placed(shown(mirrored)[0])
    assert "+TensorFlow&#x27;s and Keras&#x27; own machinery: " in shown(mirrored)[0]
    assert "MirroredStrategy initialises each replica" in shown(mirrored)[0]
    assert "text/html" in outputs(cell_with(cells, "_placement.to_dataframe()"), "execute_result")[0].data


def test_d2l_notebook_shows_the_chapters_placement(kernel_dir):
    cells = example("d2l_gpus.ipynb", kernel_dir)
    assert outputs(cell_with(cells, "dev0, dev1 = stand_in(0)"), "execute_result")[0].data["text/plain"] == (
        "(Device('/device:CPU:0'), Device('/device:CPU:1'))")
    assert placed(shown(cell_with(cells, "X = tf.ones((2, 3))"))[0]) == {"Fill": {"/device:CPU:0"}}
    assert placed(shown(cell_with(cells, "Y = tf.random.uniform"))[0]) == {"RandomUniform": {"/device:CPU:1"}}
    assert placed(shown(cell_with(cells, "total = Y + Z"))[0]) == {"AddV2": {"/device:CPU:1"}}
    assert outputs(cell_with(cells, "Z2 is Z"), "execute_result")[0].data["text/plain"] == "True"
    uncopied = cell_with(cells, "uncopied = X + Y")
    page, _ = shown(uncopied)
    assert table_with(page, *TRANSFERS)[1:] == [[f"In[{uncopied.execution_count}]:3", "AddV2", "#0", "CPU:0",
                                                 "CPU:1", "1", "24 B", "24 B"]]
    assert placed(shown(cell_with(cells, "net(X)"))[0])["MatMul"] == {"/device:CPU:0"}
    weights = outputs(cell_with(cells, "tfplace.devices_of(net.layers[0].weights[0])"), "execute_result")[0]
    assert weights.data["text/plain"] == ("(('/device:CPU:0', '/device:CPU:1'), ('/device:CPU:0', '/device:CPU:1'))")


def test_d2l_multi_gpu_notebook_shows_time_and_transfers_per_device(kernel_dir):
    import ast

    cells = example("d2l_multi_gpu.ipynb", kernel_dir)
    assert ast.literal_eval(outputs(cell_with(cells, "type(strategy).__name__"), "execute_result")[0]
                            .data["text/plain"]) == ("MirroredStrategy", ("/device:CPU:0", "/device:CPU:1"))
    training = cell_with(cells, "%%placement --timing")
    assert "epoch 2/2: loss" in stream(training)
    page, text = shown(training)
    assert "Where the time and bytes went" in page and "Implicit transfers, most bytes first" in page
    assert "busy" in text and "CPU:0 -> CPU:1" in text and "CPU:1 -> CPU:0" in text
    assert {"Conv2D", "Conv2DBackpropFilter"} <= set(placed(page))  # the model's compute and its gradients
    cost = ast.literal_eval(outputs(cell_with(cells, "_placement.cost().devices"), "execute_result")[0]
                            .data["text/plain"])
    assert set(cost) == {"/device:CPU:0", "/device:CPU:1"}
    assert all(executions > 0 and busy > 0 and 0 < share < 1 for executions, busy, share in cost.values())
    moved = ast.literal_eval(outputs(cell_with(cells, "_placement.transfers()[:5]"), "execute_result")[0]
                             .data["text/plain"])
    assert moved and all(count > 0 for _, _, _, count, _ in moved)


def test_memory_option_shows_each_devices_peak_and_what_it_held_with_the_cells_lines(magic):
    page, text = shown(magic["memory"])
    cell = f"In[{magic['memory'].execution_count}]"
    reached = f"Fill at {cell}:3" if ONEDNN else "–"  # without oneDNN no CPU allocator reports its allocations
    assert ["CPU:1", "256.0 KiB", reached, "256.0 KiB", "–"] in table_with(page, "device", "peak", "reached by")
    held = table_with(page, *HELD)
    assert ["CPU:1", f"{cell}:3", "256.0 KiB", "returned"] in [row[:4] for row in held]
    assert not ONEDNN or ["CPU:1", f"{cell}:3", "256.0 KiB", "returned", "Fill", "float32[256,256]", "1"] in held
    assert "not seen on CPU:1: " in page and "TF_CPU_ALLOCATOR_USE_BFC=1" in page  # what a CPU's allocator hides
    assert "Out of memory" not in page
    reached = f" (reached by Fill at {cell}:3)" if ONEDNN else ""
    assert f"  memory per device:\n    /device:CPU:1: peak 256.0 KiB{reached}, held at the end 256.0 KiB\n" \
           "      held at the peak:\n" in text
    row = f"256.0 KiB  {cell}:3  returned " + ("Fill float32[256,256]" if ONEDNN else "")
    assert any(line.strip().startswith(row) for line in text.splitlines()), text
    assert "      not seen: " in text


def test_an_out_of_memory_error_names_the_request_and_the_cells_line_of_the_largest_held_tensor(magic):
    cell = magic["oom"]
    oom = f"In[{cell.execution_count}]"
    [error] = outputs(cell, "error")
    assert error.ename == "ResourceExhaustedError"
    traceback = ANSI.sub("", "\n".join(error.traceback))
    request = (f"out of memory on /device:CPU:0: 4096.0 GiB requested for float32[1099511627776] by Fill at {oom}:3 "
               f"(allocator {'mklcpu' if ONEDNN else 'cpu'}); the device held ")
    head, largest = traceback[traceback.index("tfplace (memory=True): "):].splitlines()[:2]
    assert head.startswith(f"tfplace (memory=True): {request}") and head.endswith(", largest first:")
    held = f"1.0 MiB  {oom}:2  returned " + ("Fill float32[512,512]" if ONEDNN else "")
    assert largest.strip().startswith(held), largest  # the tensor the cell's line 2 keeps
    page, text = shown(cell)  # the display says the same, before the error
    assert f"<b>Out of memory</b> on /device:CPU:0: 4096.0 GiB requested for float32[1099511627776] by Fill at " \
           f"{oom}:3" in page
    first = table_with(page, *HELD)[1]  # the device's rows at the failure come before its peak's
    assert first[:4] == ["CPU:0", f"{oom}:2", "1.0 MiB", "returned"]
    assert f"\n    {request}" in text


def memory_log(figures):
    """A log whose `memory()` is `figures`, as a capture with `memory=True` gives it."""
    from types import SimpleNamespace

    log = PlacementLog([PlacementRecord("Fill", "", "/device:GPU:0", "execute")])
    log.set_memory(SimpleNamespace(figures=lambda: figures))
    return log


def test_the_memory_view_shows_the_largest_held_rows_growth_coverage_and_the_failed_request():
    from tfplace.placement.records._memory_figures import DeviceMemory, Growth, Held, Memory, OutOfMemory
    from tfplace.placement.shown import _display

    rows = tuple(Held(f"train.py:{10 + i}", (12 - i) * 2**20, "intermediate", "MatMul", f"model/<d{i}>&mm",
                      "float32", (512, 512 + i), 1 + i) for i in range(10))
    unseen = "allocations under 256 KiB (oneDNN's allocator mklcpu reports larger ones only)"
    figures = Memory(
        {"/device:GPU:0": DeviceMemory(sum(r.bytes for r in rows), 2**20, (), 3 * 2**20, 90 * 2**20, rows,
                                       (Growth("train.py:30", 2**20, 5),), "", "MatMul at train.py:10"),
         **{f"/device:CPU:{i}": DeviceMemory(0, 0, (), coverage=unseen) for i in (0, 1)}},
        note="peaks count what the device held at once",
        oom=OutOfMemory("/device:GPU:0", 2**30, "float32", (16384, 16384), "MatMul", "train.py:12", "GPU_0_bfc",
                        rows[:1]))
    log = memory_log(figures)
    page = log._repr_html_()
    assert ["GPU:0", "75.0 MiB", "MatMul at train.py:10", "1.0 MiB", "3.0 MiB / 90.0 MiB"] in \
        table_with(page, "device", "peak", "reached by")
    oom, held = [table for table in tables(page) if table[0] == list(HELD)]
    assert oom[1:] == [["GPU:0", "train.py:10", "12.0 MiB", "intermediate", "MatMul model/<d0>&mm", "float32[512,512]",
                        "1"]]
    assert [row[:3] for row in held[1:9]] == [["GPU:0", "train.py:10", "12.0 MiB"]] + [
        ["", f"train.py:{10 + i}", f"{12 - i}.0 MiB"] for i in range(1, 8)]  # the largest 8, most bytes first
    assert held[9] == ["… and 2 rows more (7.0 MiB; all of them: log.memory())"]
    assert "model/&lt;d0&gt;&amp;mm" in page and "<d0>" not in page
    assert "<b>Out of memory</b> on /device:GPU:0: 1.0 GiB requested for float32[16384,16384] by MatMul at " \
           "train.py:12 (allocator GPU_0_bfc); the device held 12.0 MiB, largest first:" in page
    assert "Grows step after step: GPU:0: train.py:30 keeps 1.0 MiB more per step over 5 steps" in page
    assert "not seen on CPU:0, CPU:1: allocations under 256 KiB (oneDNN&#x27;s allocator mklcpu reports" in page
    text = _display.text(log, [])
    assert "\n".join(f"  {line}" for line in figures.lines()) in text  # the text is the report's
