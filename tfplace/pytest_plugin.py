"""The tfplace pytest plugin: assert where ops ran.

Registered through the `pytest11` entry point as `tfplace`; `-p no:tfplace`
turns it off. It gives

* the fixture `placement_log`: a `capture_placement()` around the test body;
* the option `--tfplace-logical-cpus=N` and ini `tfplace_logical_cpus`:
  `configure(logical_cpus=N)` before any test starts TensorFlow;
* the marker `requires_gpu(n=1)`: skip unless n GPUs are visible;
* the fixture `placement_snapshot`: `placement_snapshot.assert_match(log)`
  compares a log's op counts per device with `__placement__/<module>/<test>.json`
  beside the test, written or refreshed with `--tfplace-update-snapshots`;
* the marker `transfer_guard(level="disallow")`: the test fails at its first
  implicit cross-device copy;
* a report header line listing the devices.

Example::

    def test_matmul_on_cpu(placement_log):
        tf.matmul(tf.ones((2, 3)), tf.ones((3, 2)))
        placement_log.assert_placed("MatMul", "CPU:0")

    @pytest.mark.transfer_guard
    def test_step_placement(placement_log, placement_snapshot):
        train_step()
        placement_snapshot.assert_match(placement_log)
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional

import pytest

if TYPE_CHECKING:  # tfplace imports TensorFlow: only when a test needs it
    from tfplace.placement_log import PlacementLog

LOGICAL_CPUS_HELP = (
    "split the host CPU into N logical TensorFlow devices (tfplace.configure(logical_cpus=N)) "
    "before any test starts TensorFlow, so multi-device tests run without GPUs"
)
REQUIRES_GPU = "requires_gpu(n=1): skip the test unless at least n GPUs (logical ones included) are visible"
TRANSFER_GUARD = ('transfer_guard(level="disallow"): fail the test at its first implicit cross-device copy '
                  "(tfplace.transfer_guard around the test body)")
UPDATE_HELP = "write or refresh the placement snapshots of placement_snapshot.assert_match() instead of comparing"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tfplace", "TensorFlow device placement (tfplace)")
    group.addoption("--tfplace-logical-cpus", default=None, metavar="N",
                    dest="tfplace_logical_cpus", help=LOGICAL_CPUS_HELP)
    group.addoption("--tfplace-update-snapshots", action="store_true", default=False,
                    dest="tfplace_update_snapshots", help=UPDATE_HELP)
    parser.addini("tfplace_logical_cpus", LOGICAL_CPUS_HELP, default=None)


def _logical_cpus(config: pytest.Config) -> Optional[int]:
    from tfplace import settings

    value = config.getoption("tfplace_logical_cpus")
    source = "option --tfplace-logical-cpus"
    if value is None:
        value, source = config.getini("tfplace_logical_cpus"), "ini tfplace_logical_cpus"
    if value in (None, ""):
        return None
    try:
        return settings.parse_text("logical_cpus", str(value), source)
    except ValueError as err:
        raise pytest.UsageError(str(err)) from None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", REQUIRES_GPU)
    config.addinivalue_line("markers", TRANSFER_GUARD)
    config.stash[_WRITTEN] = []
    count = _logical_cpus(config)
    if count is not None:
        import tfplace

        try:
            tfplace.configure(logical_cpus=count)
        except tfplace.Error as err:
            raise pytest.UsageError(f"tfplace: {err}") from None


def pytest_report_header(config: pytest.Config) -> str:
    from tfplace import tfstate

    return "tfplace devices: " + ", ".join(tfstate.logical_device_names())


def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("requires_gpu")
    if marker is None:
        return
    wanted = marker.kwargs.get("n", marker.args[0] if marker.args else 1)
    import tfplace

    have = tfplace.num_gpus()
    if have < wanted:
        pytest.skip(f"requires_gpu(n={wanted}): {have} GPU(s) visible")


_LOG = pytest.StashKey["PlacementLog"]()


@pytest.fixture
def placement_log(request: pytest.FixtureRequest) -> "PlacementLog":
    """A `tfplace.capture_placement()` around the test body; assert on it in the test."""
    from tfplace.placement_log import PlacementLog

    log = request.node.stash[_LOG] = PlacementLog()
    return log


class PlacementSnapshot:
    """Compares a placement log with the snapshot kept for one test."""

    def __init__(self, path: Path, update: bool, written: list) -> None:
        self.path = path
        self.update = update
        self._written = written

    def assert_match(self, log: "PlacementLog") -> None:
        """Raises AssertionError unless `log`'s op counts per device equal the snapshot's.

        With `--tfplace-update-snapshots`, writes the snapshot instead.
        """
        from tfplace import snapshots

        if not log.complete:
            raise AssertionError(f"an incomplete placement log cannot be compared with a snapshot: "
                                 f"{log.incomplete_reason}")
        actual = snapshots.placement(log)
        if self.update:
            snapshots.write(self.path, actual)
            self._written.append(self.path)
            return
        if not self.path.exists():
            raise AssertionError(f"no placement snapshot at {self.path}: run pytest with "
                                 "--tfplace-update-snapshots to write it, then review and commit it")
        expected = snapshots.read(self.path)
        if expected != actual:
            lines = "\n  ".join(snapshots.differences(expected, actual))
            raise AssertionError(f"placement differs from the snapshot {self.path}:\n  {lines}\n"
                                 "If the new placement is right, run pytest with --tfplace-update-snapshots.")


_WRITTEN = pytest.StashKey[list]()


@pytest.fixture
def placement_snapshot(request: pytest.FixtureRequest) -> PlacementSnapshot:
    """`placement_snapshot.assert_match(log)`: the log's placement against `__placement__/<module>/<test>.json`."""
    from tfplace import snapshots

    path = snapshots.path_for(Path(str(request.node.path)), request.node.name)
    return PlacementSnapshot(path, request.config.getoption("tfplace_update_snapshots"),
                             request.config.stash[_WRITTEN])


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: its controller prints the summary
        workeroutput["tfplace_written"] = [str(path) for path in session.config.stash[_WRITTEN]]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist, in the controller: adds the snapshots a worker wrote to the summary."""
    node.config.stash[_WRITTEN].extend(getattr(node, "workeroutput", {}).get("tfplace_written", []))


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    written = config.stash.get(_WRITTEN, [])
    if written:
        terminalreporter.write_line(f"tfplace: wrote {len(written)} placement snapshot(s)")


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Captures (placement_log) and guards (transfer_guard marker) around the test body, in its thread."""
    log = item.stash.get(_LOG, None)
    marker = item.get_closest_marker("transfer_guard")
    if log is None and marker is None:
        yield
        return
    from tfplace.capture import capture_into
    from tfplace.guards import transfer_guard

    with contextlib.ExitStack() as stack:
        if log is not None:
            stack.enter_context(capture_into(log))
        if marker is not None:
            stack.enter_context(transfer_guard(marker.kwargs.get("level", marker.args[0] if marker.args else "disallow")))
        yield
