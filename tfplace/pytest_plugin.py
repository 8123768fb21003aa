"""The tfplace pytest plugin: assert where ops ran.

Registered through the `pytest11` entry point as `tfplace`; `-p no:tfplace`
turns it off. It gives

* the fixture `placement_log`: a `capture_placement()` around the test body;
* the option `--tfplace-logical-cpus=N` and ini `tfplace_logical_cpus`:
  `configure(logical_cpus=N)` before any test starts TensorFlow;
* the marker `requires_gpu(n=1)`: skip unless n GPUs are visible;
* a report header line listing the devices.

Example::

    def test_matmul_on_cpu(placement_log):
        tf.matmul(tf.ones((2, 3)), tf.ones((3, 2)))
        placement_log.assert_placed("MatMul", "CPU:0")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Optional

import pytest

if TYPE_CHECKING:  # tfplace imports TensorFlow: only when a test needs it
    from tfplace.placement_log import PlacementLog

LOGICAL_CPUS_HELP = (
    "split the host CPU into N logical TensorFlow devices (tfplace.configure(logical_cpus=N)) "
    "before any test starts TensorFlow, so multi-device tests run without GPUs"
)
REQUIRES_GPU = "requires_gpu(n=1): skip the test unless at least n GPUs (logical ones included) are visible"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tfplace", "TensorFlow device placement (tfplace)")
    group.addoption("--tfplace-logical-cpus", default=None, metavar="N",
                    dest="tfplace_logical_cpus", help=LOGICAL_CPUS_HELP)
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


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Captures around the test body, in the test's thread."""
    log = item.stash.get(_LOG, None)
    if log is None:
        yield
        return
    from tfplace.capture import capture_into

    with capture_into(log):
        yield
