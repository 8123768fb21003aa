"""`advice()`: the rules that hold for a recorded run, most costly first, each with the user's line and a fix.

A rule fires only where the figures show it: measured shares of the steady steps' time, or, for
`host-sync` and `copies-per-step`, a read or a transfer seen in every step; and only on a line the user
wrote (a read or a transfer TensorFlow's or Keras' own code makes names no line of the user's and gives
no advice).

Example:
    >>> from tfplace.placement.steps._model import Steps
    >>> calm = Steps(10, 1, "function", "train.py:9", 1000.0, 1100.0, 1200.0,
    ...              {"input": 0.05, "compute": 0.9, "transfer": 0.0, "sync": 0.0, "host": 0.05, "compile": 0.0,
    ...               "idle": 0.0})
    >>> advice(calm, [], {})
    []
"""

from __future__ import annotations

import ast
import linecache
import math
import os
import re
from collections import Counter
from statistics import median
from typing import AbstractSet, Any, Mapping, Sequence

from tfplace.placement.records._origins import is_input_op
from tfplace.placement.records._records import Kind
from tfplace._names import duration_text, function_name, is_function_call
from tfplace.placement.steps._model import Advice, Steps
from tfplace.placement.steps._thresholds import (COPY_BYTES, EVERY_STEP, EXPLAINS, HOST_BOUND, HOST_KERAS_US,
                                                 HOST_REPLICAS_US, HOST_US, INPUT_BOUND, INPUT_US, LAUNCH_US,
                                                 REPLICAS, RETRACED, SHARES_FROM, SKEW, severity)
from tfplace.placement.session._session import Parameters

__all__ = ["advice"]

def _input_bound(steps: Steps) -> list[Advice]:
    share = steps.shares["input"] if steps.shares else 0.0
    if share < INPUT_BOUND or share * (steps.median_us or 0.0) < INPUT_US:
        return []
    stage = steps.input
    waited = share * (steps.median_us or 0.0)
    if stage is not None and stage.per_step_us is not None and stage.per_step_us < EXPLAINS * waited:
        return []  # the pipeline's own work is a fraction of the wait: no change to it would end the wait
    where = stage.source if stage and stage.source else steps.source
    said, fix = _input_fix(steps, share)
    if not fix:
        return []
    return [Advice("input-bound", severity(share),
                   f"the steps wait for input {share:.0%} of their time{said}", where, fix,
                   {"share": share, "stage": stage._asdict() if stage else None})]


def _input_fix(steps: Steps, share: float) -> tuple[str, str]:
    """What the slowest stage costs a step, and the fix that fits it: parallel calls where the machine's cores
    can keep up with the step (the stage's time per step over the step's own work), `interleave` for a
    `flat_map`, a prefetch where the stage keeps up on average; else doing the work once (offline, `cache`,
    the tf.data service), since no pipeline setting makes it keep up."""
    stage, median = steps.input, steps.median_us or 0.0
    own = max((1.0 - share) * median, 1.0)  # the step's own work
    if stage is None:
        return "", "ds = ds.prefetch(tf.data.AUTOTUNE)  # the last step of the pipeline"
    parallel = stage.parallelism or 1
    demand = stage.per_step_us if stage.per_step_us else (share * median + own) * parallel
    needed = max(1, math.ceil(demand / own))
    cores = os.cpu_count() or 1
    said = (f": its slowest stage is {stage.dataset_op} ({duration_text(stage.per_element_us)} per element, "
            f"{'parallelism ' + str(stage.parallelism) if stage.parallelism else 'no num_parallel_calls'}, "
            f"{'a prefetch after it' if stage.prefetch else 'no prefetch after it'}); it needs about "
            f"{duration_text(demand)} a step where the rest of a step takes {duration_text(own)}: keeping up takes "
            f"~{needed}-way parallelism, and this machine has {cores} core{'s' if cores != 1 else ''}")
    op = stage.dataset_op
    if steps.kind.startswith("keras") and stage.source == steps.source:  # Keras' own pipeline over arrays
        return said, ("ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size).prefetch(tf.data.AUTOTUNE)  "
                      "# then model.fit(ds, ...): the pipeline Keras makes of the arrays inside fit is the slow stage")
    offline = (f"ds = ds.cache(){'' if stage.prefetch else '.prefetch(tf.data.AUTOTUNE)'}  # right after the slow "
               "stage, if its output fits in memory (only the first epoch waits); or do its work once, offline, and "
               "read the results; or give it the tf.data service's workers")
    if op == "FlatMap":
        fix = ("ds = ds.interleave(fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)  # fn: the "
               "function given to flat_map, each element's dataset read in parallel")
    elif needed > cores:
        fix = offline
    elif needed > parallel and op in ("Map", "ParallelMap", "ParallelMapV2", "MapAndBatch") and not stage.parallelism:
        fix = ("ds = ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)  # fn: the "
               f"function given to this map: ~{needed} calls at once keep up")
    elif needed > parallel and op == "Interleave":
        fix = "ds = ds.interleave(fn, num_parallel_calls=tf.data.AUTOTUNE)  # fn: the function given to it"
    elif needed <= parallel and not stage.prefetch:
        fix = "ds = ds.prefetch(tf.data.AUTOTUNE)  # after the slow stage, at the end of the pipeline"
    elif needed <= parallel:
        return said, ""  # it keeps up and is prefetched already: the wait is not the pipeline's to fix
    else:
        fix = offline
    return said, fix


