"""`PlacementLog`: placement events as data, with queries and assertions.

Example:
    >>> from tfplace.placement.api._log import PlacementLog
    >>> log = PlacementLog.from_text("Executing op _MklMatMul in device /job:localhost/replica:0/task:0/device:CPU:0")
    >>> log.devices_for("MatMul"), log.ops_on("cpu:0")
    (('/device:CPU:0',), ('MatMul',))
    >>> log.assert_placed("MatMul", "/job:localhost/replica:0/task:0/device:CPU:0")
    >>> log.to_json()["records"][0]["kind"]
    'execute'
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Union

from tfplace._devices import canonical_name, parse_device
from tfplace.placement.api import _assertions
from tfplace.placement.records import _log_json, _memory_figures
from tfplace.placement.records._parsing import as_captured, parse_placement
from tfplace.placement.records._recorder import Recorder
from tfplace.placement.records._records import CopyRecord, Kind, PlacementRecord
from tfplace.placement.shown import _report

if TYPE_CHECKING:
    from tfplace.placement.profile._model import Timing
    from tfplace.placement.records._cost import Cost, Transfer
    from tfplace.placement.shown._explain import Explanation, Readiness
    from tfplace.placement.steps._model import Advice, Steps

__all__ = ["PlacementLog"]


class PlacementLog(Recorder):
    """The placement events of a block: what a capture (`tfplace.capture_placement`) wrote through its
    `Recorder` methods, with queries, assertions and views. While the capture is open the log grows (a test
    can assert inside the block); reading it never changes what it says.

    Attributes:
      records: `PlacementRecord`s in order.
      copies: `CopyRecord`s of implicit cross-device copies.
      complete: False as soon as the block ran something whose placement was decided before it opened (a
        function placed earlier) or that tfplace cannot see; `incomplete_reason` says what.
    """

    def __init__(self, records: Iterable[PlacementRecord] = (), copies: Iterable[CopyRecord] = ()) -> None:
        super().__init__(records, copies)
        self._timing: Optional[Timing] = None  # the profile of the block (`timing=True`)
        self._timing_missing = ""
        self._steps: Any = (None, None)  # ((records, timing) they were read from, Steps) of the last steps()
        self._census: Any = None  # the tensors the block made (`memory=True`)
        self._rename: Optional[Callable[[str], str]] = None  # how memory figures name their lines

    def set_timing(self, timing: Optional[Timing], missing: str = "") -> None:
        """Gives the log its block's profile, or why it has none."""
        self._timing, self._timing_missing = timing, missing

    def set_memory(self, census: Any) -> None:
        """Gives the log the census of its block's tensors (`tfplace.placement.taking._memory.Census`)."""
        self._census = census

    def memory(self) -> _memory_figures.Memory:
        """Memory per device: each device's peak inside the block (inside functions too), what it held then by
        line (`at_peak`), growth per step, coverage; each allocator's peak; `oom`. Empty (its `note` says why)
        unless the capture had `memory=True`; while the block runs, the figures so far.

        >>> import tensorflow as tf, tfplace
        >>> with tfplace.capture_placement(memory=True) as log:
        ...     x = tf.zeros((1000, 1000))
        >>> log.memory().devices["/device:CPU:0"].peak_bytes
        4000000
        """
        if self._census is None:
            return _memory_figures.Memory({})
        return _memory_figures.renamed(self._census.figures(), self._rename)

    def memory_note(self, error: BaseException) -> str:
        """The note an out-of-memory error raised in a `memory=True` block gets: the request that failed and what its
        device held, by line (`Memory.oom`; "" for other errors or without memory)."""
        if self._census is None or not self._census.failed(error):
            return ""
        return "tfplace (memory=True): " + "\n".join(self.memory().oom.lines())  # type: ignore[union-attr]

    def assert_memory_below(self, device: str, limit: Union[int, float, str]) -> None:
        """Raises AssertionError, with the lines holding most bytes, unless the block's peak on `device`
        (any accepted spelling) stayed below `limit` (bytes, or a string such as "2 GiB", "512 MiB").

        Raises:
          ValueError: `limit` is not a size, or the log was captured without `memory=True`.
        """
        __tracebackhide__ = True
        if self._census is None:
            raise ValueError(f"PlacementLog.assert_memory_below({device!r}, {limit!r}): {_memory_figures.NOT_COUNTED}")
        _memory_figures.assert_below(self.memory(), device, limit)

    def replaced(self, records: Iterable[PlacementRecord], copies: Iterable[CopyRecord],
                 rename: Optional[Callable[[str], str]] = None) -> "PlacementLog":
        """A log with other records and copies (renamed sources, say) and this one's executions,
        timing, memory and completeness (without warning again); `rename` renames the sources of
        its memory figures as the records' were."""
        self._settle()
        log = PlacementLog(records, copies)
        log._runs, log._timing, log._timing_missing = Counter(self._runs), self._timing, self._timing_missing
        log._census, log._rename = self._census, rename or self._rename
        log._reasons = list(self._reasons)
        log._uncertain, log._uncertain_reasons = list(self._uncertain), set(self._uncertain_reasons)
        if len(log._copies) == len(self._copies) and len(log._records) == len(self._records):
            log._copy_slots = list(self._copy_slots)  # the same events, renamed: each copy still comes with its record
        return log

    def transfers(self) -> list["Transfer"]:
        """One row per distinct implicit transfer (kind, function, node or op, input, devices, source):
        `count`, `bytes` per transfer, `total_bytes`, most bytes first; `lower_bound` says that a
        transfer in a loop body ran at least `count` times.

        >>> import tensorflow as tf, tfplace
        >>> x = tf.ones((2, 2))
        >>> with tfplace.capture_placement() as log:
        ...     y = x + 1.0
        >>> log.transfers()      # one device: nothing moved
        []
        """
        from tfplace.placement.records import _cost

        self._settle()
        return _cost.transfers(self._copies, self._timing)

    def cost(self) -> "Cost":
        """Where the time and bytes went: per device executions (and, with `timing=True`, busy time
        and share), per (device, op) executions (and time), per direction transfers and bytes (and
        time where the profile times transfers). Times are None without timing.

        >>> import tensorflow as tf, tfplace
        >>> with tfplace.capture_placement() as log:
        ...     y = tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
        >>> log.cost().ops[("/device:CPU:0", "MatMul")]
        OpCost(executions=1, time_us=None)
        """
        from tfplace.placement.records import _cost

        missing = self._timing_missing
        self._settle()
        return _cost.cost(self._records, self._copies, self._runs, self._timing, missing)

    def to_json(self) -> dict[str, Any]:
        """Every record and copy, the transfers, the cost and the completeness, as JSON-ready data.

        Identical events are stored once, in order of first appearance, with their `count`: the size grows with
        what differs, not with the number of ops. `runs` holds the executions of function nodes per device, op
        and category (compute, framework, input, plumbing). `PlacementLog.from_json` reads it back.

        >>> import tensorflow as tf, tfplace
        >>> x = tf.ones(2)
        >>> with tfplace.capture_placement() as log:
        ...     for _ in range(3):
        ...         y = x * 2.0
        >>> [(r["op"], r["count"]) for r in log.to_json()["records"]]
        [('Mul', 3)]
        >>> PlacementLog.from_json(log.to_json()).records == log.records
        True
        """
        self._settle()
        return _log_json.to_json(self._records, self._copies, self._runs, self._reasons, complete=self.complete,
                                 transfers=self.transfers(), cost=self.cost(),
                                 memory=self.memory() if self._census is not None else None,
                                 uncertain=self._uncertain,
                                 uncertain_reasons=[r for r in self._reasons if r in self._uncertain_reasons])

    @classmethod
    def from_json(cls, text: Union[str, bytes, dict]) -> "PlacementLog":
        """The log that `to_json()` wrote (or `tfplace trace --json`): the same records and copies, as
        many times as counted, the same completeness and function-node executions (times are not
        kept: `cost()` of the result has executions and bytes).

        Raises:
          TypeError: `text` is neither JSON text nor the parsed dict.
          ValueError: `text` is not a tfplace log (not JSON, or without its records), naming what is wrong.
        """
        data = _log_json.parsed(text)
        records, copies, runs, reasons = _log_json.from_json(data)
        log = cls(records, copies)
        log._runs = runs
        log._reasons = reasons
        log._uncertain, uncertain_reasons = _log_json.uncertain_from_json(data)
        log._uncertain_reasons = set(uncertain_reasons)
        return log

    @classmethod
    def from_text(cls, text: str) -> "PlacementLog":
        """A log of the placement lines in `text`: a saved TensorFlow log (eager lines,
        placer lines, "warn"-policy copy lines).

        It holds the records a capture of the same run holds: the placer lines
        of the one-op functions TensorFlow builds to run each eager op are
        left out, and kernel variants such as oneDNN's `_MklMatMul` are read
        as their op type. Constants TensorFlow materializes from Python values
        (`_EagerConst`) run in TensorFlow's C++ code, where a capture cannot
        see them: they are left out too. Each record keeps its printed line. A saved log
        cannot tell which nodes the graph optimizer removed or which
        functions XLA compiled: every placer line is a "place" record; nor who
        asked for an op: dataset and iterator ops are of origin "input", the
        rest "user", and `requested_by` is empty. The text is read in order:
        where several threads' eager ops interleave their wrapper lines (a
        collective's launch threads), some wrapper nodes can remain as
        "place" records.

        Raises:
          TypeError: `text` is not a `str` (decode bytes first).
        """
        if not isinstance(text, str):
            raise TypeError(f"PlacementLog.from_text received {type(text).__name__} (from argument text): "
                            "allowed is str, the text of a saved TensorFlow log; decode bytes first, "
                            "e.g. data.decode('utf-8', 'replace')")
        parsed = as_captured(parse_placement(text))
        return cls(parsed.records, parsed.copies)

    def _select(self, op: Optional[str] = None, device: Optional[str] = None) -> Iterable[PlacementRecord]:
        where = canonical_name(device, origin="PlacementLog's argument device") if device is not None else None
        return (r for r in self.records if (op is None or r.op == op) and (where is None or r.device == where))

    def devices_for(self, op: str) -> tuple[str, ...]:
        """Devices `op` was placed on, in order of first appearance."""
        return tuple(dict.fromkeys(r.device for r in self._select(op=op)))

    def ops_on(self, device: str) -> tuple[str, ...]:
        """Ops placed on `device` (any accepted spelling), in order of first appearance."""
        return tuple(dict.fromkeys(r.op for r in self._select(device=device)))

    def summary(self) -> dict[str, dict[str, int]]:
        """Placement events per device and op: `{"/device:CPU:0": {"MatMul": 2, ...}, ...}`; on each
        device the user's compute ops come first, most first, then TensorFlow's and Keras' own, the
        input pipeline's and plumbing, as the report groups them."""
        return _report.summary(self.records)

    def guide_lines(self) -> list[str]:
        """The eager events as TensorFlow's guide prints them (op types, never kernel variants)."""
        return [
            f"Executing op {r.op} in device {parse_device(r.device).full_name}"
            for r in self.records if r.kind == Kind.EXECUTE
        ]

    def table(self, op: Optional[str] = None) -> str:
        """A short table of what was placed where: the rows for `op` first, then the user's compute
        ops, most first; TensorFlow's and Keras' own ops, the input pipeline and plumbing (`Identity`,
        `Const`, `NoOp`, arguments and results, removed nodes) are counted in a line each."""
        from tfplace.placement.shown import _display

        self._settle()
        rows, others = _report.placements(self._records, op)
        return _display.table(rows, others, "" if self.complete else self.incomplete_reason)

    def assert_placed(self, op: str, device: str) -> None:
        """Raises AssertionError, with a table of actual placements, unless `op` ran on `device`.

        When `device` exists neither in this process nor in the log, the message says so and lists the devices.
        """
        __tracebackhide__ = True
        _assertions.assert_placed(self, op, device)

    def assert_not_placed(self, op: str, device: str) -> None:
        """Raises AssertionError, with a table of actual placements, if `op` ran on `device`.

        When `device` exists neither in this process nor in the log, the assertion holds trivially:
        it warns, saying so and listing the devices.
        """
        __tracebackhide__ = True
        _assertions.assert_not_placed(self, op, device)

    def explain(self) -> list["Explanation"]:
        """Why each op ran where it did, for every record that ran elsewhere than it asked or that
        asked for nothing and ran on a CPU while a GPU was visible: one `Explanation(record,
        reason, message)` each, `reason` one of "no-device", "no-kernel", "colocated",
        "host-memory", "xla", "unknown" (see `tfplace.Explanation`). Computed when asked, from this
        process's devices and kernel registry.

        >>> import tensorflow as tf, tfplace
        >>> with tfplace.capture_placement() as log:
        ...     with tf.device("GPU:0"):            # no GPU here: soft placement moves it
        ...         y = tf.ones(2) * 2.0
        >>> [e.reason for e in log.explain() if e.record.op == "Mul"]
        ['no-device']
        """
        from tfplace import _tensorflow
        from tfplace.placement.ops import _kernel_table
        from tfplace.placement.shown import _explain

        self._settle()
        return _explain.explain(self._records, devices=_tensorflow.logical_device_names(), table=_kernel_table.live())

    def gpu_readiness(self) -> list["Readiness"]:
        """The recorded ops that would still run on the CPU on a GPU machine, because
        TensorFlow's CUDA build has no GPU kernel for them with these dtypes: one
        `Readiness(op, dtypes, gpu_dtypes, sources, message)` per op type and dtypes. Read from
        this process's kernel registry when it has GPU kernels, else from tfplace's table of the
        CUDA build's kernels (a warning says so when that table's TensorFlow version differs).

        >>> import tensorflow as tf, tfplace
        >>> with tfplace.capture_placement() as log:
        ...     s = tf.strings.join(["a", "b"])
        >>> [r.op for r in log.gpu_readiness()]
        ['StringJoin']
        """
        from tfplace.placement.ops import _kernel_table
        from tfplace.placement.shown import _explain

        self._settle()
        return _explain.gpu_readiness(self._records, _kernel_table.gpu_table())

    def steps(self) -> "Steps":
        """The block's steps, found without annotation; with `timing=True`, where their time went.

        >>> import tensorflow as tf, tfplace
        >>> step = tf.function(lambda x: x * 2.0)
        >>> with tfplace.capture_placement() as log:
        ...     for _ in range(3):
        ...         y = step(tf.ones(2))
        >>> log.steps().count, log.steps().warmup, log.steps().kind   # the first call traced
        (2, 1, 'function')
        """
        from tfplace.placement.functions._function_sources import traced_parameters as held
        from tfplace.placement.steps import _analysis

        self._settle()
        read = (len(self._records), id(self._timing))
        if self._steps[0] != read:  # read once per state: the report, its JSON and the advice all ask
            self._steps = (read, _analysis.steps(self._records, self._timing, self._timing_missing, held()))
        return self._steps[1]

    def advice(self) -> list["Advice"]:
        """What to change, most costly first: an `Advice` per rule the run shows, at the user's line, with a fix
        (`placement.steps._rules`); none on a healthy program, none about code the user did not write."""
        from tfplace.placement.functions._function_sources import traced_parameters
        from tfplace.placement.steps import _memory_advice, _rules

        ops = self._timing.ops if self._timing is not None else {}
        grown = _memory_advice.memory_advice(self.memory()) if self._census is not None else []
        return _rules.advice(self.steps(), self.transfers(), ops, self.records, traced_parameters()) + grown

    def _repr_html_(self) -> str:
        """The log as compact HTML for notebooks (`tfplace.placement.shown._display`); `str(log)` stays text."""
        from tfplace.placement.shown import _display

        return _display.html(self, self.explain())

    def to_dataframe(self) -> Any:
        """A pandas DataFrame, one row per record: columns op, name, device, kind, source,
        requested, dtypes (as text, e.g. "T=float32"), line, requested_by and origin.

        Raises:
          ImportError: pandas is not installed (it comes with the `notebook` extra).
        """
        from tfplace.placement.shown import _display

        self._settle()
        return _display.dataframe(self._records)

    def to_perfetto(self, path: str) -> None:
        """Writes the block as a timeline that Perfetto's UI (ui.perfetto.dev) and `chrome://tracing` open:
        Chrome's Trace Event Format, gzipped for a path ending `.gz`. One process per device, a slice per op
        execution and function call (with `timing=True` at the profiler's times, else sequence numbers, as the
        file says), `args` with op, kind, origin, requester and the user's line, each implicit transfer an arrow
        with its bytes; with `memory=True` bytes per device (with timing, in use); with timing, a steps track.

        >>> import os, tempfile, tensorflow as tf, tfplace
        >>> with tfplace.capture_placement() as log:
        ...     y = tf.ones(2) * 2.0
        >>> path = os.path.join(tempfile.mkdtemp(), "step.json")
        >>> log.to_perfetto(path)
        >>> import json; "Mul" in {e.get("name") for e in json.load(open(path))["traceEvents"]}
        True
        """
        from tfplace.placement.shown import _perfetto

        self._settle()
        series = self._census.series() if self._census is not None else None  # (None: memory not counted)
        _perfetto.write(path, _perfetto.trace_events(self._records, self._copies, self._copy_slots, series or (),
                                                     self._timing, self.steps() if self._timing else None,
                                                     series is not None))

    def __len__(self) -> int:
        self._settle()
        return len(self._records)

    def __repr__(self) -> str:
        self._settle()
        return f"<PlacementLog: {len(self._records)} records, {len(self._copies)} copies, complete={self.complete}>"

    def __str__(self) -> str:
        """Whether the log is complete, where the time and bytes went (with the top transfers and their
        lines), then the table of what was placed where."""
        from tfplace.placement.shown import _display

        self._settle()
        lines = [f"PlacementLog: {len(self._records)} records, {len(self._copies)} implicit copies, " +
                 ("complete" if self.complete else "INCOMPLETE"),
                 *("  " + line for line in _display.cost_lines(self, top=_report.ROWS)), self.table()]
        return "\n".join(lines)
