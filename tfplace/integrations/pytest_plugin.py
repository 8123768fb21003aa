"""The tfplace pytest plugin: assert where ops ran.

Registered through the `pytest11` entry point as `tfplace`; `-p no:tfplace`
turns it off. It gives

* the fixture `placement_log`: a `capture_placement()` around the test body;
* the option `--tfplace-logical-cpus=N` and ini `tfplace_logical_cpus`:
  `configure(logical_cpus=N)` before any test starts TensorFlow;
* the marker `requires_gpu(n=1)`: skip unless n GPUs are visible;
* the fixture `placement_snapshot`: `placement_snapshot.assert_match(log)`
  compares a log's op counts per device with `__placement__/<module>/<test>.json`
  beside the test (one file per test item), written or refreshed with
  `--tfplace-update-snapshots`; after a run that covered a test module entirely, the
  snapshot files of that module that no test wrote or read are listed in the summary, and
  `--tfplace-update-snapshots` removes them;
* the marker `transfer_guard(level="disallow")`: the test fails at its first
  implicit cross-device copy, and when it asked for a device that does not exist;
* a report header line listing the devices, when TensorFlow is loaded.

TensorFlow is imported only by a test that uses a fixture or marker of the
plugin, or by `--tfplace-logical-cpus`: other test runs never import it.

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
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator, NoReturn, Optional, Sequence

import pytest

from tfplace.config._settings import BY_NAME  # pure Python: no TensorFlow
from tfplace.integrations._snapshots import SnapshotUse  # pure Python: no TensorFlow

if TYPE_CHECKING:  # these import TensorFlow: only when a test needs them
    from tfplace.placement.api._log import PlacementLog
    from tfplace.placement.records._records import CopyRecord, PlacementRecord

LOGICAL_CPUS_HELP = (
    "split the host CPU into N logical TensorFlow devices (tfplace.configure(logical_cpus=N)) "
    "before any test starts TensorFlow, so multi-device tests run without GPUs"
)
REQUIRES_GPU = "requires_gpu(n=1): skip the test unless at least n GPUs (logical ones included) are visible"
TRANSFER_GUARD = ('transfer_guard(level="disallow"): fail the test at its first implicit cross-device copy '
                  "(tfplace.transfer_guard around the test body), or when it asks for a device that does not exist")
UPDATE_HELP = "write or refresh the placement snapshots of placement_snapshot.assert_match() instead of comparing"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tfplace", "TensorFlow device placement (tfplace)")
    group.addoption("--tfplace-logical-cpus", default=None, metavar="N",
                    dest="tfplace_logical_cpus", help=LOGICAL_CPUS_HELP)
    group.addoption("--tfplace-update-snapshots", action="store_true", default=False,
                    dest="tfplace_update_snapshots", help=UPDATE_HELP)
    parser.addini("tfplace_logical_cpus", LOGICAL_CPUS_HELP, default=None)


def _logical_cpus(config: pytest.Config) -> Optional[int]:
    value = config.getoption("tfplace_logical_cpus")
    source = "option --tfplace-logical-cpus"
    if value is None:
        value, source = config.getini("tfplace_logical_cpus"), "ini tfplace_logical_cpus"
    if value in (None, ""):
        return None
    try:
        return BY_NAME["logical_cpus"].parse(str(value), source)
    except ValueError as err:
        raise pytest.UsageError(str(err)) from None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", REQUIRES_GPU)
    config.addinivalue_line("markers", TRANSFER_GUARD)
    config.stash[_WRITTEN] = {}
    config.stash[_USE] = SnapshotUse()
    count = _logical_cpus(config)
    if count is not None:
        from tfplace._errors import Error
        from tfplace.config._configure import configure

        try:
            configure(logical_cpus=count)
        except Error as err:
            raise pytest.UsageError(f"tfplace: {err}") from None


def pytest_report_header(config: pytest.Config) -> Optional[str]:
    if "tensorflow" not in sys.modules:  # listing devices would import it: a run that never uses it pays nothing
        return None
    from tfplace import _tensorflow

    return "tfplace devices: " + ", ".join(_tensorflow.logical_device_names())


def _marker_error(item: pytest.Item, marker: pytest.Mark, received: str, allowed: str) -> NoReturn:
    """Fails the test's setup: its marker was given arguments it does not take."""
    pytest.fail(f"{item.nodeid}: @pytest.mark.{marker.name} received {received} (from the marker's arguments): "
                f"allowed is {allowed}", pytrace=False)


def _marker_value(item: pytest.Item, marker: pytest.Mark, name: str, default: Any, allowed: str) -> Any:
    """The marker's one argument `name`, given by position or keyword, else `default`."""
    if len(marker.args) > 1 or set(marker.kwargs) - {name} or (marker.args and marker.kwargs):
        given = [repr(arg) for arg in marker.args] + [f"{key}={value!r}" for key, value in marker.kwargs.items()]
        _marker_error(item, marker, f"({', '.join(given)})", allowed)
    return marker.kwargs.get(name, marker.args[0] if marker.args else default)


