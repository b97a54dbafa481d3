"""The benchmarks a job can name (lm-eval presets, the demo models' offline tasks, a JSONL of the user's rows) and the
report built from per-item scores: tuned minus start on the same items, a paired interval, and the skills lost.

>>> task_kind("arc_easy"), task_kind("studio_arith"), task_kind("rows.jsonl"), task_kind("nope")
('preset', 'builtin', 'file', None)
>>> drop_sentence("arc_easy", -0.06, 0.03, "general knowledge")
'arc_easy -6 points ±3: it lost general knowledge.'
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from backend.core.artifacts import BenchmarkReport, BenchmarkScore
from backend.core.learning import judge, paired_interval
from backend.core.uploads import is_upload_id

BENCHMARK_ASSETS = Path(__file__).resolve().parents[1] / "assets" / "benchmarks"
FILE_SUFFIXES = (".jsonl", ".json")
# A JSONL of the user's rows: what it measures, said in the drop sentence.
OWN_ROWS_SKILL = "the task of its own held-out rows"


@dataclass(frozen=True)
class BenchmarkTask:
    """A task a user can pick: its lm-eval name, the metric read, what skill it measures and how long it takes.

    ``cost`` is what one item asks of the model (lm-eval's requests per item): the time per 100 items on real models
    was not measured here (no Hub, no GPU on the development machines), so the catalogue says the work, not a time.
    ``seconds_per_100`` is a figure measured on the demo model (benchmarks/lm_eval_speed.py), None when not measured.
    """

    name: str
    metric: str
    skill: str
    default_limit: int
    cost: str
    metric_filter: str = "none"
    chat: bool = False
    seconds_per_100: float | None = None
    dataset: str = ""  # the Hub dataset lm-eval reads (the model card's model-index names it); "" for local files


PRESETS: dict[str, BenchmarkTask] = {
    task.name: task
    for task in (
        BenchmarkTask(
            "arc_easy", "acc", "general knowledge", 200, "4 log-likelihoods of short answers", dataset="allenai/ai2_arc"
        ),
        BenchmarkTask(
            "hellaswag",
            "acc_norm",
            "commonsense completion",
            200,
            "4 log-likelihoods of a sentence",
            dataset="Rowan/hellaswag",
        ),
        BenchmarkTask(
            "gsm8k",
            "exact_match",
            "grade-school maths",
            100,
            "1 greedy answer of up to 256 tokens, 5 examples in the prompt",
            metric_filter="strict-match",
            dataset="openai/gsm8k",
        ),
        BenchmarkTask(
            "mmlu_high_school_mathematics",
            "acc",
            "high-school mathematics",
            100,
            "4 log-likelihoods of a letter",
            dataset="cais/mmlu",
        ),
        BenchmarkTask(
            "mmlu_college_biology", "acc", "college biology", 100, "4 log-likelihoods of a letter", dataset="cais/mmlu"
        ),
        BenchmarkTask(
            "mmlu_us_foreign_policy",
            "acc",
            "US foreign policy",
            100,
            "4 log-likelihoods of a letter",
            dataset="cais/mmlu",
        ),
        BenchmarkTask(
            "ifeval",
            "prompt_level_strict_acc",
            "following instructions",
            100,
            "1 greedy answer of up to 1280 tokens",
            dataset="google/IFEval",
        ),
    )
}

# The offline tasks for the demo models, shipped in backend/assets/benchmarks/ (scripts/build_benchmarks.py writes
# them from backend/data/arith.py): the arithmetic the arith model was pre-trained on (problems of the pre-training
# part, which no studio dataset holds), and picking the right result among four by log-likelihood, a form no demo
# recipe trains (they train greedy answers on the studio part). The arith model knows nothing but arithmetic (it picks
# "the larger of two numbers" at chance: scripts/build_benchmarks.py), so that is the skill a job can keep or lose.
# seconds_per_100: measured on the arith model, 2 CPU cores, the steady (second) side of benchmarks/lm_eval_speed.py
# (docs/benchmarks.md, 2026-12-05).
BUILTIN_TASKS: dict[str, BenchmarkTask] = {
    task.name: task
    for task in (
        BenchmarkTask(
            "studio_arith",
            "accuracy",
            "arithmetic",
            100,
            "1 greedy answer of up to 32 tokens",
            chat=True,
            seconds_per_100=1.1,
        ),
        BenchmarkTask(
            "studio_choice",
            "acc",
            "recognising a right result",
            200,
            "4 log-likelihoods of a short answer",
            chat=True,
            seconds_per_100=1.2,
        ),
    )
}
OWN_ROWS = BenchmarkTask("own_rows", "accuracy", OWN_ROWS_SKILL, 100, "1 greedy answer of up to 256 tokens", chat=True)


def task_kind(name: str) -> str | None:
    """``preset``, ``builtin``, ``upload`` (an upload id), ``file`` (a JSONL path), or None for an unknown name."""
    if name in PRESETS:
        return "preset"
    if name in BUILTIN_TASKS:
        return "builtin"
    if is_upload_id(name):
        return "upload"
    if name.endswith(FILE_SUFFIXES):
        return "file"
    return None


def task_info(name: str) -> BenchmarkTask:
    """The catalogue's entry for a task name; a user's JSONL (path or upload) reads as its own-rows task."""
    return PRESETS.get(name) or BUILTIN_TASKS.get(name) or OWN_ROWS


def task_problem(name: str, uploads_dir: Path | None, may_read_files: bool) -> str | None:
    """Why ``name`` cannot be benchmarked, as one sentence for the task field; None when it can."""
    kind = task_kind(name)
    if kind is None:
        known = ", ".join([*PRESETS, *BUILTIN_TASKS])
        return (
            f"benchmarks.tasks: {name[:80]!r} is not a task; pick one of {known}, or a .jsonl of prompts with a "
            "solution column"
        )
    if kind == "file":
        if not may_read_files:
            return f"benchmarks.tasks: {name[:80]!r}: only the local user may name files on this machine; upload it"
        if not Path(name).expanduser().is_file():
            return f"benchmarks.tasks: {name[:80]!r} is not a file on this machine"
    if kind == "upload" and (uploads_dir is None or not (uploads_dir / name).is_file()):
        return f"benchmarks.tasks: {name[:80]!r} is not one of your uploads; upload the JSONL again"
    if kind in ("file", "upload"):
        path = uploads_dir / name if kind == "upload" and uploads_dir else Path(name).expanduser()
        return rows_problem(path, name)
    return None


def rows_problem(path: Path, name: str) -> str | None:
    """Whether a JSONL's first row has what the own-rows task reads (``prompt`` and ``solution``), as a sentence: a
    file without a solution would otherwise score every answer 0 without a word."""
    try:
        with path.open("rb") as file:
            first = file.readline(1 << 20).strip()
        row = json.loads(first) if first else None
    except (OSError, ValueError):
        row = None
    if not isinstance(row, dict) or "prompt" not in row or "solution" not in row:
        return f"benchmarks.tasks: {name[:80]!r} must be JSON lines with a prompt and a solution column"
    return None


def points(value: float) -> str:
    """A share as signed points: ``-6``, ``+12``, ``0``."""
    shown = round(value * 100)
    return f"{shown:+d}" if shown else "0"


def drop_sentence(task: str, delta: float, ci95: float | None, skill: str) -> str:
    """A lost skill in one sentence: ``arc_easy -6 points ±3: it lost general knowledge.``"""
    interval = f" ±{round(ci95 * 100)}" if ci95 is not None else ""
    return f"{task} {points(delta)} points{interval}: it lost {skill}."


def outcome_word(delta: float | None, ci95: float | None, higher_is_better: bool = True) -> str:
    """What became of a task's skill, in one word, by the verdict's own rule (the paired interval must exclude zero):
    ``improved`` for a sure rise, ``lost`` for a sure fall, ``kept`` for no sure change; "" with nothing to compare.

    >>> outcome_word(0.21, 0.09), outcome_word(-0.2, 0.05), outcome_word(0.02, 0.09), outcome_word(None, None)
    ('improved', 'lost', 'kept', '')
    """
    if delta is None:
        return ""
    return {"improved": "improved", "worse": "lost"}.get(judge(delta, ci95, higher_is_better), "kept")


def task_score(
    task: BenchmarkTask, name: str, per_side: Mapping[str, Mapping[int, float]], stderr: Mapping[str, float | None]
) -> BenchmarkScore:
    """One task's score from each side's per-item values (item id -> value), paired on the items every side has."""
    items = sorted(set.intersection(*(set(values) for values in per_side.values()))) if per_side else []
    means = {side: sum(values[i] for i in items) / len(items) for side, values in per_side.items() if items}
    start = "start" if "start" in per_side else "base"
    delta = ci95 = None
    if "tuned" in per_side and start in per_side and items:
        delta = means["tuned"] - means[start]
        ci95 = paired_interval([per_side[start][i] for i in items], [per_side["tuned"][i] for i in items])
    # Every catalogued metric is a share of items answered right: a fall is a loss, and a sure one when the
    # paired interval excludes zero (the verdict's own rule, so a skill lost here is a guard that fell there).
    word = outcome_word(delta, ci95)
    dropped = word == "lost"
    if dropped:
        sentence = drop_sentence(name, delta or 0.0, ci95, task.skill)
    elif delta is not None:  # kept, or improved: a sure rise is no mere keeping
        interval = f" ±{round(ci95 * 100)}" if ci95 is not None else ""
        sentence = f"{name} {points(delta)} points{interval} against the {start}: {task.skill} {word}."
    else:
        shown = ", ".join(f"{side} {round(value * 100)}%" for side, value in means.items())
        sentence = f"{name}: {shown or 'no items scored'}."
    return BenchmarkScore(
        metric=task.metric,
        skill=task.skill,
        n=len(items),
        base=means.get("base"),
        start=means.get("start"),
        tuned=means.get("tuned"),
        base_stderr=stderr.get("base"),
        start_stderr=stderr.get("start"),
        tuned_stderr=stderr.get("tuned"),
        delta=delta,
        ci95=ci95,
        dropped=dropped,
        sentence=sentence,
    )


def build_report(
    scores: Mapping[str, BenchmarkScore], limit: int | None, scored: str, seconds: float | None = None
) -> BenchmarkReport:
    """The ``benchmarks`` artifact from each task's score; ``drops`` names every skill lost."""
    drops = [score.sentence for score in scores.values() if score.dropped]
    return BenchmarkReport(tasks=dict(scores), limit=limit, drops=drops, scored=scored, seconds=seconds)


def compare_rows(reports: Sequence[tuple[str, BenchmarkReport]]) -> list[list[str]]:
    """Several jobs on the same benchmarks, one row per (job, task): tuned (or base) score, delta and interval."""
    rows = []
    for job_id, report in reports:
        for name, score in report.tasks.items():
            value = score.tuned if score.tuned is not None else score.base
            rows.append(
                [
                    job_id,
                    name,
                    f"{value * 100:.0f}%" if value is not None else "",
                    f"{points(score.delta)} ±{round((score.ci95 or 0) * 100)}" if score.delta is not None else "",
                    outcome_word(score.delta, score.ci95, score.higher_is_better),
                ]
            )
    return rows
