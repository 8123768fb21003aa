"""What a profile says about steps: the events `tfplace.placement.profile._xspace` reads for them.

What TensorFlow 2.16-2.21's profiler writes on the host plane, checked on Keras 3 and tf_keras `fit`,
custom loops, eager loops and `Session.run` loops on CPUs:

* A Python call of a `tf.function` is an event named after the Python function (`multi_step_on_iterator`,
  tf_keras' `train_function`, a user's `step`) with stat `tf_function_call` (`traced-nonXla`,
  `notTraced-nonXla`, `traced-Xla`, `notTraced-Xla`: whether this call traced) on the calling thread's line;
  tracing inside it is `tf.function-graph_building`.
* tfplace's own `tfplace_host_read` (stat `source`) is a read of a tensor's value on the user's line
  (`tfplace.placement.taking._host_reads`): it lasts as long as Python waits for the device's result.
* On a GPU's plane (`profile/_gpu_planes.py`), a copy from host memory says in `memcpy_details` whether that
  memory was `pageable` or `pinned`.
* A step marker, tf_keras' or a user's `tf.profiler.experimental.Trace("train", step_num=i, _r=1)`, is an
  event with stat `step_num`; a `Session.run` is `SessionRun`, and in a capture tfplace's `tfplace_session_run`
  around it names its Session and the user's line (stats `session`, `source`).
* An iterator's get-next is `IteratorGetNextOp::DoCompute` (inside a function on a
  `tf_data_iterator_get_next` line, eager on the Python line): it lasts as long as the step waits for input.
* tf.data's stages are `Iterator::Root::...::<Stage>` events with stats `name` (`MapDataset:1`, or
  `fused(MapDataset:2,BatchDatasetV2:3)` where tf.data fused two), and on parallel stages `parallelism`;
  a stage's function runs inside it as `InstantiatedCapturedFunction::Run` where it runs synchronously.
  An asynchronous stage (`Prefetch`, `ParallelMapV2`, `MapAndBatch`, ...) spends its own events waiting
  for its producers, which run its input's events on other lines.

Example:
    >>> events = StepEvents()
    >>> events.call(0.0, 10.0, "step", "traced-nonXla", ("python", 1))
    >>> events.calls[0].traced, events.calls[0].xla
    (True, False)
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

__all__ = ["Call", "HostCopy", "Mark", "SessionRun", "Stage", "StepEvents", "ASYNC_STAGES"]

Line = tuple[str, int]  # a profile's line: its plane's name and its id
Span = tuple[float, float]  # start and length, µs

# Stages whose own events wait on producers running elsewhere (their time is their input's).
ASYNC_STAGES = frozenset({"Prefetch", "ParallelMap", "ParallelMapV2", "MapAndBatch", "ParallelBatch",
                          "ParallelInterleave", "ParallelInterleaveV2", "ParallelInterleaveV3",
                          "ParallelInterleaveV4", "LegacyParallelInterleave", "DataService"})


class Call(NamedTuple):
    """A Python call of a `tf.function`: start and length (µs), its Python name, whether it traced or
    runs XLA, and its thread's line."""

    start: float
    duration: float
    name: str
    traced: bool
    xla: bool
    line: Line


class Mark(NamedTuple):
    """A step marker: start and length (µs), its name and step number."""

    start: float
    duration: float
    name: str
    number: int


class SessionRun(NamedTuple):
    """A `Session.run` a capture saw: start and length (µs), the user's line, its Session (an id)."""

    start: float
    duration: float
    source: str
    session: int


class HostCopy(NamedTuple):
    """A copy to a GPU from host memory: the GPU, `pageable` or `pinned` ("" where the profile does not say),
    bytes, start and length (µs)."""

    device: str
    memory: str
    bytes: int
    start: float
    duration: float


class Stage(NamedTuple):
    """One tf.data stage over the profile: its iterator path (`Iterator::Root::MapAndBatch::Map`),
    the dataset it names (`MapDataset:1`), its time of its own (µs, its input's events and waits
    on producers left out), its elements, its parallelism where the profile says it."""

    path: str
    dataset: str
    own_us: float
    elements: int
    parallelism: object  # as the profile writes it (an int, or a string such as "autotune")


