"""What the Jobs tab shows of a job's benchmarks (lm-eval): a table per task with a bar per side, the skills lost, and
several jobs side by side for the compare view. No Gradio here: plain functions, tested without a browser."""

from __future__ import annotations

from backend.api import BenchmarkReport, JobRecord, benchmark_compare_rows

BAR_WIDTH = 20
SIDES = ("base", "start", "tuned")


def bar(value: float | None) -> str:
    """A share as a text bar of ``BAR_WIDTH`` cells and its percent: ``██████░░░░ 60%``.

    >>> bar(0.5)[:4], bar(0.5)[-3:], bar(None)
    ('████', '50%', '')
    """
    if value is None:
        return ""
    filled = round(max(0.0, min(1.0, value)) * BAR_WIDTH)
    return "█" * filled + "░" * (BAR_WIDTH - filled) + f" {value * 100:.0f}%"


def _stderr(value: float | None) -> str:
    return f" ±{value * 100:.0f}" if value is not None else ""


def benchmarks_markdown(job: JobRecord) -> str:
    """The job's benchmarks as Markdown: one row per task and side with its bar and stderr, then each task's outcome
    (tuned minus start, paired interval) and the skills lost; empty when the job has none."""
    report: BenchmarkReport | None = job.artifacts.benchmarks
    if report is None:
        return ""
    if report.error:
        return f"Benchmarks failed: {report.error}"
    head = f"**Benchmarks** (lm-evaluation-harness, {report.scored or 'this job'}, same items on every side)"
    rows = ["| task | side | score | |", "| --- | --- | --- | --- |"]
    for name, score in report.tasks.items():
        for side in SIDES:
            value = getattr(score, side)
            if value is not None:
                stderr = _stderr(getattr(score, f"{side}_stderr"))
                rows.append(f"| {name} ({score.n} items) | {side} | `{bar(value)}`{stderr} | {score.metric} |")
    outcomes = [f"- {'⚠️ ' if score.dropped else ''}{score.sentence}" for score in report.tasks.values()]
    lost = [f"**Skills lost:** {' '.join(report.drops)}"] if report.drops else []
    return "\n\n".join([head, "\n".join(rows), "\n".join(outcomes), *lost])


def benchmarks_compare_markdown(jobs: list[JobRecord]) -> str:
    """Several jobs on their benchmarks, one row per (job, task); empty when none of them has benchmarks."""
    reports = [(job.id, job.artifacts.benchmarks) for job in jobs if job.artifacts.benchmarks]
    rows = benchmark_compare_rows([(job_id, report) for job_id, report in reports if report is not None])
    if not rows:
        return ""
    lines = ["| job | task | score | change | skill |", "| --- | --- | --- | --- | --- |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "**Benchmarks**\n\n" + "\n".join(lines)
