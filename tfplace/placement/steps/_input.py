"""The input pipeline's stage that made the steps wait, and the user's line that built it.

A stage's time is its own: its events less its input's, an asynchronous stage's waits on its producers left
out and its function's runs on tf.data's threads counted (`tfplace.placement.profile._step_events`). The
profile names the dataset each stage iterates (`MapDataset:1`: the pipeline's dataset ops counted from its
source); the capture's eager records of dataset ops, in the order the program made them, carry the user's line.

Example:
    >>> from tfplace.placement.profile._step_events import Stage
    >>> stage = slowest([Stage("Iterator::Root::Map", "MapDataset:1", 900.0, 9, None)], [], 1000.0)
    >>> stage.dataset_op, stage.per_element_us, stage.prefetch
    ('Map', 100.0, False)
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

from tfplace.placement.records._records import Kind, PlacementRecord
from tfplace.placement.profile._step_events import ASYNC_STAGES, Stage
from tfplace.placement.steps._model import InputStage

__all__ = ["slowest"]

_DATASET = re.compile(r"([A-Za-z0-9_]+Dataset(?:V\d+)?):(\d+)")
# Dataset ops that start a pipeline (their position counts from 0).
_SOURCES = frozenset({"TensorSliceDataset", "TensorDataset", "RangeDataset", "GeneratorDataset", "TFRecordDataset",
                      "TFRecordDatasetV2", "TextLineDataset", "FixedLengthRecordDatasetV2", "SparseTensorSliceDataset",
                      "ZipDataset", "ConcatenateDataset", "RandomDataset", "RandomDatasetV2", "DataServiceDatasetV4",
                      "ListFilesDataset", "SaveDatasetV2", "LoadDataset", "DatasetFromGraph"})


def _is_dataset(op: str) -> bool:
    return bool(re.search(r"Dataset(V\d+)?$", op))


def _line(dataset: str, records: Sequence[PlacementRecord]) -> str:
    """The user's line that made the dataset op `dataset` names (`MapDataset:1`, or the first of a fusion)."""
    found = _DATASET.search(dataset)
    if not found:
        return ""
    op, position = found[1], int(found[2])
    made = [r for r in records if r.kind == Kind.EXECUTE and _is_dataset(r.op)]
    candidates, index = [], -1
    for record in made:
        index = 0 if record.op in _SOURCES else index + 1
        if record.op == op:
            candidates.append((index == position, record.source))
    placed = [source for at, source in candidates if at and source]
    if placed:
        return placed[-1]
    sources = [source for _, source in candidates if source]
    return sources[-1] if sources else ""


def slowest(stages: Sequence[Stage], records: Sequence[PlacementRecord], waited_us: float,
            steps_run: int = 0) -> Optional[InputStage]:
    """The stage with most time of its own, or, where none holds a tenth of the time the steps waited
    (the work ran on tf.data's threads, as a parallel map's does), the first asynchronous stage below the
    pipeline's root that is not a prefetch. None without stages. `steps_run`: the steps that consumed it."""
    timed = [s for s in stages if s.path.count("::") >= 2]  # below Iterator::Root
    if not timed:
        return None
    total = sum(s.own_us for s in timed)
    best = max(timed, key=lambda s: s.own_us)
    if best.own_us < 0.1 * waited_us:
        waits = sorted((s for s in timed if _op(s) in ASYNC_STAGES and _op(s) != "Prefetch"),
                       key=lambda s: s.path.count("::"))
        if waits:
            best = waits[0]
    parent = best.path.rpartition("::")[0]
    parallel = best.parallelism
    own = best.own_us >= 0.1 * waited_us  # its time is its own, not tf.data's threads'
    return InputStage(_op(best), _line(best.dataset, records), best.own_us / total if total else 0.0,
                      best.own_us / best.elements if best.elements else 0.0,
                      int(parallel) if isinstance(parallel, (int, float)) else None, "Prefetch" in parent.split("::"),
                      best.own_us / steps_run if own and steps_run else None)


def _op(stage: Stage) -> str:
    return stage.path.rpartition("::")[2]
