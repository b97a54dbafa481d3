"""The job's ETA: training steps left at a smoothed step time, plus the before/after evaluation still ahead.

The step time is the mean of the last :data:`WINDOW` steps, each first capped at :data:`OUTLIER_CAP` times their
median: one slow step (a checkpoint save, a long GRPO completion) moves it little, so the ETA does not swing, while
steps that stay slower take over the median and are followed within a window. The first step (loading,
compilation, warm-up) is left out once a second one is known.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

# How many recent steps the step time is read from, and the multiple of their median a single step counts for at most.
WINDOW = 15
OUTLIER_CAP = 2.0
# Sequences of one evaluation batch cost about this many training steps' worth of one training batch: a training
# step is a forward and backward pass (about three forwards) per row; the evaluation runs a few forwards per row
# and side (the loss, the per-token loss, greedy answers of a few tokens with a cache).
EVAL_BATCH_STEPS = 1.0


def smoothed_step_seconds(step_seconds: Sequence[float]) -> float | None:
    """The smoothed time of one training step from each step's own time (None before the first step).

    >>> smoothed_step_seconds([9.0, 1.0, 1.0]), smoothed_step_seconds([])
    (1.0, None)
    """
    times = list(step_seconds[1:] if len(step_seconds) > 1 else step_seconds)[-WINDOW:]
    if not times:
        return None
    median = statistics.median(times)
    return sum(min(seconds, OUTLIER_CAP * median) for seconds in times) / len(times)


def evaluation_seconds(rows: int, sides: int, batch_size: int, step_seconds: float) -> float:
    """An estimate of the evaluation's time before it starts, from the training step time: its ``rows`` held-out
    rows on ``sides`` sides, as many batches as a training step's, each costing about :data:`EVAL_BATCH_STEPS` steps.

    >>> evaluation_seconds(256, 2, 16, 0.5)
    16.0
    """
    if rows <= 0:
        return 0.0
    batches = rows * max(sides, 1) / max(batch_size, 1)
    return batches * EVAL_BATCH_STEPS * step_seconds


def training_eta(
    step_seconds: Sequence[float], steps_left: int, eval_rows: int = 0, eval_sides: int = 2, batch_size: int = 1
) -> float | None:
    """Seconds until the job ends: the steps left at the smoothed step time, and the evaluation of ``eval_rows``
    held-out rows still ahead (None before the first step).

    >>> training_eta([1.0, 1.0], 10), training_eta([1.0, 1.0], 0, eval_rows=32, batch_size=16) > 0
    (10.0, True)
    """
    step = smoothed_step_seconds(step_seconds)
    if step is None:
        return None
    return max(steps_left, 0) * step + evaluation_seconds(eval_rows, eval_sides, batch_size, step)


def evaluating_eta(elapsed: float, done: int, total: int, estimate: float | None = None) -> float | None:
    """Seconds left of an evaluation that scored ``done`` of ``total`` rows in ``elapsed`` seconds: the per-row cost
    measured so far, or, before the first rows are scored, what is left of the ``estimate`` made before it started.

    >>> evaluating_eta(10.0, 64, 256), evaluating_eta(2.0, 0, 256, estimate=20.0)
    (30.0, 18.0)
    """
    if done > 0:
        return elapsed / done * max(total - done, 0)
    if estimate is None:
        return None
    return max(estimate - elapsed, 0.0)