def _gpus_wanted(item: pytest.Item, marker: pytest.Mark) -> int:
    """The `n` of a `requires_gpu` marker, checked."""
    allowed = "n, a whole number >= 1 (default 1), e.g. @pytest.mark.requires_gpu(n=2)"
    wanted = _marker_value(item, marker, "n", 1, allowed)
    if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 1:
        _marker_error(item, marker, f"n={wanted!r} ({type(wanted).__name__})", allowed)
    return wanted


def _guard_level(item: pytest.Item, marker: pytest.Mark) -> str:
    """The level of a `transfer_guard` marker, checked."""
    from tfplace.placement.api._guards import LEVELS

    allowed = "level, one of " + ", ".join(repr(level) for level in LEVELS) + " (default 'disallow')"
    level = _marker_value(item, marker, "level", "disallow", allowed)
    if level not in LEVELS:
        _marker_error(item, marker, f"level={level!r}", allowed)
    return level


def pytest_runtest_setup(item: pytest.Item) -> None:
    guard = item.get_closest_marker("transfer_guard")
    if guard is not None:
        item.stash[_LEVEL] = _guard_level(item, guard)
    marker = item.get_closest_marker("requires_gpu")
    if marker is None:
        return
    wanted = _gpus_wanted(item, marker)
    from tfplace._devices import num_gpus

    have = num_gpus()
    if have < wanted:  # reported at the test, as a skip marker is
        from tfplace import _tensorflow
        from tfplace.machine import _doctor, _gpus

        verdict = _doctor.verdict_line(_tensorflow.gpu_count()) if _gpus.driver_gpu_count() else None
        raise pytest.skip.Exception(f"{item.name} requires_gpu(n={wanted}): it needs {wanted} GPU(s), "
                                    f"{have} visible" + (f"; {verdict}" if verdict else ""), _use_item_location=True)


_LOG = pytest.StashKey["PlacementLog"]()
_LEVEL = pytest.StashKey[str]()


@pytest.fixture
def placement_log(request: pytest.FixtureRequest) -> "PlacementLog":
    """A `tfplace.capture_placement()` around the test body; assert on it in the test."""
    from tfplace.placement.api._log import PlacementLog

    log = request.node.stash[_LOG] = PlacementLog()
    return log


class PlacementSnapshot:
    """Compares a placement log with the snapshot kept for one test item."""

    def __init__(self, path: Path, update: bool, written: dict[str, None], test: str, use: SnapshotUse) -> None:
        self.path = path
        self.update = update
        self._written = written
        self._test = test
        self._use = use
        self._used = False

    def assert_match(self, log: "PlacementLog") -> None:
        """Raises AssertionError unless `log`'s op counts per device equal the snapshot's.

        With `--tfplace-update-snapshots`, writes the snapshot instead.
        """
        __tracebackhide__ = True
        from tfplace.integrations import _snapshots

        if self._used:
            raise AssertionError(f"placement_snapshot.assert_match() was called again in {self._test}: a test item "
                                 f"has one snapshot ({self.path}); compare one log, at the end of the test")
        self._used = True
        self._use.used.add(str(self.path))
        if not log.complete and not log.only_uncertain:
            raise AssertionError(f"an incomplete placement log cannot be compared with a snapshot: "
                                 f"{log.incomplete_reason}")
        if log.uncertain:
            warnings.warn(f"tfplace: placement_snapshot of {self._test} leaves out {len(log.uncertain)} record(s) of "
                          f"functions TensorFlow's own threads instantiate a varying number of times: "
                          f"{log.incomplete_reason}", UserWarning, stacklevel=2)
        actual = _snapshots.placement(log)
        try:
            if self.update:
                _snapshots.write(self.path, actual)
                self._written[str(self.path)] = None
                return
            if not self.path.exists():
                raise AssertionError(f"no placement snapshot at {self.path}: run pytest with "
                                     "--tfplace-update-snapshots to write it, then review and commit it")
            expected = _snapshots.read(self.path)
        except _snapshots.SnapshotError as err:
            raise AssertionError(str(err)) from None
        if expected != actual:
            lines = "\n  ".join(_snapshots.differences(expected, actual))
            raise AssertionError(f"placement differs from the snapshot {self.path}:\n  {lines}\n"
                                 "If the new placement is right, run pytest with --tfplace-update-snapshots.")


_WRITTEN = pytest.StashKey[dict]()  # the snapshot files written, in order (a dict: each counted once)


_USE = pytest.StashKey[SnapshotUse]()


def _snapshot_path(node: pytest.Item) -> Path:
    """The snapshot file of a test item (its classes, and its name with the parameter id)."""
    from tfplace.integrations import _snapshots

    names = [parent.name for parent in node.listchain() if isinstance(parent, pytest.Class)] + [node.name]
    return _snapshots.path_for(Path(str(node.path)), names)


@pytest.fixture
def placement_snapshot(request: pytest.FixtureRequest) -> PlacementSnapshot:
    """`placement_snapshot.assert_match(log)`: the log's placement against the test item's snapshot file."""
    node = request.node
    return PlacementSnapshot(_snapshot_path(node), request.config.getoption("tfplace_update_snapshots"),
                             request.config.stash[_WRITTEN], node.nodeid, request.config.stash[_USE])


