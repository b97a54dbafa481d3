"""What the Jobs tab shows, computed from store records: table rows, summaries, plot frames, samples, evaluations.

No Gradio here: these are plain functions, tested without a browser.
"""

from __future__ import annotations

import html
import shutil
import time
from pathlib import Path
from typing import Any

import pandas as pd

from backend.api import StudioAPI
from backend.performance import live_figures, performance_line
from backend.store import JobRecord, JobStatus

TABLE_COLUMNS = ["id", "owner", "status", "method", "model", "dataset", "queue", "progress", "ETA", "created"]
SAMPLE_COLUMNS = ["step", "prompt", "completion", "rewards", "advantage"]

# Which logged metrics each plot shows, per method (TRL's own metric names).
PLOTS: dict[str, dict[str, list[str]]] = {
    "sft": {"loss": ["loss"], "lr": ["learning_rate"], "method": ["mean_token_accuracy"], "extra": [], "length": []},
    "dpo": {
        "loss": ["loss"], "lr": ["learning_rate"],
        "method": ["rewards/margins", "rewards/accuracies"],
        "extra": [], "length": [],
    },
    "grpo": {
        "loss": ["loss"], "lr": ["learning_rate"],
        "method": ["reward", "reward_std", "frac_reward_zero_std"],  # + rewards/<name>/mean, added below
        "extra": ["kl", "completions/clipped_ratio", "tools/call_frequency", "tools/failure_frequency"],
        "length": ["completions/mean_length"],
    },
}
PLOT_NAMES = ("loss", "lr", "method", "extra", "length")


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def eta_text(seconds: float | None) -> str:
    """>>> eta_text(3725), eta_text(59), eta_text(None)
    ('1h 2m', '59s', '')
    """
    if seconds is None:
        return ""
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m"
    if seconds >= 60:
        return f"{seconds // 60}m {seconds % 60}s"
    return f"{seconds}s"


def progress_fraction(job: JobRecord) -> float:
    if job.status is JobStatus.succeeded:
        return 1.0
    p = job.progress or {}
    return min(1.0, p["step"] / p["total_steps"]) if p.get("total_steps") else 0.0


def choice(job: JobRecord) -> str:
    name = job.spec.output.run_name or job.spec.dataset.name
    return f"{job.id} · {job.spec.method.value} · {name} · {job.status.value}"


def table_rows(api: StudioAPI, jobs: list[JobRecord]) -> list[list[Any]]:
    rows = []
    for job in reversed(jobs):
        p = job.progress or {}
        progress = f"{p['step']}/{p['total_steps']}" if p.get("total_steps") else ""
        queue = api.queue_position(job.id) if job.status is JobStatus.queued else None
        rows.append([
            job.id, job.owner, job.status.value, job.spec.method.value, _short(job.spec.model.name_or_path, 40),
            _short(job.spec.dataset.name, 30), queue or "", progress,
            eta_text(p.get("eta_seconds")) if job.status is JobStatus.running else "",
            time.strftime("%Y-%m-%d %H:%M", time.localtime(job.created_at)),
        ])
    return rows


def progress_html(job: JobRecord) -> str:
    fraction = progress_fraction(job)
    p = job.progress or {}
    label = f"{p.get('step', 0)}/{p.get('total_steps') or '?'} steps"
    if job.status is JobStatus.running and p.get("eta_seconds") is not None:
        label += f" · ETA {eta_text(p['eta_seconds'])}"
    if p.get("loss") is not None:
        label += f" · loss {p['loss']:.4f}"
    return (
        f'<div class="studio-progress" data-status="{job.status.value}" data-fraction="{fraction:.3f}">'
        f'<div style="background:#e5e7eb;border-radius:6px;height:14px;overflow:hidden">'
        f'<div style="width:{fraction * 100:.1f}%;background:#6366f1;height:14px"></div></div>'
        f"<small>{html.escape(label)}</small></div>"
    )


def summary_markdown(api: StudioAPI, job: JobRecord, metrics: list[dict[str, Any]] | None = None) -> str:
    """The detail's heading lines; ``metrics`` (the job's logged rows) give a running job's latest speed figures."""
    lines = [f"**{job.id}** · {job.status.value} · {job.spec.method.value.upper()} of "
             f"`{job.spec.model.name_or_path}` on `{job.spec.dataset.name}` · owner {job.owner}"]
    if job.status is JobStatus.queued:
        lines.append(f"Place in the queue: {api.queue_position(job.id)}")
    if job.spec.model.parent_job_id:
        lines.append(f"Continues job {job.spec.model.parent_job_id}")
    if job.spec.environment.name:
        lines.append(f"Environment: {job.artifacts.get('environment') or job.spec.environment.name}")
    figures = performance_line(job.artifacts.get("performance") or live_figures(metrics or []))
    if figures:
        lines.append(f"Performance: {figures}")
    choices = (job.artifacts.get("auto_tune") or {}).get("choices")
    if choices:
        lines.append("Auto-tune: " + "; ".join(html.escape(choice) for choice in choices))
    if job.error:
        lines.append(f"**Error:** {html.escape(job.error.splitlines()[0])}")
        lines.append("```\n" + "\n".join(job.error.splitlines()[1:12]) + "\n```")
    hub = job.artifacts.get("hub")
    if hub:
        lines.append(f"On the Hub: [{hub['repo_id']}]({hub['url']})" + (" (private)" if hub.get("private") else ""))
    elif job.artifacts.get("hub_error"):
        lines.append(f"**Push to the Hub failed:** {html.escape(job.artifacts['hub_error'])} (the adapter is kept; "
                     "push again below)")
    for warning in job.artifacts.get("preflight_warnings") or []:
        lines.append(f"⚠️ {warning}")
    return "\n\n".join(lines)


