"""`tfplace trace` runs real scripts as Python does: signals, threads, forks, stdout and the working directory."""

import json
import os
import signal
import subprocess
import sys
import time
import traceback

import pytest

from tfplace import _files

pytestmark = pytest.mark.placement  # reads where ops ran: CI runs it again with oneDNN off

LOOP = """\
import pathlib, tensorflow as tf
x = tf.ones((2, 2))
pathlib.Path("started").touch()
while True:
    x = tf.matmul(x, x) * 0.5   # the user's line
"""


def start_trace(*args, cwd):
    return subprocess.Popen([sys.executable, "-m", "tfplace", "trace", *args], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(path, process, seconds=120):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def records_of(data, op):
    """How many executions of `op` a `--json` trace holds (identical records may be stored once with a count)."""
    return sum(r.get("count", 1) for r in data["records"] if r["op"] == op)


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGHUP"])
def test_a_stopping_signal_reports_what_ran_writes_whole_files_and_exits_128_plus_it(tmp_path, stop):
    (tmp_path / "loop.py").write_text(LOOP)
    plot = ["--plot=out.png"] if stop == "SIGTERM" and _has_matplotlib() else []
    process = start_trace("--json=out.json", *plot, "loop.py", cwd=tmp_path)
    wait_for(tmp_path / "started", process)
    time.sleep(1)
    process.send_signal(getattr(signal, stop))
    out, err = process.communicate(timeout=120)
    assert process.returncode == 128 + getattr(signal, stop), err[-3000:]
    assert "== tfplace trace:" in out and "MatMul" in out
    assert f"to {tmp_path / 'out.json'}" in out  # the real path
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["exit_status"] == 128 + getattr(signal, stop) and records_of(data, "MatMul") > 0
    if plot:
        assert (tmp_path / "out.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["loop.py", "started", "out.json", *
                                                                 (["out.png"] if plot else [])])  # no temporary left
    # the traceback ends at the user's line, wherever the signal landed (often in tfplace's op hook)
    frames = [line for line in err.splitlines() if line.startswith("  File ")]
    # (the loop's body, or its `while` line: the jump back to it is the user's line too)
    assert frames and frames[-1].startswith(('  File "loop.py", line 5', '  File "loop.py", line 4')), err[-3000:]
    assert not any("tfplace" in frame for frame in frames), err[-3000:]
    assert err.rstrip().endswith(f"Interrupted: {stop}")


def _has_matplotlib():
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def test_an_interrupt_while_a_file_is_written_leaves_the_earlier_file_whole(tmp_path):
    path = tmp_path / "out.json"
    _files.write_whole(str(path), lambda temporary: open(temporary, "w").write('{"good": 1}'))

    def interrupted(temporary):
        with open(temporary, "w") as out:
            out.write('{"trunc')
            out.flush()
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _files.write_whole(str(path), interrupted)
    assert json.loads(path.read_text()) == {"good": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_an_interrupt_landing_in_the_op_hook_ends_its_traceback_at_the_users_line():
    import tensorflow as tf
    from tfplace.placement.taking import _callback, _hooks

    landed = {}  # a KeyboardInterrupt raised in code of tfplace's op hook module, as SIGINT's may be
    exec(compile("def on_op(record, copies):\n    raise KeyboardInterrupt\n", _hooks.__file__, "exec"), landed)

    class Interrupting:
        sources = all_threads = False
        on_op = staticmethod(landed["on_op"])

        def on_function(self, record, placed, call):
            pass

        def on_records(self, key, records):
            pass

    x = tf.ones(2)
    with pytest.raises(KeyboardInterrupt) as caught:
        with _hooks.listening(Interrupting()):
            x * 3.0  # the user's line
    last = traceback.extract_tb(caught.value.__traceback__)[-1]
    assert (last.filename, last.line) == (__file__, "x * 3.0  # the user's line")
    assert not _callback.thread_hooks()  # the op callback went with the block: the process works on
    assert float(tf.reduce_sum(x * 2.0)) == 4.0


THREADS_FORK_CHDIR = """\
import os, sys, threading, tensorflow as tf

def work():
    x = tf.ones((2, 2))
    for _ in range(100):
        x = tf.matmul(x, x)

tf.ones(1)
threading.Thread(target=work).start()   # non-daemon: Python waits for it before exiting
child = os.fork()
if child == 0:
    sys.exit(0)                          # a child ending as its parent does: no report of its own
os.waitpid(child, 0)
os.mkdir("elsewhere")
os.chdir("elsewhere")                    # as Hydra does
sys.stdout.close()
sys.exit(7)
"""


def test_threads_are_waited_for_a_fork_does_not_report_and_outputs_go_where_asked(tmp_path):
    (tmp_path / "work.py").write_text(THREADS_FORK_CHDIR)
    process = start_trace("--json=out.json", "work.py", cwd=tmp_path)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 7, err[-3000:]
    assert out.count("== tfplace trace:") == 1, out  # the report reached standard output though sys.stdout closed
    assert "MatMul 100" in out
    assert f"to {tmp_path / 'out.json'}\n" in out
    data = json.loads((tmp_path / "out.json").read_text())
    assert records_of(data, "MatMul") == 100 and data["exit_status"] == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "out.json", "work.py"]
    assert not list((tmp_path / "elsewhere").iterdir())
    assert "Traceback" not in err


