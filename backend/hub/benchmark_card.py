"""A job's benchmarks in its model card: a table of base, start and tuned with the skills lost, and the Hub's
``model-index`` results (huggingface_hub's EvalResult: task, dataset, metric and value per lm-eval task)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from backend.core.benchmarks import task_info, task_kind

if TYPE_CHECKING:
    from huggingface_hub import EvalResult

    from backend.core.artifacts import BenchmarkReport


def _percent(value: float | None, stderr: float | None = None) -> str:
    if value is None:
        return "-"
    return f"{value * 100:.1f}%" + (f" ± {stderr * 100:.1f}" if stderr is not None else "")


def benchmark_lines(report: BenchmarkReport | None) -> list[str]:
    """The card's "Benchmarks" section (empty without a report, or a line saying why it failed)."""
    if report is None:
        return []
    if report.error:
        return ["## Benchmarks", "", f"The benchmarks could not run: {report.error}", ""]
    lines = [
        "## Benchmarks",
        "",
        "Scored with [lm-evaluation-harness](https://github.com/EleutherAI/lm-evaluation-harness) on the same items "
        "for every side (± is lm-eval's standard error; the change's interval is a paired bootstrap over the items).",
        "",
        "| task | metric | items | base | start | tuned | change |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, s in report.tasks.items():
        change = f"{s.delta * 100:+.1f} ± {(s.ci95 or 0) * 100:.1f} points" if s.delta is not None else "-"
        lines.append(
            f"| {name} | {s.metric} | {s.n} | {_percent(s.base, s.base_stderr)} | {_percent(s.start, s.start_stderr)} "
            f"| {_percent(s.tuned, s.tuned_stderr)} | {change}{' (lost)' if s.dropped else ''} |"
        )
    lines.append("")
    if report.drops:
        lines += ["Skills lost: " + " ".join(report.drops), ""]
    return lines


def benchmark_eval_results(report: BenchmarkReport | None) -> list[EvalResult] | None:
    """The tuned model's scores as the Hub's ``model-index`` results (None when there are none to index)."""
    if report is None or report.error:
        return None
    from huggingface_hub import EvalResult

    results = []
    for name, score in report.tasks.items():
        value = score.tuned if score.tuned is not None else score.base
        if value is None:
            continue
        info = task_info(name)
        local = task_kind(name) in ("file", "upload")
        dataset = info.dataset or ("own held-out rows" if local else name)
        results.append(
            EvalResult(
                task_type="text-generation",
                dataset_type=dataset,
                dataset_name=name.rsplit("/", 1)[-1],
                metric_type=score.metric,
                metric_value=round(value, 4),
                metric_name=f"{score.metric} ({score.n} items)",
            )
        )
    return results or None