def _host(steps: Steps, ops_per_step: float = 0.0) -> list[Advice]:
    if not steps.shares:
        return []
    host = steps.shares["host"]
    launch = host + steps.shares["idle"]
    launches = launch * (steps.median_us or 0.0) <= max(ops_per_step, 1.0) * LAUNCH_US  # its Python is op launches
    if steps.kind == "eager-loop" and launches:
        if launch <= steps.shares["compute"]:
            return []
        return [Advice("eager-loop", severity(launch),
                       f"the loop's eager ops spend {launch:.0%} of each iteration in Python and op launches, "
                       f"{steps.shares['compute']:.0%} in kernels", steps.source,
                       "body = tf.function(body)  # body: a function holding the loop's body, called once per "
                       "iteration; the variables it uses (a model, an optimizer) made before the loop, not in it",
                       {"share": launch, "compute": steps.shares["compute"]})]
    keras = steps.kind.startswith("keras")
    kinds = Counter(device.rpartition("/device:")[2].partition(":")[0] for device in steps.per_device)
    floor = HOST_KERAS_US if keras else HOST_REPLICAS_US if max(kinds.values(), default=0) >= 2 else HOST_US
    if host < HOST_BOUND or host * (steps.median_us or 0.0) < floor or steps.kind == "session":
        return []  # (a Session.run's own Python is no line of the user's to change)
    if steps.kind == "eager-loop":
        return [Advice("host-bound", severity(host), f"{host:.0%} of each iteration is Python that is not its eager "
                       "ops' launches (a tf.function around them would not remove it)", steps.source,
                       "# keep the iteration's other Python (sleeps, I/O, NumPy, logging) out of the loop, or do it "
                       "every N iterations", {"share": host})]
    replicas = max(kinds.values(), default=0) >= 2
    fix = ("model.compile(..., steps_per_execution=32)  # 32 batches per call: per-batch callbacks run once per "
           "32 batches (or do a callback's slow work every N batches)" if keras and not replicas
           else "# do a callback's slow work every N batches (on_train_batch_end: if batch % 100 == 0: ...); under a "
                "strategy keep steps_per_execution at 1 unless every batch is full" if keras
           else "# keep per-step Python (logging, metrics, bookkeeping) out of the loop or run it every N steps; "
                "or run several steps per call: loop over the iterator inside the tf.function")
    return [Advice("host-bound", severity(host), f"{host:.0%} of each step is Python between and around the "
                   "step's calls", steps.source, fix, {"share": host})]


def _host_sync(steps: Steps) -> list[Advice]:
    wall = sum(step.wall_us or 0.0 for step in steps.steps[steps.warmup:])
    if steps.count < 2 or not wall:
        return []
    out = []
    for line, (count, us) in steps.reads.items():
        if count < max(2, steps.count - 1):  # a function's last step ends with its call, before a read after it
            continue
        share, (text, counter) = us / wall, _statement(line)
        out.append(Advice("host-sync", severity(share),
                          f"a tensor's value is read in Python in every step ({count} of {steps.count} steady steps, "
                          f"{duration_text(us / count)} each): Python waits there for the device to finish the step",
                          line,
                          f"if {counter} % 100 == 0: {text}  # read every 100 steps (sum on the device: a tf.Variable)"
                          if counter else "# read it every N steps; keep sums on the device (a tf.Variable, a metric)",
                          {"share": share, "steps": count}))
    return out