def plot_frames(method: str, metrics: list[dict[str, Any]]) -> dict[str, pd.DataFrame | None]:
    """Long-format frames (step, value, metric) for each plot; None when there is nothing to draw yet."""
    wanted = {name: list(keys) for name, keys in PLOTS[method].items()}
    if method == "grpo":
        per_reward = sorted({k for row in metrics for k in row if k.startswith("rewards/") and k.endswith("/mean")})
        wanted["method"] += per_reward
    frames: dict[str, pd.DataFrame | None] = {}
    for name, keys in wanted.items():
        points = [
            {"step": row["step"], "value": float(row[k]), "metric": k}
            for row in metrics for k in keys
            if row.get("step") is not None and isinstance(row.get(k), (int, float))
        ]
        frames[name] = pd.DataFrame(points) if points else None
    return frames


def sample_rows(samples: list[dict[str, Any]], limit: int = 24) -> list[list[Any]]:
    rows = []
    for s in samples[-limit:][::-1]:
        prompt = s.get("prompt")
        prompt_text = prompt[-1]["content"] if isinstance(prompt, list) and prompt else prompt
        completion = s.get("completion")
        if isinstance(completion, list):
            parts = []
            for m in completion:
                text = m.get("content") or ""
                for call in m.get("tool_calls") or []:
                    fn = call.get("function", {})
                    text += f" [calls {fn.get('name')}({fn.get('arguments')})]"
                parts.append(f"{m.get('role')}: {text}")
            completion = " | ".join(parts)
        rewards = ", ".join(f"{k}={v:.2f}" for k, v in (s.get("rewards") or {}).items() if isinstance(v, (int, float)))
        advantage = s.get("advantage")
        rows.append([s.get("step"), _short(prompt_text or "", 80), _short(completion or "", 160), rewards,
                     f"{advantage:.2f}" if isinstance(advantage, (int, float)) else ""])
    return rows


def _table(title: str, result: dict[str, Any]) -> str:
    base, tuned = result.get("base") or {}, result.get("tuned") or {}
    keys = list(dict.fromkeys([*tuned, *base]))
    lines = [f"**{title}**", "", "| metric | base | tuned |", "| --- | --- | --- |"]
    for key in keys:
        fmt = (lambda v: f"{v:.4f}" if isinstance(v, (int, float)) else "")
        lines.append(f"| {key} | {fmt(base.get(key))} | {fmt(tuned.get(key))} |")
    return "\n".join(lines)


def evaluation_markdown(job: JobRecord) -> str:
    parts = []
    evaluation = job.artifacts.get("evaluation")
    if evaluation:
        parts.append(f"Evaluation failed: {evaluation['error']}" if "error" in evaluation else
                     _table(f"Before/after on {evaluation.get('rows')} held-out rows", evaluation))
    env_eval = job.artifacts.get("environment_evaluation")
    if env_eval:
        parts.append(f"Environment evaluation failed: {env_eval['error']}" if "error" in env_eval else
                     _table(f"Environment success over {env_eval.get('episodes')} episodes (same seeds)", env_eval))
    return "\n\n".join(parts)


def adapter_archive(api: StudioAPI, job: JobRecord) -> Path | None:
    """A zip of the job's saved adapter for download, made once per job."""
    adapter = job.artifacts.get("adapter_dir")
    if job.status is not JobStatus.succeeded or not adapter or not Path(adapter).is_dir():
        return None
    target = api.paths.job_dir(job.id) / f"adapter-{job.id}.zip"
    if not target.is_file():
        partial = shutil.make_archive(str(target.with_suffix("")) + ".partial", "zip", adapter)
        Path(partial).rename(target)
    return target


REMOTE_COLUMNS = ["HF job id", "owner", "method", "model", "flavor", "stage", "sent"]


def remote_rows(records) -> list[list[Any]]:
    return [[r.hf_job_id, r.owner, r.spec.get("method"), _short(r.spec.get("model", {}).get("name_or_path", ""), 40),
             r.flavor, r.last_stage or "", time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created_at))]
            for r in reversed(records)]
