"""The step rules as declared data: each rule's name, when it holds and what it fixes (`RULES`), every threshold
they judge by (the cluster's steps' `ps-hotspot` too), and the one severity scale their advice carries.

`tfplace.placement.steps._rules` applies them; the steps guide's table of rules is made from `RULES` when the
documentation site builds (`table()`), so the page and the code cannot disagree.

Example:
    >>> [rule.name for rule in RULES][:3]
    ['input-bound', 'host-sync', 'host-bound']
    >>> severity(0.6), severity(0.25), severity(0.05)
    ('high', 'medium', 'low')
"""

from __future__ import annotations

from typing import NamedTuple

from tfplace.placement.records._memory_held import GROWTH_MIN_STEPS

__all__ = ["Rule", "RULES", "SEVERITIES", "severity", "table", "INPUT_BOUND", "INPUT_US", "EXPLAINS", "HOST_BOUND",
           "HOST_US", "HOST_KERAS_US", "HOST_REPLICAS_US", "SKEW", "REPLICAS", "COPY_BYTES", "LAUNCH_US",
           "SHARES_FROM", "RETRACED", "EVERY_STEP", "OUTLIER", "OUTLIER_US", "HOT", "HOT_BYTES"]

INPUT_BOUND = 0.2  # input's share of the steady steps' time from which "input-bound" holds
EXPLAINS = 0.5  # the slowest stage's own time per step, over the step's wait for input, below which the stage
# does not account for the wait (the machine's other load, another pipeline's work): no fix to name
INPUT_US = 1000.0  # and at least this much waiting in a median step: below it, a get-next's own cost is the floor
SHARES_FROM = 3  # steady steps from which a share-based rule may hold (fewer make no figure to act on)
RETRACED = 3  # steady steps that traced again from which "retracing" holds (a new shape traces once)
EVERY_STEP = 0.9  # the share of steady steps that traced again from which retracing is "compile-every-step"
HOST_BOUND = 0.2  # host's share of the steady steps' time from which "host-bound" holds
HOST_US = 5000.0  # and at least this much host time in a median step: below it, the framework's own per-step
# Python (a tf.function's call, the loop) is the floor, which no line of the user's removes
HOST_REPLICAS_US = 20000.0  # the same for a step run on replicas (a strategy's per-step Python: its distributed
# iterator, its `run`, some ms per step on each replica's behalf)
HOST_KERAS_US = 50000.0  # the same in Keras' fit, evaluate and predict, whose own loop costs some ms per step
# (more under a strategy): beyond it, the user's callbacks
SKEW = 1.2  # a replica's busy time over the others' median from which "replica-skew" holds (a worker's too)
LAUNCH_US = 200.0  # an eager op's launch and the Python around it, at most: an eager loop whose Python takes more
# per op does other work (a sleep, I/O, NumPy), which a tf.function would not remove
COPY_BYTES = 1024  # bytes per step from which a copy is worth moving (a replica's scalar loss is not)
REPLICAS = 0.5  # devices are replicas when their op types overlap this much (Jaccard): the same step on each
OUTLIER = 2.0  # a steady step longer than this many times the median is an unusual step, reported apart,
OUTLIER_US = 5000.0  # when it is also this much longer (a few ms more on a step of one is the machine's noise)
HOT = 1.5  # a ps task serving this many times its fair share of the bytes per step is a hotspot
HOT_BYTES = 1 << 20  # and at least this many bytes per step (below it no ps task is busy enough to matter)

# Advice's severity by the share of the step time it accounts for, most first.
SEVERITIES = ("high", "medium", "low")


def severity(share: float) -> str:
    """`high` from half the step time, `medium` from a fifth, else `low`."""
    return SEVERITIES[0] if share >= 0.5 else SEVERITIES[1] if share >= 0.2 else SEVERITIES[2]


class Rule(NamedTuple):
    """A step rule: its name (`Advice.rule`), when it holds and the fix it prints."""

    name: str
    holds: str
    fix: str


def _ms(us: float) -> str:
    return f"{us / 1000:g} ms"


RULES = (
    Rule("input-bound", f"the steps wait for input at least {INPUT_BOUND:.0%} of their time, and at least "
                        f"{_ms(INPUT_US)} in a median step, and the slowest stage's own time per step is at least "
                        f"{EXPLAINS:.0%} of that wait",
         "what the machine can do: parallel calls where its cores keep up with the step (the stage's time per step "
         "over the rest of the step gives the parallelism needed), `interleave` for a `flat_map`, a prefetch where "
         "the stage keeps up on average, else `cache()` or the work done once; under Keras' `fit` on arrays, a "
         "`tf.data` pipeline of your own. The message gives the figures"),
    Rule("host-sync", "a line of yours reads a tensor's value in every steady step (all but the last at least)",
         "your line, read every N steps (under `if i % N == 0:` of your loop's counter); the value kept on the "
         "device in between"),
    Rule("host-bound", f"Python between and around the step's calls takes at least {HOST_BOUND:.0%} of the step "
                       f"and {_ms(HOST_US)} ({_ms(HOST_REPLICAS_US)} for a step run on replicas under a strategy, "
                       f"{_ms(HOST_KERAS_US)} in Keras' `fit`, `evaluate` and `predict`); in an eager loop, "
                       "Python that is not its ops' launches",
         "per-step Python out of the loop, or several steps per call (`steps_per_execution` in Keras, not under a "
         "strategy)"),
    Rule("eager-loop", "an eager loop spends more of each iteration in Python and op launches than in kernels, and "
                       f"that Python is its ops' launches (at most {LAUNCH_US:g} us per op)",
         "`tf.function` on the loop's body, its variables made before the loop"),
    Rule("retracing", f"the step function was traced again in at least {RETRACED} steady steps",
         "your call line with the changing Python argument passed as a tensor; `reduce_retracing=True` or an "
         "`input_signature`"),
    Rule("compile-every-step", f"the same, in at least {EVERY_STEP:.0%} of the steady steps", "the same"),
    Rule("copies-per-step", f"a tensor moves between devices in every step, {COPY_BYTES // 1024} KiB or more per "
                            "step, into a node or op of yours, inside the step function or on the loop's line (a "
                            "one-time restore or copies after the loop are in no step)",
         "make it on the device that reads it, or run the op where it lives"),
    Rule("replica-skew", f"one replica computes {SKEW:g} x the others' median or more, in a line of yours",
         "give every replica the same work"),
    Rule("memory-growth", f"bytes a line of yours allocated stay allocated step after step (rising over at least "
                          f"{GROWTH_MIN_STEPS} steps, never falling), with `memory=True`",
         "keep only what the loop needs: a Python number (`float(loss)` every N steps) or the last value instead of "
         "a list of tensors; a cache with a bound"),
    Rule("ps-hotspot", f"in a cluster, one ps task serves {HOT:g} x its fair share of the variable bytes per step, "
                       f"and {HOT_BYTES // 2 ** 20} MiB or more",
         "shard large variables over the ps tasks"),
)


def table() -> str:
    """The rules as a Markdown table (the steps guide's)."""
    rows = [f"| `{rule.name}` | {rule.holds} | {rule.fix} |" for rule in RULES]
    return "\n".join(["| rule | holds when | fix |", "|---|---|---|", *rows])