def _statement(source: str) -> tuple[str, str]:
    """The user's line `source` ("file.py:LINE") if one simple statement, and the `for` loop's counter around it."""
    try:  # the line compiles alone (a `return` pasted alone does not) and can follow `if ...:` or `with ...:`
        path, _, number = source.rpartition(":")
        lines = [linecache.getline(path, n) for n in range(1, int(number) + 1)]
        text, indent = lines[-1].strip(), len(lines[-1]) - len(lines[-1].lstrip())
        header = next((t for t in reversed(lines[:-1]) if t.strip() and len(t) - len(t.lstrip()) < indent), "")
        counter = re.findall(r"^\s*for (\w+)(?:, \w+)* in (?:range|enumerate)\(", header) + [""]  # i; i of i, x
        tree = ast.parse(text)
        simple = [hasattr(n, "body") for n in tree.body] == [False] and compile(text, source, "exec")
    except (ValueError, IndexError, SyntaxError):
        return "", ""
    return (ast.unparse(tree), counter[0]) if simple else ("", "")  # as code: the line's own comment left out


def _spec(text: str) -> str:
    """How a trace held a parameter, shortly: a Python value as written, a tensor as dtype and shape."""
    if text.startswith("Literal[") and text.endswith("]"):
        return text[len("Literal["):-1]
    spec = re.match(r"TensorSpec\(shape=(.*), dtype=tf\.(\w+), name=.*\)$", text)
    return f"{spec[2]} tensor of shape {spec[1]}" if spec else text


def _traces(name: str, source: str, records: Sequence[Any]) -> list[str]:
    """The concrete functions of the step function `name` that the loop's line `source` called, first call first
    (another function of the same name called elsewhere is not the loop's)."""
    prefix, traces = f"__inference_{name}_", []
    for record in records:
        if record.op.startswith(prefix) and record.op[len(prefix):].isdigit() and record.op not in traces and (
                not source or record.source == source):
            traces.append(record.op)
    return traces


def _changed(traces: Sequence[str], parameters: Mapping[str, Parameters]) -> list[tuple[str, str, str]]:
    """(parameter, before, after) for each parameter whose traced value, type or shape differed between two
    traces of the step function in a row (each parameter once, first change first)."""
    found: dict[str, tuple[str, str, str]] = {}
    for before, after in zip(traces, traces[1:]):
        then, now = dict(parameters.get(before, ())), dict(parameters.get(after, ()))
        for parameter, held in now.items():
            if parameter in then and then[parameter] != held and parameter not in found:
                found[parameter] = (parameter, _spec(then[parameter]), _spec(held))
    return list(found.values())


