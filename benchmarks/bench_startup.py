"""What tfplace costs at start-up where it is not used, as ratios measured side by side.

* a one-test pytest run with the tfplace plugin installed vs the same run with `-p no:tfplace`;
* `tfplace --help` vs `python -c pass`;

each with whether TensorFlow was imported.

    python benchmarks/bench_startup.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import print_table, ratio, row

PLAIN_TEST = "import sys\n\ndef test_plain():\n    assert 'tensorflow' not in sys.modules\n"


def _run(command: list[str], cwd: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)


def _tensorflow_imported(command: list[str], cwd: str) -> bool:
    """Whether `command` imports TensorFlow (from `PYTHONPROFILEIMPORTTIME`, as `-X importtime` shows it)."""
    done = _run(command, cwd, {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    return any(line.rsplit("|", 1)[-1].strip() == "tensorflow"
               for line in done.stderr.splitlines() if line.startswith("import time:"))


def run() -> list[dict[str, str]]:
    tfplace = shutil.which("tfplace")
    help_command = [tfplace, "--help"] if tfplace else [sys.executable, "-m", "tfplace", "--help"]
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "test_plain.py").write_text(PLAIN_TEST)
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_plain.py"]
        with_plugin = _run(pytest, folder)
        pytest_ratio, pytest_c, pytest_b = ratio(lambda: _run(pytest, folder),
                                                 lambda: _run([*pytest, "-p", "no:tfplace"], folder), calls=2)
        help_ratio, help_c, help_b = ratio(lambda: _run(help_command, folder),
                                           lambda: _run([sys.executable, "-c", "pass"], folder), calls=3)
        pytest_tf = _tensorflow_imported(pytest, folder)
        help_tf = _tensorflow_imported(help_command, folder)
    plain = "its test passed" if with_plugin.returncode == 0 else "its test failed: tensorflow was in sys.modules"
    return [
        row("pytest, one plain test: plugin installed vs -p no:tfplace", f"{pytest_ratio:.2f}", "<= 1.1",
            f"{pytest_c:.2f} vs {pytest_b:.2f} s; TensorFlow imported: {'yes' if pytest_tf else 'no'}; {plain}"),
        row("tfplace --help vs python -c pass", f"{help_ratio:.2f}", "(reported)",
            f"{help_c:.2f} vs {help_b:.2f} s; TensorFlow imported: {'yes' if help_tf else 'no'}"
            + ("" if tfplace else "; run as python -m tfplace")),
    ]


if __name__ == "__main__":
    start = time.time()
    print_table(run())
    print(f"(medians of 7 alternating rounds; {time.time() - start:.0f} s)")
