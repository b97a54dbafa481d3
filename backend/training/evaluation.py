"""Before/after evaluation on held-out rows: did training help? Each side is the same loaded model with another
adapter: the tuned one, the parent job's adapter where a staged job started (``start``), and none (the base).

Every method's evaluation returns, per side, its summary scores and the per-row values (``per_row``) the learning
verdict (backend/core/learning.py) draws its interval from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from backend.core.artifacts import BenchmarkReport, GuardCheck, LearningVerdict
from backend.core.learning import LearningMetric, guard, guard_check, guarded, no_signal_verdict, shown, verdict
from backend.core.spec import JobSpec
from backend.methods.table import support
from backend.models.loading import adapter_for_head, load_lora_only
from backend.models.mixed_batch import BASE_ADAPTER, adapter_name
from backend.models.scoring import PER_ROW, reporting_progress

# The adapter name the parent's adapter is loaded under for the evaluation of a staged job.
START_ADAPTER = "studio_start"
# Where the evaluation keeps the scores of models a method scores for reference on the same rows (no per-row values).
REFERENCES = "references"


def _sides(model, compare_base: bool) -> list[str | None]:
    """The adapter of each side to score, tuned first, then the start (a parent's adapter) if loaded, then the base;
    None alone for a model without an adapter (tuned only)."""
    tuned = adapter_name(model)
    if tuned is None:
        return [None]
    sides = [tuned]
    if START_ADAPTER in getattr(model, "peft_config", {}):
        sides.append(START_ADAPTER)
    return sides + [BASE_ADAPTER] if compare_base else sides


def side_label(side: str | None) -> str:
    """``tuned``, ``start`` or ``base``: what a side is called in the stored evaluation."""
    return {BASE_ADAPTER: "base", START_ADAPTER: "start"}.get(side, "tuned")


def load_start_adapter(model, parent_adapter) -> bool:
    """Load a staged job's starting adapter (its parent's) beside the tuned one, so the evaluation scores where the job
    started; False when there is nothing to load (no parent, or no PEFT model)."""
    if parent_adapter is None or not hasattr(model, "load_adapter"):
        return False
    if START_ADAPTER not in model.peft_config:
        config, new_head = adapter_for_head(parent_adapter, model.peft_config["default"].task_type, inference=True)
        if new_head:  # the parent's LoRA under this job's head, as it started (a reward model on an SFT job's LoRA)
            model.add_adapter(START_ADAPTER, config)
            load_lora_only(model, parent_adapter, START_ADAPTER)
        else:
            model.load_adapter(str(parent_adapter), adapter_name=START_ADAPTER, is_trainable=False)
    return True


def sides_label(sides: Sequence[str | None]) -> str:
    """The sides an evaluation scores, as the progress says them: "base and tuned", "base, start and tuned".

    >>> sides_label(["default", BASE_ADAPTER]), sides_label(["default", START_ADAPTER, BASE_ADAPTER])
    ('base and tuned', 'base, start and tuned')
    """
    labels = [side_label(side) for side in reversed(sides)]
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def evaluation_sides(model, spec: JobSpec, parent_adapter=None) -> list[str | None]:
    """The sides the evaluation will score (the start's adapter loaded first where a staged job has one)."""
    load_start_adapter(model, parent_adapter)
    return _sides(model, spec.eval.compare_base)


def evaluate_before_after(
    trainer,
    spec: JobSpec,
    held_out,
    parent_adapter=None,
    on_rows: Callable[[int, int, str], None] | None = None,
) -> dict[str, Any]:
    """Scores of the base, the start (a staged job's parent adapter) and the tuned model on the same held-out rows,
    by the job's method's evaluation.

    All come from the trainer's model, loaded once: the base is that model with its adapter off, the start the
    parent's adapter loaded beside the tuned one. Methods that score sequences score every side in the same batches
    (PEFT's mixed-adapter rows). ``per_row`` holds each side's per-row values for the learning verdict.
    ``on_rows(k, n, sides)`` is told, as each batch is scored, that k of the n rows are scored on every side of
    ``sides`` ("base and tuned") in the current pass over them.
    """
    model = trainer.model
    model.eval()
    rows = [held_out[i] for i in range(len(held_out))]
    result: dict[str, Any] = {"rows": len(rows), PER_ROW: {}}
    sides = evaluation_sides(model, spec, parent_adapter)
    sides_text = sides_label(sides)

    def on_pass(share: float) -> None:
        if on_rows is not None:
            on_rows(round(share * len(rows)), len(rows), sides_text)

    on_pass(0.0)
    with reporting_progress(on_pass):
        scores = support(spec.method).evaluate(trainer, spec, rows, sides)
    for side in sides:
        label = side_label(side)
        side_scores = dict(scores[side])
        result[PER_ROW][label] = side_scores.pop(PER_ROW, {})
        result[label] = side_scores
    for name, reference in scores.items():  # a model scored for reference (distillation's teacher), not a side
        if name not in sides:
            result.setdefault(REFERENCES, {})[name] = {k: v for k, v in reference.items() if k != PER_ROW}
    return result


def reference_scores(evaluation: dict[str, Any], metric: LearningMetric) -> str | None:
    """What the models the method scored for reference got on the same rows, for the verdict's sentence.

    >>> reference_scores({REFERENCES: {"teacher": {"accuracy": 0.59}}}, LearningMetric("accuracy", "acc", rate=True))
    'the teacher scores 59% on the same rows'
    """
    said = [
        f"the {name} scores {shown(values[metric.key], metric.rate)}"
        for name, values in (evaluation.get(REFERENCES) or {}).items()
        if values.get(metric.key) is not None
    ]
    return f"{', '.join(said)} on the same rows" if said else None


def learning_verdict(
    spec: JobSpec,
    evaluation: dict[str, Any] | None,
    environment: dict[str, Any] | None,
    no_signal: str | None = None,
    extra_guards: Sequence[GuardCheck] = (),
):
    """The job's learning verdict from its evaluations (an environment's success rate first, else the method's first
    declared metric the evaluation has), guarded by the method's capability guards the evaluation scored per row (and
    ``extra_guards``, e.g. benchmarks). A run with no signal is ``no_signal`` even when no rows were scored; else None
    when no evaluation has per-row scores of two sides."""
    method = support(spec.method)
    candidates: list[tuple[LearningMetric, dict[str, Any]]] = []
    if environment and PER_ROW in environment:
        candidates.append((SUCCESS_RATE, environment))
    if evaluation and PER_ROW in evaluation:
        candidates += [(metric, evaluation) for metric in method.learning_metrics(spec)]
    for metric, result in candidates:
        per_row = result[PER_ROW]
        start = "start" if "start" in per_row else "base"
        if metric.key not in per_row.get("tuned", {}) or metric.key not in per_row.get(start, {}):
            continue
        groups = per_row["tuned"].get("groups")
        return verdict(
            metric,
            per_row[start][metric.key],
            per_row["tuned"][metric.key],
            groups=[bool(g) for g in groups] if groups else None,
            base_rows=per_row.get("base", {}).get(metric.key),
            start="parent" if start == "start" else "base",
            no_signal=no_signal,
            guards=[*capability_guards(spec, evaluation, skip=metric.key), *extra_guards],
            detail=environment_detail(result, start) if metric is SUCCESS_RATE else reference_scores(result, metric),
        )
    if no_signal:
        first = SUCCESS_RATE if spec.environment.name else next(iter(method.learning_metrics(spec)), SUCCESS_RATE)
        return guarded(no_signal_verdict(first, no_signal), extra_guards)
    fell = [g for g in extra_guards if g.fell]
    if fell:  # no held-out rows, but a benchmark says the model lost a skill: that is a verdict all the same
        text = "No held-out rows were scored by the method's own metric."
        unjudged = LearningVerdict(
            metric=fell[0].metric, label=fell[0].label, verdict="no_change", sentence=text, method_sentence=text
        )
        return guarded(unjudged, extra_guards)
    return None


def tool_use_change(environment: dict[str, Any], start: str = "base") -> str | None:
    """How tool use changed over the environment's evaluation episodes, start -> tuned, for the verdict's sentence: a
    success rate that stayed put while the model learned to call the tools is still news.

    >>> tool_use_change({"base": {"tool_calls_per_episode": 0.1}, "tuned": {"tool_calls_per_episode": 0.85}})
    'tool calls per episode 0.1 -> 0.85'
    >>> tool_use_change({"tuned": {"tool_calls_per_episode": 1.0}}) is None
    True
    """
    before = (environment.get(start) or {}).get("tool_calls_per_episode")
    after = (environment.get("tuned") or {}).get("tool_calls_per_episode")
    if before is None or after is None:
        return None
    return f"tool calls per episode {before:.3g} -> {after:.3g}"


def environment_detail(environment: dict[str, Any], start: str = "base") -> str | None:
    """What the environment verdict's sentence adds after its success rate: the change in tool use, and where the
    episodes came from (``episodes_note``)."""
    said = [text for text in (tool_use_change(environment, start), episodes_note(environment)) if text]
    return "; ".join(said) or None


def episodes_note(environment: dict[str, Any]) -> str | None:
    """Whether the environment's evaluation episodes were held out, as the verdict says it: the environment's test
    split, or (it has none) the dataset's rows, which the environment does not hold out.

    >>> episodes_note({"episodes_from": "test split", "held_out": True, "split": "test"})
    "the episodes were the environment's held-out 'test' split"
    >>> episodes_note({"episodes_from": "training rows", "held_out": False})
    'the episodes were not held out: the environment has no test split and they replayed the training rows'
    >>> episodes_note({}) is None
    True
    """
    episodes = environment.get("episodes_from")
    if environment.get("held_out"):
        return f"the episodes were the environment's held-out {environment.get('split') or 'test'!r} split"
    if episodes == "training rows":
        return "the episodes were not held out: the environment has no test split and they replayed the training rows"
    if episodes == "held-out rows":
        return (
            "the episodes were not held out by the environment (it has no test split): they started from the "
            "dataset's held-out rows"
        )
    return None


def capability_guards(spec: JobSpec, evaluation: dict[str, Any] | None, skip: str | None = None) -> list[GuardCheck]:
    """The method's guards the evaluation scored per row on the start and the tuned side (``skip``: the verdict's own
    metric, which is no guard of itself)."""
    per_row = (evaluation or {}).get(PER_ROW) or {}
    start = "start" if "start" in per_row else "base"
    checks = []
    for metric in support(spec.method).guards(spec):
        before, after = per_row.get(start, {}).get(metric.key), per_row.get("tuned", {}).get(metric.key)
        if metric.key == skip or before is None or after is None or len(before) != len(after) or not after:
            continue
        checks.append(guard(metric, before, after))
    return checks


def benchmark_guards(report: BenchmarkReport | None) -> list[GuardCheck]:
    """The job's benchmarks as guards of its verdict: each task's tuned score against where the job started, on the
    same items with their paired interval; a skill lost is a guard that fell."""
    checks: list[GuardCheck] = []
    for name, score in (report.tasks if report is not None else {}).items():
        before = score.start if score.start is not None else score.base
        if before is None or score.tuned is None:
            continue
        label = f"benchmark {name} ({score.skill})" if score.skill else f"benchmark {name}"
        metric = LearningMetric(f"bench:{name}", label, higher_is_better=score.higher_is_better, rate=True)
        checks.append(guard_check(metric, before, score.tuned, score.ci95, score.n))
    return checks


SUCCESS_RATE = LearningMetric("success", "environment success rate", rate=True)