def _is_float(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return not value.lstrip("-").isdigit()


def _pasted_call(source: str, name: str, parameter: str, order: Sequence[str]) -> str:
    """The user's line `source` ("file.py:LINE") calling `name`, with the argument given for `parameter` (`order`:
    the function's parameters) made a float32 tensor: the fix to paste in its place; "" where it cannot be read."""
    path, _, number = source.rpartition(":")
    text = linecache.getline(path, int(number)).strip() if number.isdigit() else ""
    try:
        statement = ast.parse(text).body[0]
    except (SyntaxError, IndexError):
        return ""
    for node in ast.walk(statement):
        called = getattr(node, "func", None)
        if isinstance(node, ast.Call) and (getattr(called, "id", None) or getattr(called, "attr", None)) == name:
            given = next((k.value for k in node.keywords if k.arg == parameter), None)
            at = list(order).index(parameter) if parameter in order else len(node.args)
            given = given if given is not None else node.args[at] if at < len(node.args) else None
            if given is None or given.end_col_offset is None or statement.end_col_offset is None:
                return ""
            return (f"{text[:given.col_offset]}tf.constant({text[given.col_offset:given.end_col_offset]}, tf.float32)"
                    f"{text[given.end_col_offset:statement.end_col_offset]}  # a tensor: its value is not part of the "
                    "trace's key")
    return ""


def _compile(steps: Steps, traces: Sequence[str], changed: Sequence[tuple[str, str, str]],
             order: Sequence[str] = ()) -> list[Advice]:
    """Retracing: the step function itself traced again (a new concrete function of it, `traces`), in steady
    steps whose time holds that compiling; compile time of anything else in a step's span is not its."""
    steady = steps.steps[steps.warmup:]
    if not steady or steady[0].phases is None or len(traces) - 1 < RETRACED:
        return []
    if not changed and order:  # traces known to hold every argument alike: other functions of the same code
        return []
    # `_analysis.steps` times every step or none: past the check above, each has its phases and wall time
    compiling = [s.phases for s in steady if s.phases is not None and s.phases["compile"] > 0]
    if len(compiling) < RETRACED:
        return []
    share = sum(phases["compile"] for phases in compiling) / sum(s.wall_us or 0.0 for s in steady)
    every = len(compiling) >= max(2, EVERY_STEP * len(steady))
    what = steps.name or "the step function"
    if changed:
        why = "; ".join(f"argument {p} was {a}, then {b}" for p, a, b in changed[:3])
        python = [p for p, a, _ in changed if " tensor of shape " not in a]  # a Python value, not a tensor
        floats = [p for p, a, b in changed if p in python and _is_float(a) and _is_float(b)]
        pasted = _pasted_call(steps.source, what, floats[0], order) if floats else ""
        fix = (pasted or f"# pass {python[0]} as a tensor: tf.constant({python[0]}) (a Python number is part of the "
               f"trace's key; a tensor's value is not)" if python else
               f"@tf.function(reduce_retracing=True)  # or an input_signature with None in {changed[0][0]}'s "
               "dimension that changes")
    else:
        why = "an argument's Python value, type or shape changed between calls"
        fix = ("# pass tensors, not Python numbers (tf.constant(value)), or declare "
               "@tf.function(reduce_retracing=True) / an input_signature")
    return [Advice("compile-every-step" if every else "retracing", severity(share),
                   f"{what} was traced again in {len(compiling)} of {len(steady)} steady steps ({share:.0%} of "
                   f"their time): {why}", steps.source, fix,
                   {"share": share, "steps": len(compiling), "changed": [list(c) for c in changed]})]


def _copies(steps: Steps, transfers: Sequence[Any], users: AbstractSet[str]) -> list[Advice]:
    if (ran := steps.count + steps.warmup) < 2:
        return []
    out = []
    for row in transfers:
        where = row.source  # the consumer's line of the user's: TensorFlow's own transfers name none
        if row.count < ran or not where or row.tensor.startswith("^") or row.node and row.node not in users:
            continue
        if not _in_steps(steps, row):  # a one-time restore, a sampler's copies after the loop: in no step
            continue
        per_step = (row.bytes or 0) * row.count / ran
        if per_step < COPY_BYTES:
            continue
        share = (row.time_us or 0.0) / (steps.median_us * ran) if steps.median_us else 0.0
        out.append(Advice("copies-per-step", severity(share),
                          f"{row.tensor or row.op} moves {row.from_device} -> {row.to_device} in every step "
                          f"({row.count} times in {ran} steps, {per_step:.0f} bytes per step) for {row.op}", where,
                          f"with tf.device('{row.to_device}'): ...  # make it where {row.op} reads it, or run "
                          f"{row.op} on {row.from_device}",
                          {"share": share, "bytes_per_step": per_step, "count": row.count}))
    return out[:3]


def _in_steps(steps: Steps, row: Any) -> bool:
    """Whether a transfer runs inside the steps: a node of the step function itself (Keras' train function,
    a custom loop's step), or an eager copy on the line the steps run or, in an eager loop, on a line of it."""
    if row.function:
        return function_name(row.function) == steps.name
    return row.source == steps.source or steps.kind == "eager-loop"


def _skew(steps: Steps, ops: Mapping[tuple[str, str], Any],
          lines: Mapping[tuple[str, str], Counter[str]]) -> list[Advice]:
    busy = {d: b for d, (b, _) in steps.per_device.items() if b > 0}
    if len(busy) < 2 or not steps.median_us:
        return []
    slow = max(busy, key=busy.__getitem__)
    kinds = {d: {op for (device, op) in ops if device == d} for d in busy}
    busy = {d: b for d, b in busy.items()
            if len(kinds[d] & kinds[slow]) >= REPLICAS * len(kinds[d] | kinds[slow])}  # replicas of the slowest
    if len(busy) < 2:
        return []
    common = {op for op in set.intersection(*(kinds[d] for d in busy))  # the replicated step's ops: what every
              if not is_input_op(op)}  # replica runs, the input pipeline's machinery left out
    replicated = {d: sum((ops[(d, op)][1] or 0.0) for op in common) for d in busy}
    slow = max(replicated, key=replicated.__getitem__)
    share_of = {d: replicated[d] / (sum(t or 0.0 for (device, _), (_, t) in ops.items() if device == d) or 1.0)
                for d in busy}
    busy = {d: b * share_of[d] for d, b in busy.items()}  # each device's busy time in steps, its replica work only
    others = median(b for d, b in busy.items() if d != slow)
    wall = steps.median_us * steps.count
    if busy[slow] < SKEW * others or (busy[slow] - others) < 0.02 * wall:
        return []
    mine = {op: time for (device, op), (_, time) in ops.items() if device == slow and time and op in common}
    extra = {op: time - median([t for (d, o), (_, t) in ops.items() if o == op and d != slow and d in busy] or [0.0])
             for op, time in mine.items()}
    op = max(extra, key=extra.__getitem__) if extra else ""
    mine_lines = lines.get((slow, op), Counter())
    theirs: Counter[str] = Counter()
    for device in busy:
        if device != slow:
            theirs.update(lines.get((device, op), Counter()))
    more = {line: n - theirs[line] / max(1, len(busy) - 1) for line, n in mine_lines.items()
            if "__autograph_generated_file" not in line and line != steps.source}
    if not more or max(more.values()) <= 0:
        return []  # no line of the user's inside the step differs: the framework's own work (a primary replica's)
    where = max(more, key=more.__getitem__)
    share = (busy[slow] - others) / wall
    return [Advice("replica-skew", severity(share),
                   f"{slow} computes {busy[slow] / others:.1f} x the other replicas' median"
                   + (f"; {op} makes most of the difference" if op else ""), where,
                   "# give every replica the same work (the same batch size, no branch on the replica id)",
                   {"share": share, "device": slow, "op": op})]


def _users(records: Sequence[Any]) -> tuple[set[str], dict[tuple[str, str], Counter[str]]]:
    """The function nodes the user's code made, and per (device, op) the user's lines that placed it there."""
    names: set[str] = set()
    lines: dict[tuple[str, str], Counter[str]] = {}
    for record in records:
        if record.origin.users and record.kind.ran:
            if record.name:
                names.add(record.name)
            if record.source:
                lines.setdefault((record.device, record.op), Counter())[record.source] += 1
    return names, lines


def advice(steps: Steps, transfers: Sequence[Any], ops: Mapping[tuple[str, str], Any],
           records: Sequence[Any] = (), parameters: Mapping[str, Parameters] = {}) -> list[Advice]:
    """Every rule that holds, most costly first.

    Args:
      steps: the block's `Steps`.
      transfers: its transfers (`PlacementLog.transfers()` rows).
      ops: its (device, op) -> (executions, µs) with timing.
      records: its records (a transfer into a node the user's code did not make is TensorFlow's; the lines
        that placed a replica's extra work name where it differs).
      parameters: function -> (parameter, what its trace held it to) (which argument made a function trace
        again; `tfplace.placement.functions._function_sources.traced_parameters`).
    """
    if not steps.count:
        return []
    users, lines = _users(records)
    shares = steps.count >= SHARES_FROM
    traces = _traces(steps.name, steps.source, records) if steps.name and records else []
    eager = sum(1 for r in records if r.kind == Kind.EXECUTE and not is_function_call(r.op))
    ops_per_step = eager / (steps.count + steps.warmup)
    found = [*(_input_bound(steps) if shares else []), *_host_sync(steps),
             *(_host(steps, ops_per_step) if shares else []),
             *_compile(steps, traces, _changed(traces, parameters), [p for p, _ in parameters.get(traces[-1], ())]
                       if traces else []),
             *_copies(steps, transfers, users), *(_skew(steps, ops, lines) if shares else [])]
    return sorted((a for a in found if a.source), key=lambda a: -a.evidence.get("share", 0.0))  # the user's lines
