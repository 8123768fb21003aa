"""What `PlacementLog.steps()` and `PlacementLog.advice()` return: `Steps`, `Step`, `InputStage`, `Advice`.

Example:
    >>> steps = Steps(0, 0, "", "", reason="no step found: nothing ran twice")
    >>> steps.count, steps.to_json()["reason"]
    (0, 'no step found: nothing ran twice')
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

__all__ = ["JSON_STEPS", "PHASES", "Step", "InputStage", "Steps", "Advice"]

# The most per-step rows `Steps.to_json()` holds (a loop of a million eager steps stays a small file).
JSON_STEPS = 1000
# Every phase a step's wall time is split into, in the order a report shows them.
PHASES = ("input", "compute", "transfer", "sync", "host", "compile", "idle")


class Step(NamedTuple):
    """One step: its index among every step run (warm-up first), start (µs on the profile's clock), wall
    time (µs) and `phases` (phase -> µs, summing to `wall_us`; None without timing)."""

    index: int  # type: ignore[assignment]  # a field named as tuple.index(), which it hides (mypy: an override)
    start_us: Optional[float]
    wall_us: Optional[float]
    phases: Optional[dict[str, float]]


class InputStage(NamedTuple):
    """The input pipeline's stage that made the steps wait most.

    Attributes:
      dataset_op: the stage as the profile names it (`Map`, or `MapAndBatch` where tf.data fused them).
      source: the user's line that built it ("" when unknown).
      share: its share of the input pipeline's time.
      per_element_us: its time per element it produced.
      parallelism: its `num_parallel_calls` as the profile reports it (None: not parallel).
      prefetch: True when a `prefetch` follows it.
      per_step_us: its own time per step run (its elements per step times `per_element_us`; None where the
        profile gives it no time of its own: its work ran on tf.data's threads).
    """

    dataset_op: str
    source: str
    share: float
    per_element_us: float
    parallelism: Optional[int]
    prefetch: bool
    per_step_us: Optional[float] = None


class Steps(NamedTuple):
    """The steps of a captured block and where their time went (`PlacementLog.steps()`).

    Attributes:
      count: the steady steps (every figure is theirs).
      warmup: the first steps left out because they traced or compiled (`count + warmup` ran).
      kind: "keras-fit", "keras-evaluate", "keras-predict", "function", "session", "eager-loop" or "marked"
        ("" when none was found).
      source: the user's line that runs them.
      median_us, p90_us, max_us: the steady steps' wall times (None without timing).
      shares: phase -> fraction of the steady steps' wall time (None without timing).
      per_device: canonical device -> (busy µs, share of the steady steps' wall time).
      steps: every `Step`, warm-up first.
      input: the slowest input stage, or None.
      reason: why there is no step or no time, or what the times are where they are not the steps' own (a
        coordinator's scheduling; a kept profile without the user's lines); "" otherwise.
      name: what was called or marked each step (a function's Python name, a marker's name).
      reads: the user's lines that read a tensor's value in Python (`.numpy()`, `float`, `print`, ...) ->
        (the steady steps with such a read, the µs those reads took in them).
      gpus: per GPU timed from its own plane, per steady step: `compute_us` (kernels running), `idle_us` (no
        kernel running), `h2d_bytes` and `h2d_us` (copies from host memory), `pageable_bytes`, `pinned_bytes`.
      outliers: the steady steps over twice the median and 5 ms longer (an epoch's end: a test loop, a checkpoint, a new
        iterator), left out of `shares` so that one unusual step neither fires nor hides a rule.
      others: the other loops seen, each (kind, the user's line, steps run): one `Steps` is one loop.
    """

    count: int  # type: ignore[assignment]  # a field named as tuple.count(), which it hides (mypy: an override)
    warmup: int
    kind: str
    source: str
    median_us: Optional[float] = None
    p90_us: Optional[float] = None
    max_us: Optional[float] = None
    shares: Optional[dict[str, float]] = None
    per_device: dict[str, tuple[float, float]] = {}
    steps: tuple[Step, ...] = ()
    input: Optional[InputStage] = None
    reason: str = ""
    name: str = ""
    reads: dict[str, tuple[int, float]] = {}
    gpus: dict[str, dict[str, float]] = {}
    outliers: tuple[Step, ...] = ()
    others: tuple[tuple[str, str, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """A dict keyed by the attribute names (steps and the input stage as dicts), compact at any length:
        `steps` holds the timed steps only, at most `JSON_STEPS` of them (the first and the last halves), and
        `steps_left_out` says how many steps have no row (every one, without timing)."""
        data = self._asdict()
        data["per_device"] = {d: {"busy_us": b, "share": s} for d, (b, s) in self.per_device.items()}
        timed = [step for step in self.steps if step.wall_us is not None]
        if len(timed) > JSON_STEPS:
            timed = timed[:JSON_STEPS // 2] + timed[-(JSON_STEPS - JSON_STEPS // 2):]
        data["steps"] = [step._asdict() for step in timed]
        data["steps_left_out"] = len(self.steps) - len(timed)
        data["input"] = self.input._asdict() if self.input else None
        data["reads"] = {line: {"steps": n, "us": us} for line, (n, us) in self.reads.items()}
        data["outliers"] = [step._asdict() for step in self.outliers]
        data["others"] = [{"kind": kind, "source": source, "steps": n} for kind, source, n in self.others]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Steps":
        """Reads back `to_json()`."""
        values = dict(data)
        values["per_device"] = {d: (v["busy_us"], v["share"]) for d, v in (data.get("per_device") or {}).items()}
        values["steps"] = tuple(Step(**step) for step in data.get("steps") or ())
        values["input"] = InputStage(**data["input"]) if data.get("input") else None
        values["reads"] = {line: (v["steps"], v["us"]) for line, v in (data.get("reads") or {}).items()}
        values["outliers"] = tuple(Step(**step) for step in data.get("outliers") or ())
        values["others"] = tuple((o["kind"], o["source"], o["steps"]) for o in data.get("others") or ())
        return cls(**{k: v for k, v in values.items() if k in cls._fields})


class Advice(NamedTuple):
    """One rule that holds for the recorded run (`PlacementLog.advice()`).

    Attributes:
      rule: "input-bound", "host-sync", "host-bound", "eager-loop", "retracing", "copies-per-step",
        "replica-skew", "ps-hotspot", "compile-every-step" or "memory-growth".
      severity: "high" (it costs >= 50 % of the step), "medium" (>= 20 %) or "low".
      message: what the figures show.
      source: the user's line to change.
      fix: what to write there.
      evidence: the figures behind it (fraction of the steady step time it accounts for under `share`).
    """

    rule: str
    severity: str
    message: str
    source: str
    fix: str
    evidence: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self._asdict()
