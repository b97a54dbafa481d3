"""What the Jobs tab shows, computed from store records: table rows, summaries, which actions a job allows,
evaluations (plots, log rows and samples are in ``monitor.py``).

No Gradio here: these are plain functions, tested without a browser.
"""

from __future__ import annotations

import html
import ipaddress
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.api import (
    EVALUATING,
    JobRecord,
    JobStatus,
    StudioAPI,
    drift_text,
    judge_warnings,
    live_figures,
    performance_line,
    progress_text,
    status_text,
)
from components.train.forecast_views import forecast_line
from components.train.form import labelled_warning

TABLE_COLUMNS = [
    "id",
    "run name",
    "owner",
    "status",
    "method",
    "model",
    "dataset",
    "queue",
    "progress",
    "ETA",
    "created",
]
EMPTY_JOBS = "No jobs yet: queue one in the Train tab, then follow it here."
# The learning verdict's mark, as the summary shows it (backend/core/learning.py decides the verdict).
VERDICT_MARKS = {"improved": "✅", "no_change": "➖", "worse": "⚠️", "regressed": "❌", "no_signal": "🚫"}


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def eta_text(seconds: float | None) -> str:
    """A duration as the table shows it.

    >>> eta_text(3725), eta_text(59), eta_text(None)
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
    """How far a job got, 0 to 1 (1 once it succeeded)."""
    if job.status is JobStatus.succeeded:
        return 1.0
    p = job.progress or {}
    return min(1.0, p["step"] / p["total_steps"]) if p.get("total_steps") else 0.0


def status_label(job: JobRecord) -> str:
    """A job's status as people read it everywhere in the tab: a success that learned nothing says so.

    >>> from types import SimpleNamespace as J
    >>> status_label(J(status=JobStatus.succeeded, artifacts=J(learning={"verdict": "no_signal"})))
    'succeeded - learned nothing'
    >>> status_label(J(status=JobStatus.running, artifacts=J(learning=None)))
    'running'
    """
    return status_text(job.status.value, job.artifacts.learning)


def method_label(job: JobRecord) -> str:
    """``eval`` for an eval-only job (its spec's method is not used), else the method: the spec's ``kind``."""
    return job.spec.kind


def data_label(job: JobRecord) -> str:
    """What a job reads: an eval-only job's benchmark tasks, an export job's job and format, else its dataset."""
    if job.spec.export is not None:
        export = job.spec.export
        return f"job {export.job_id} as {export.format}" + (f" {export.gguf_type}" if export.format == "gguf" else "")
    return ", ".join(job.spec.benchmarks.tasks) if job.spec.evaluate is not None else job.spec.dataset.name


def choice(job: JobRecord) -> str:
    """The picker's label of a job: "<id> · <method> · <run name or dataset> · <status>"."""
    name = job.spec.output.run_name or data_label(job)
    return f"{job.id} · {method_label(job)} · {name} · {status_label(job)}"


def verdict_line(job: JobRecord) -> str:
    """The learning verdict as the summary's first news: its mark, its word and its sentence ("" before it exists).

    >>> from types import SimpleNamespace as J
    >>> from backend.api import LearningVerdict
    >>> learning = LearningVerdict(metric="exact_match", label="held-out accuracy", verdict="improved",
    ...                            sentence="Held-out accuracy 25% -> 75%.")
    >>> verdict_line(J(artifacts=J(learning=learning)))
    '✅ **Improved**: Held-out accuracy 25% -> 75%.'
    """
    learning = job.artifacts.learning
    if learning is None:
        return ""
    mark = VERDICT_MARKS.get(learning.verdict, "")
    return f"{mark} **{learning.word.capitalize()}**: {learning.sentence}".strip()


def drift_line(job: JobRecord) -> str:
    """The verdict's drift from the start, under it: a figure with its healthy bound, or why there is none ("")."""
    learning = job.artifacts.learning
    text = drift_text(learning.drift) if learning is not None else None
    return f"Drift from the start: {html.escape(text, quote=False)}" if text else ""


def signal_line(job: JobRecord) -> str:
    """GRPO's no-signal warning as a quoted line that stands out, while it holds (or as the run ended with it):
    how long it has held, the warning (what to try), and whether it stopped the run ("" when there is none).

    >>> from types import SimpleNamespace as J
    >>> from backend.api import SignalWatch
    >>> signal_line(J(artifacts=J(signal=SignalWatch(warning="Every group scored the same.", since_step=1,
    ...                                              consecutive=3))))
    '> ⚠️ **No learning signal** (since step 1, 3 logged steps in a row): Every group scored the same.'
    >>> signal_line(J(artifacts=J(signal=SignalWatch())))
    ''
    """
    signal = job.artifacts.signal
    if signal is None or not signal.shown:
        return ""
    text = "🛑 **Stopped early: no learning signal**" if signal.stopped_early else "⚠️ **No learning signal**"
    if signal.held:
        text += f" ({signal.held})"
    if signal.warning:
        text += f": {signal.warning}"
    return f"> {text}"


def table_rows(api: StudioAPI, jobs: list[JobRecord]) -> list[list[Any]]:
    """The jobs table, newest first (``jobs`` come oldest first, as the store lists them)."""
    rows = []
    for job in reversed(jobs):
        p = job.progress or {}
        progress = progress_text(p, live=job.status is JobStatus.running)  # a finished job's last phase is over
        queue = api.jobs.queue_position(job.id) if job.status is JobStatus.queued else None
        rows.append(
            [
                job.id,
                _short(job.spec.output.run_name or "", 30),
                job.owner,
                status_label(job),
                method_label(job),
                _short(job.spec.model.name_or_path, 40),
                _short(data_label(job), 30),
                queue or "",
                progress,
                eta_text(p.get("eta_seconds")) if job.status is JobStatus.running else "",
                time.strftime("%Y-%m-%d %H:%M", time.localtime(job.created_at)),
            ]
        )
    return rows


def progress_html(job: JobRecord) -> str:
    """The progress bar with steps, ETA and the latest loss; ``data-status``/``data-fraction`` for tests."""
    fraction = progress_fraction(job)
    p = job.progress or {}
    label = f"{p.get('step', 0)}/{p.get('total_steps') or '?'} steps"
    if job.status is JobStatus.running and p.get("phase") == EVALUATING:
        label = progress_text(p)
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
    """The detail's heading lines; ``metrics`` (the job's logged rows) give a running job's latest speed figures.

    Under the job's line come the news that matter most: the learning verdict once the job has one, its
    learnability forecast (a rollout job's, in the Train form's words), and GRPO's no-signal warning while it holds
    (or as the run ended with it).
    """
    lines = [
        f"**{job.id}** · {status_label(job)} · {method_label(job).upper()} of "
        f"`{job.spec.model.name_or_path}` on `{data_label(job)}` · owner {job.owner}"
    ]
    if job.spec.output.run_name:
        lines[0] += f" · run **{html.escape(job.spec.output.run_name)}**"
    shown = (verdict_line(job), drift_line(job), forecast_line(job), signal_line(job))
    lines += [line for line in shown if line]
    if job.artifacts.export is not None:  # an export job: what it made (api.jobs hides a stranger's folders)
        lines.append(html.escape(job.artifacts.export.sentence))
    if job.status is JobStatus.queued:
        lines.append(f"Place in the queue: {api.jobs.queue_position(job.id)}")
    if job.spec.model.parent_job_id:
        lines.append(f"Continues job {job.spec.model.parent_job_id}")
    if job.spec.environment.name:
        lines.append(f"Environment: {environment_text(job)}")
    if job.artifacts.distributed is not None:
        run = job.artifacts.distributed
        lines.append(f"Launched: {html.escape(run.describe())} (`{html.escape(run.launch)}`)")
    figures = performance_line(job.artifacts.performance or live_figures(metrics or []))
    if figures:
        lines.append(f"Performance: {figures}")
    choices = job.artifacts.auto_tune.choices if job.artifacts.auto_tune else None
    if choices:
        lines.append("Auto-tune: " + "; ".join(html.escape(choice) for choice in choices))
    if job.status is JobStatus.cancelled:
        lines.append(
            f"**{cancelled_sentence(job)}**"
            + (": it can resume from its last checkpoint (Resume)" if api.jobs.resumable(job) else "")
        )
    elif job.error:
        lines.append(f"**Error:** {html.escape(job.error.splitlines()[0])}")
        lines.append("```\n" + "\n".join(job.error.splitlines()[1:12]) + "\n```")
    elif job.status is JobStatus.interrupted:
        lines.append("**Interrupted** (the app stopped while it ran): Resume continues from its last checkpoint")
    tracking = api.jobs.trackio_dashboard(job.id)
    if tracking:
        lines.append(f"Tracked with trackio: open its dashboard with `{tracking}`")
    hub = job.artifacts.hub
    if hub:
        lines.append(f"On the Hub: [{hub.repo_id}]({hub.url})" + (" (private)" if hub.private else ""))
    elif job.artifacts.hub_error:
        lines.append(
            f"**Push to the Hub failed:** {html.escape(job.artifacts.hub_error)} (the adapter is kept; "
            "push again below)"
        )
    lines.extend(hub_checkpoint_lines(job))
    judged = judge_warnings(
        job.artifacts.preflight_warnings or [],
        job.artifacts.learning,
        metrics or [],
        one_call_per_episode=job.spec.environment.max_tool_calling_iterations == 1,
    )
    for warning in judged.standing:
        lines.append(f"⚠️ {labelled_warning(warning)}")  # in the form's words, as Check said it
    if judged.settled:
        lines.append("✔️ Settled by this run: " + "; ".join(judged.settled) + ".")
    return "\n\n".join(lines)


def hub_checkpoint_lines(job: JobRecord) -> list[str]:
    """What the job's record says about checkpoints on the Hub: pushed (to where, last step), failed, resumed from."""
    lines = []
    artifacts = job.artifacts
    resumed, pushed, error = artifacts.resumed_from_hub, artifacts.hub_checkpoint, artifacts.hub_checkpoint_error
    if resumed:
        lines.append(f"Resumed from the checkpoint of step {resumed.step} pushed to {html.escape(resumed.repo_id)}")
    if pushed and pushed.step is not None:
        where = f"[{pushed.repo_id}/last-checkpoint]({pushed.url})" if pushed.url else pushed.repo_id
        lines.append(f"Checkpoints on the Hub: {where}, last pushed at step {pushed.step}")
    if error:
        lines.append(f"**Checkpoint push failed:** {html.escape(error)}")
    return lines


def cancelled_sentence(job: JobRecord) -> str:
    """How a cancelled job reads: "Cancelled at step N", "Cancelled before it started", never as an error.

    >>> from types import SimpleNamespace as J
    >>> cancelled_sentence(J(cancelled_at_step=12, artifacts=J(cancel_note=None)))
    'Cancelled at step 12'
    >>> cancelled_sentence(J(cancelled_at_step=None, artifacts=J(cancel_note=None)))
    'Cancelled before it started'
    >>> cancelled_sentence(J(cancelled_at_step=3, artifacts=J(cancel_note="stopped by request (the worker was "
    ...                                                                    "killed after the grace period)")))
    'Cancelled at step 3 (the worker did not stop on its own and was killed after the grace period)'
    """
    step = job.cancelled_at_step
    sentence = f"Cancelled at step {step}" if step else "Cancelled before it started"
    if "grace period" in (job.artifacts.cancel_note or ""):
        sentence += " (the worker did not stop on its own and was killed after the grace period)"
    return sentence


_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback_url(url: str) -> bool:
    """True for URLs on this machine only (127.x, ::1, localhost, 0.0.0.0): dead links once their server stopped.

    >>> is_loopback_url("http://127.0.0.1:4123"), is_loopback_url("https://x.hf.space"), is_loopback_url("ws://[::1]:9")
    (True, False, True)
    """
    from urllib.parse import urlparse

    host = (urlparse(url).hostname or "").lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def environment_text(job: JobRecord) -> str:
    """The environment line: its name and what it offers; its URL only while the job runs or when it is not on
    this machine (a built-in's 127.0.0.1 port is gone once the job ended)."""
    name = job.spec.environment.name
    described = job.artifacts.environment or ""
    if not described:
        return f"`{name}`"
    if job.status is not JobStatus.running:

        def drop_local(match: re.Match) -> str:
            return "" if is_loopback_url(match.group(1)) else match.group(0)

        described = re.sub(r" at (\S+?)(?=[;)]|$)", drop_local, described)
    if is_loopback_url(name) and job.status is not JobStatus.running:
        return html.escape(described)
    return f"`{name}`: {html.escape(described)}" if described != name else f"`{name}`"


@dataclass(frozen=True)
class JobActions:
    """Which buttons make sense for a job in its state."""

    cancel: bool
    resume: bool
    push: bool
    download: bool


def job_actions(api: StudioAPI, job: JobRecord | None) -> JobActions:
    """Cancel: queued or running; Resume: the facade says it is resumable; Push and Download: succeeded with an
    adapter on disk."""
    if job is None:
        return JobActions(False, False, False, False)
    has_adapter = job.status is JobStatus.succeeded and _adapter_dir(job) is not None
    return JobActions(
        cancel=job.status in (JobStatus.queued, JobStatus.running) and not job.cancel_requested,
        resume=api.jobs.resumable(job),
        push=has_adapter,
        download=has_adapter,
    )


def _adapter_dir(job: JobRecord) -> Path | None:
    adapter = job.artifacts.adapter_dir
    return Path(adapter) if adapter and Path(adapter).is_dir() else None


def _table(title: str, result: dict[str, Any]) -> str:
    base, tuned = result.get("base") or {}, result.get("tuned") or {}
    keys = list(dict.fromkeys([*tuned, *base]))
    lines = [f"**{title}**", "", "| metric | base | tuned |", "| --- | --- | --- |"]
    for key in keys:
        fmt = lambda v: f"{v:.4f}" if isinstance(v, (int, float)) else ""
        lines.append(f"| {key} | {fmt(base.get(key))} | {fmt(tuned.get(key))} |")
    return "\n".join(lines)


def _drawn(env_eval: dict[str, Any]) -> str:
    """Where an environment evaluation's episodes came from, after its title's "same seeds".

    >>> _drawn({"held_out": True, "split": "test"}), _drawn({"episodes_from": "training rows"}), _drawn({})
    ("; the held-out 'test' split's tasks", '; training rows, not held out', '')
    """
    if env_eval.get("held_out"):
        return f"; the held-out {env_eval.get('split')!r} split's tasks"
    return f"; {env_eval['episodes_from']}, not held out" if env_eval.get("episodes_from") else ""


def evaluation_markdown(job: JobRecord) -> str:
    parts = []
    evaluation = job.artifacts.evaluation
    if evaluation:
        parts.append(
            f"Evaluation failed: {evaluation['error']}"
            if "error" in evaluation
            else _table(f"Before/after on {evaluation.get('rows')} held-out rows", evaluation)
        )
    env_eval = job.artifacts.environment_evaluation
    if env_eval:
        parts.append(
            f"Environment evaluation failed: {env_eval['error']}"
            if "error" in env_eval
            else _table(
                f"Environment success over {env_eval.get('episodes')} episodes (same seeds{_drawn(env_eval)})", env_eval
            )
        )
    return "\n\n".join(parts)


REMOTE_COLUMNS = ["HF job id", "owner", "method", "model", "flavor", "stage", "sent"]
REMOTE_QUEUE = "HF Jobs"  # the queue column of a job sent to Hugging Face Jobs: where it runs


def remote_table_row(record) -> list[Any]:
    """A job sent to Hugging Face Jobs as a row of the jobs table: its HF id, its status as a local job's (from the
    last stage read), its method, and where it runs (``HF Jobs · flavor``) in the queue column.

    >>> from types import SimpleNamespace as R
    >>> spec = {"method": "sft", "model": {"name_or_path": "Qwen/Qwen3-0.6B"}, "dataset": {"name": "d"},
    ...         "output": {"run_name": "big"}}
    >>> row = remote_table_row(R(hf_job_id="68a1", owner="ann", spec=spec, flavor="a100-large",
    ...                          status=JobStatus.running, method="sft", created_at=0))
    >>> row[:8]
    ['68a1', 'big', 'ann', 'running', 'sft', 'Qwen/Qwen3-0.6B', 'd', 'HF Jobs · a100-large']
    """
    spec = record.spec
    return [
        record.hf_job_id,
        _short((spec.get("output") or {}).get("run_name") or "", 30),
        record.owner,
        record.status.value,
        record.method,
        _short((spec.get("model") or {}).get("name_or_path", ""), 40),
        _short((spec.get("dataset") or {}).get("name", ""), 30),
        f"{REMOTE_QUEUE} · {record.flavor}",
        "",
        "",
        time.strftime("%Y-%m-%d %H:%M", time.localtime(record.created_at)),
    ]


def jobs_table(api: StudioAPI, jobs: list[JobRecord], remote=()) -> list[list[Any]]:
    """The jobs table: this machine's jobs and those sent to Hugging Face Jobs together, newest first."""
    dated = [(job.created_at, row) for job, row in zip(reversed(jobs), table_rows(api, jobs))]
    dated += [(record.created_at, remote_table_row(record)) for record in remote]
    return [row for _, row in sorted(dated, key=lambda pair: -pair[0])]


def remote_rows(records) -> list[list[Any]]:
    return [
        [
            r.hf_job_id,
            r.owner,
            r.spec.get("method"),
            _short(r.spec.get("model", {}).get("name_or_path", ""), 40),
            r.flavor,
            r.last_stage or "",
            time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created_at)),
        ]
        for r in reversed(records)
    ]


def heavy_state(job: JobRecord | None) -> str:
    """The job and status a page's plots, samples and logs were drawn for ("" for none)."""
    return f"{job.id}:{job.status.value}" if job is not None else ""