def pytest_deselected(items: Sequence[pytest.Item]) -> None:
    for item in items:
        item.config.stash[_USE].narrowed.add(str(item.path))


def pytest_collection_finish(session: pytest.Session) -> None:
    use = session.config.stash[_USE]
    use.collected.update(str(item.path) for item in session.items)
    use.whole = use.whole and not any("::" in arg for arg in session.config.args)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, Any, Any]:
    report = yield
    if (report.failed or report.skipped) and "placement_snapshot" in getattr(item, "fixturenames", ()):
        item.config.stash[_USE].kept.add(str(_snapshot_path(item)))
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    use = config.stash[_USE]
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: its controller prints the summary
        written: dict = config.stash[_WRITTEN]
        workeroutput["tfplace_written"] = list(written)
        workeroutput["tfplace_use"] = use.to_json()
        return
    stopped = session.shouldfail or session.shouldstop or exitstatus not in (pytest.ExitCode.OK,
                                                                             pytest.ExitCode.TESTS_FAILED)
    if not use.whole or stopped or config.option.collectonly or config.option.setuponly or config.option.setupplan:
        return
    use.unused = use.find_unused()
    if use.unused and config.getoption("tfplace_update_snapshots"):
        for path in use.unused:
            path.unlink(missing_ok=True)
        for folder in {path.parent for path in use.unused}:
            for empty in (folder, folder.parent):
                if empty.is_dir() and not any(empty.iterdir()):
                    empty.rmdir()
        use.removed = True


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist, in the controller: adds what a worker wrote and read to the summary."""
    written = node.config.stash[_WRITTEN]
    output = getattr(node, "workeroutput", {})
    written.update(dict.fromkeys(output.get("tfplace_written", [])))
    use = node.config.stash[_USE]
    if error is not None or "tfplace_use" not in output:  # a lost worker: what it ran is unknown
        use.whole = False
    else:
        use.merge(output["tfplace_use"])


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    written = config.stash.get(_WRITTEN, {})
    if written:
        terminalreporter.write_line(f"tfplace: wrote {len(written)} placement snapshot(s)")
    use = config.stash.get(_USE, None)
    if use is not None and use.unused:
        files = ", ".join(str(path.relative_to(config.rootpath)) if path.is_relative_to(config.rootpath) else str(path)
                          for path in use.unused)
        if use.removed:
            terminalreporter.write_line(f"tfplace: removed {len(use.unused)} unused placement snapshot(s): {files}")
        else:
            terminalreporter.write_line(
                f"tfplace: {len(use.unused)} placement snapshot(s) unused: no test of this run wrote or read them: "
                f"{files}; run pytest with --tfplace-update-snapshots to remove them")


class _AskedDevices:
    """Hook listener: the devices the test's eager ops asked for (`tf.device`), with the first line asking."""

    sources = all_threads = False

    def __init__(self) -> None:
        self.asked: dict[str, str] = {}

    def on_op(self, record: "PlacementRecord", copies: "Sequence[CopyRecord]") -> None:
        if record.requested and record.requested not in self.asked:
            from tfplace.placement.session._sources import user_line

            self.asked[record.requested] = user_line()

    def on_function(self, record: "PlacementRecord", placed: bool, call: Any) -> None:
        """A function call asks for its device in its `on_op`."""

    def on_records(self, key: Any, records: "Sequence[PlacementRecord]") -> None:
        """Function nodes: placed by TensorFlow's placer, where the eager call asked."""


def _check_asked(item: pytest.Item, asked: dict[str, str]) -> None:
    """Fails a transfer_guard test that asked for a device this process does not have."""
    from tfplace import _tensorflow

    existing = _tensorflow.logical_device_names()
    missing = [f"{device} (at {where or 'an unknown line'})" for device, where in asked.items()
               if device not in existing and device.startswith("/device:")]
    if missing:
        pytest.fail(
            f"{item.nodeid}: @pytest.mark.transfer_guard guarded nothing between devices that do not exist: the "
            f"test asked for {', '.join(missing)}, and this process has only {', '.join(existing)}, so TensorFlow "
            "ran those ops elsewhere and copied nothing. Give the test its devices (--tfplace-logical-cpus=N or "
            "ini tfplace_logical_cpus for CPUs), or skip it where they are missing (@pytest.mark.requires_gpu(n=...))",
            pytrace=False)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    """Captures (placement_log) and guards (transfer_guard marker) around the test body, in its thread."""
    log = item.stash.get(_LOG, None)
    level = item.stash.get(_LEVEL, None)
    if log is None and level is None:
        return (yield)
    from tfplace.placement.api._capture import capture_into
    from tfplace.placement.api._guards import transfer_guard
    from tfplace.placement.taking import _hooks

    asked = _AskedDevices()
    with contextlib.ExitStack() as stack:
        if log is not None:
            stack.enter_context(capture_into(log))
        if level is not None:
            stack.enter_context(_hooks.listening(asked))
            stack.enter_context(transfer_guard(level))
        result = yield
    if level is not None and level != "allow":
        _check_asked(item, asked.asked)
    return result