class StepEvents:
    """The step events of one profile, in µs on the profile's clock."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.marks: list[Mark] = []
        self.sessions: list[Span] = []  # TensorFlow's `SessionRun` events
        self.session_runs: list[SessionRun] = []  # tfplace's, naming each run's Session and line
        self.input: list[Span] = []  # get-next waits
        self.sync: list[Span] = []  # collectives, waiting for peers
        self.compile: list[Span] = []  # tracing
        self.reads: list[tuple[float, float, str]] = []  # the user's reads of tensor values: start, µs, line
        self.host_copies: list[HostCopy] = []
        self._stages: dict[str, list[Any]] = {}  # path -> [dataset, own µs, elements, events, parallelism, spans]
        self._open: dict[Line, list[list[Any]]] = {}  # line -> stack of [path, end, children µs, functions, ...]
        self._last: dict[Line, str] = {}  # line -> the stage that last ended on it
        self._launched: list[tuple[str, float, int]] = []  # an asynchronous stage's function runs: stage, start, id
        self._ran: dict[int, float] = {}  # a function run's id -> µs its executor ran on tf.data's threads

    def call(self, start: float, duration: float, name: str, kind: str, line: Line) -> None:
        self.calls.append(Call(start, duration, name, kind.startswith("traced"), kind.endswith("-Xla"), line))

    def mark(self, start: float, duration: float, name: str, number: object) -> None:
        try:
            self.marks.append(Mark(start, duration, name, int(number)))  # type: ignore[call-overload]
        except (TypeError, ValueError):
            pass

    def stage(self, line: Line, path: str, start: float, duration: float, stats: Mapping[str, object]) -> None:
        """An `Iterator::...` event (a line's events come in order of start)."""
        stack = self._open.setdefault(line, [])
        self._close(stack, start, line)
        if stack and path.startswith(stack[-1][0] + "::"):
            stack[-1][2] += duration
        entry = self._stages.setdefault(path, [str(stats.get("name", "")), 0.0, 0, 0, None, []])
        if stats.get("parallelism") is not None:
            entry[4] = stats["parallelism"]
        stack.append([path, start + duration, 0.0, 0, duration, entry])

    def function_run(self, line: Line, start: float) -> None:
        """A tf.data function's synchronous run, inside the stage open on its line."""
        stack = self._open.get(line)
        if stack:
            self._close(stack, start, line)
            if stack:
                stack[-1][3] += 1

    def function_launch(self, line: Line, start: float, run: int) -> None:
        """A function a tf.data thread launched (`FunctionRun`, its run's id `run`): with no stage open on its
        line, an asynchronous stage's (`MapAndBatch`, `ParallelMap`) function, called on the element its input
        just produced there: the stage above the one that last ended on the line."""
        stack = self._open.setdefault(line, [])
        self._close(stack, start, line)
        stage = self._last.get(line, "").rpartition("::")[0]
        if not stack and run and stage.rpartition("::")[2] in ASYNC_STAGES:
            self._launched.append((stage, start, run))

    def executor_run(self, run: int, duration: float) -> None:
        """The executor's work of a function run (`ExecutorState::Process`, on tf.data's threads)."""
        if run:
            self._ran[run] = self._ran.get(run, 0.0) + duration

    def _close(self, stack: list[list[Any]], now: float, line: Line = ("", 0)) -> None:
        while stack and stack[-1][1] <= now:
            path, end, children, functions, duration, entry = stack.pop()
            self._last[line] = path
            entry[3] += 1
            if path.rpartition("::")[2] in ASYNC_STAGES:
                entry[5].append((end - duration, 0.0, 0))
                continue
            entry[1] += max(0.0, duration - children)
            entry[2] += functions
            entry[5].append((end - duration, max(0.0, duration - children), functions))

    def stages(self, window: Span = (float("-inf"), float("inf"))) -> list[Stage]:
        """Every stage seen, with its own time, most first; with `window` (start, end), only the events that
        began inside it (the pipeline a loop consumed, not an earlier loop's or a later evaluation's)."""
        for line, stack in self._open.items():
            self._close(stack, float("inf"), line)
        found = []
        low, high = window
        launched: dict[str, list[tuple[float, float, int]]] = {}  # an asynchronous stage's function runs
        for stage, start, run in self._launched:
            launched.setdefault(stage, []).append((start, self._ran.get(run, 0.0), 1))
        for path, (dataset, _, _, _, parallelism, spans) in self._stages.items():
            inside = [(own, functions) for start, own, functions in spans + launched.get(path, [])
                      if low <= start <= high]
            if inside:
                found.append(Stage(path, dataset, sum(own for own, _ in inside),
                                   sum(functions for _, functions in inside) or len(inside), parallelism))
        return sorted(found, key=lambda stage: -stage.own_us)