PIPE = """\
import pathlib, sys, time, tensorflow as tf
tf.ones(2) * 2.0
print("first", flush=True)
sys.stdout = open("mine.txt", "w")
print("into the script's own file")
while not pathlib.Path("go").exists():
    time.sleep(0.05)
sys.exit(7)
"""


def test_a_closed_pipe_loses_the_report_not_the_json_nor_the_exit_status(tmp_path):
    (tmp_path / "pipe.py").write_text(PIPE)
    process = start_trace("--json=out.json", "pipe.py", cwd=tmp_path)
    assert process.stdout.readline() == "first\n"
    process.stdout.close()  # as `| head -1` does
    (tmp_path / "go").touch()
    err = process.stderr.read()
    assert process.wait(timeout=120) == 7, err[-3000:]
    assert "the report was not printed: standard output is closed" in err
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err[-3000:]
    assert records_of(json.loads((tmp_path / "out.json").read_text()), "Mul") == 1
    assert (tmp_path / "mine.txt").read_text() == "into the script's own file\n"  # the report is not in it


def test_one_file_for_two_outputs_is_refused_before_the_script_runs(tmp_path):
    pytest.importorskip("matplotlib")
    (tmp_path / "ran.py").write_text("open('ran.txt', 'w').close()\n")
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "--json=out.png", f"--plot={tmp_path}/out.png",
                           "ran.py"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and not (tmp_path / "ran.txt").exists()
    assert done.stderr.splitlines()[-1] == (
        f"tfplace trace: error: --json='out.png' and --plot='{tmp_path}/out.png' (from options --json and --plot) "
        f"name the same file {os.path.realpath(tmp_path / 'out.png')}: allowed are two different files, one per output")


def test_a_trace_of_a_long_eager_loop_writes_a_small_json_without_rows_of_nulls(tmp_path):
    (tmp_path / "loop.py").write_text("import tensorflow as tf\nx = tf.ones((2, 2))\nfor _ in range(20000):\n"
                                      "    x = x * 1.0\n    x = x + 0.0\n")
    done = subprocess.run([sys.executable, "-m", "tfplace", "trace", "--quiet", "--json=out.json", "loop.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = json.loads((tmp_path / "out.json").read_text())["steps"]
    assert (steps["kind"], steps["count"] + steps["warmup"], steps["steps"], steps["steps_left_out"]) == \
        ("eager-loop", 20000, [], 20000)
    assert (tmp_path / "out.json").stat().st_size < 20_000
