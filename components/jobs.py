"""Jobs tab: the user's jobs (all of them for an admin), and for the picked one: status, progress with ETA, live log
tail, live plots per method, GRPO samples, the before/after evaluation; cancel, resume, clone, download.

Everything is read from the store on a timer, so a closed tab never stops a job and a reloaded page shows the same
state. The data shaping lives in ``components/job_views.py`` (no Gradio there).
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from backend.api import StudioAPI
from backend.store import JobNotFound, JobStatus
from components import job_views
from components.form import job_choice_id, spec_to_form
from components.session import require_user, user_from
from components.train import FIELD_NAMES, TrainHandles

REFRESH_S = 2.0


@dataclass
class JobsHandles:
    table: gr.Dataframe
    picker: gr.Dropdown
    summary: gr.Markdown


def build(api: StudioAPI, train: TrainHandles | None = None) -> JobsHandles:
    table = gr.Dataframe(headers=job_views.TABLE_COLUMNS, value=[], interactive=False, label="Jobs",
                         elem_id="jobs-table")
    picker = gr.Dropdown([], label="Job", info="Pick a job to follow it live", elem_id="job-picker",
                         allow_custom_value=True)
    summary = gr.Markdown(elem_id="job-summary")
    progress = gr.HTML(elem_id="job-progress")
    with gr.Row():
        cancel_button = gr.Button("Cancel", elem_id="cancel-button", size="sm")
        resume_button = gr.Button("Resume", elem_id="resume-button", size="sm")
        clone_button = gr.Button("Clone settings into Train", elem_id="clone-button", size="sm")
        download = gr.DownloadButton("Download adapter", visible=False, elem_id="download-button", size="sm")
    with gr.Row():
        push_repo = gr.Textbox(label="Hub repo (empty: the job's setting, else you/<run name>)", scale=3)
        push_private = gr.Checkbox(True, label="Private", scale=1)
        push_button = gr.Button("Push adapter to the Hub", elem_id="push-button", scale=1)
    action_note = gr.Markdown(elem_id="job-action-note")
    with gr.Row():
        plot_loss = gr.LinePlot(x="step", y="value", color="metric", label="Loss", elem_id="plot-main", height=300)
        plot_lr = gr.LinePlot(x="step", y="value", color="metric", label="Learning rate", elem_id="plot-lr",
                              height=300)
    with gr.Row():
        plot_method = gr.LinePlot(x="step", y="value", color="metric",
                                  label="Method: token accuracy (SFT), margins and accuracy (DPO), rewards (GRPO)",
                                  elem_id="plot-method", height=300)
        plot_extra = gr.LinePlot(x="step", y="value", color="metric", label="GRPO: KL, clipped ratio, tool calls",
                                 elem_id="plot-extra", height=300, visible=False)
    plot_length = gr.LinePlot(x="step", y="value", color="metric", label="GRPO: mean completion length (tokens)",
                              elem_id="plot-length", height=240, visible=False)
    evaluation = gr.Markdown(elem_id="job-evaluation")
    samples = gr.Dataframe(headers=job_views.SAMPLE_COLUMNS, value=[], interactive=False,
                           label="Sampled completions (GRPO)", elem_id="job-samples", visible=False)
    log = gr.Code(label="Log (last lines)", language=None, elem_id="job-log", lines=12)

    def list_jobs(selected, profile: gr.OAuthProfile | None = None):
        """The user's jobs table and picker (the picker keeps the current choice, else picks the newest)."""
        user = user_from(profile)
        jobs = api.list_jobs(user=user) if user else []
        rows = job_views.table_rows(api, jobs)
        choices = [job_views.choice(j) for j in reversed(jobs)]
        keep = next((c for c in choices if job_choice_id(c) == job_choice_id(selected)), None)
        return rows, gr.update(choices=choices, value=keep or (choices[0] if choices else None))

    def show_job(selected, profile: gr.OAuthProfile | None = None):
        user = user_from(profile)
        job_id = job_choice_id(selected)
        hidden = gr.update(value=None, visible=False)
        empty = ("", "", None, None, None, hidden, hidden, "", gr.update(value=[], visible=False), "",
                 gr.update(visible=False))
        if not job_id or user is None:
            return empty
        try:
            job = api.get_job(job_id, user)
        except JobNotFound:
            return ("Job not found.", *empty[1:])
        metrics = api.metrics(job_id, user=user)
        plots = job_views.plot_frames(job.spec.method.value, metrics)
        adapter = job_views.adapter_archive(api, job)
        grpo = job.spec.method.value == "grpo"
        return (
            job_views.summary_markdown(api, job, metrics),
            job_views.progress_html(job),
            plots["loss"], plots["lr"], plots["method"], gr.update(value=plots["extra"], visible=grpo),
            gr.update(value=plots["length"], visible=grpo),
            job_views.evaluation_markdown(job),
            gr.update(value=job_views.sample_rows(api.samples(job_id, user=user)) if grpo else [], visible=grpo),
            "\n".join(api.log_tail(job_id, 40, user=user)),
            gr.update(visible=adapter is not None, value=str(adapter) if adapter else None),
        )

    detail = [summary, progress, plot_loss, plot_lr, plot_method, plot_extra, plot_length, evaluation, samples, log,
              download]
    timer = gr.Timer(REFRESH_S)
    # A cheap read every 2 s for every open tab: answered directly, not through Gradio's queue, whose round trip
    # (and one-at-a-time default per event) was most of its latency (benchmarks/latency.py).
    timer.tick(list_jobs, picker, [table, picker], api_name="list_jobs", queue=False)
    timer.tick(show_job, picker, detail, api_name="show_job")
    picker.change(show_job, picker, detail, api_name=False)

    def cancel(selected, profile: gr.OAuthProfile | None = None):
        user = require_user(profile)
        try:
            status = api.cancel(job_choice_id(selected) or "", user)
        except JobNotFound:
            raise gr.Error("Pick one of your jobs first.") from None
        except Exception as exc:  # InvalidTransition: already finished
            raise gr.Error(str(exc)) from None
        return "Cancelled." if status is JobStatus.cancelled else "Asked to stop: it ends at its next training step."

    cancel_button.click(cancel, picker, action_note, api_name="cancel_job")

    def resume(selected, profile: gr.OAuthProfile | None = None):
        user = require_user(profile)
        try:
            job = api.resume(job_choice_id(selected) or "", user)
        except JobNotFound:
            raise gr.Error("Pick one of your jobs first.") from None
        except Exception as exc:  # noqa: BLE001 - only interrupted jobs resume; the message says so
            raise gr.Error(str(exc)) from None
        return f"Queued again: {job.id} continues from its last checkpoint."

    resume_button.click(resume, picker, action_note, api_name="resume_job")

    def push(selected, repo, private, profile: gr.OAuthProfile | None = None, token: gr.OAuthToken | None = None):
        from backend.publish import PushError

        user = require_user(profile, token)
        try:
            result = api.push_to_hub(job_choice_id(selected) or "", user, repo_id=(repo or "").strip() or None,
                                     private=bool(private))
        except JobNotFound:
            raise gr.Error("Pick one of your jobs first.") from None
        except PushError as exc:
            return f"⚠️ Not pushed: {exc}"
        return f"Pushed to [{result.repo_id}]({result.url}) in one commit ({len(result.files)} files)."

    push_button.click(push, [picker, push_repo, push_private], action_note, api_name="push_to_hub")

    with gr.Accordion("Jobs on Hugging Face Jobs", open=False):
        remote_table = gr.Dataframe(headers=job_views.REMOTE_COLUMNS, value=[], interactive=False,
                                    elem_id="remote-table")
        with gr.Row():
            remote_id = gr.Textbox(label="HF job id", scale=3)
            remote_refresh = gr.Button("Refresh status and logs", size="sm", scale=1)
            remote_cancel = gr.Button("Cancel it", size="sm", scale=1)
        remote_status = gr.Markdown()
        remote_log = gr.Code(label="Remote log (last lines)", language=None, lines=10)

    def refresh_remote(hf_id, profile: gr.OAuthProfile | None = None, token: gr.OAuthToken | None = None):
        from backend.hf_jobs import RemoteJobError

        user = require_user(profile, token)
        rows = job_views.remote_rows(api.list_remote_jobs(user))
        if not (hf_id or "").strip():
            return rows, "", ""
        try:
            stage, sentence, lines = api.remote_job_status(hf_id.strip(), user)
        except JobNotFound:
            return rows, "No such job of yours.", ""
        except RemoteJobError as exc:
            return rows, f"⚠️ {exc}", ""
        return job_views.remote_rows(api.list_remote_jobs(user)), f"**{stage}**: {sentence}", "\n".join(lines)

    remote_refresh.click(refresh_remote, remote_id, [remote_table, remote_status, remote_log],
                         api_name="remote_status")

    def cancel_remote(hf_id, profile: gr.OAuthProfile | None = None, token: gr.OAuthToken | None = None):
        from backend.hf_jobs import RemoteJobError

        user = require_user(profile, token)
        try:
            api.cancel_remote_job((hf_id or "").strip(), user)
        except JobNotFound:
            raise gr.Error("No such job of yours.") from None
        except RemoteJobError as exc:
            raise gr.Error(str(exc)) from None
        return "Asked Hugging Face Jobs to cancel it; refresh to see the stage."

    remote_cancel.click(cancel_remote, remote_id, remote_status, api_name="cancel_remote")

    if train is not None:
        def clone(selected, profile: gr.OAuthProfile | None = None):
            user = require_user(profile)
            try:
                job = api.get_job(job_choice_id(selected) or "", user)
            except JobNotFound:
                raise gr.Error("Pick one of your jobs first.") from None
            values = spec_to_form(job.spec)
            return [*(values[name] for name in FIELD_NAMES),
                    f"Settings of {job.id} copied into the Train tab."]

        clone_button.click(clone, picker, [*train.input_list(), action_note], api_name="clone_job")
    return JobsHandles(table=table, picker=picker, summary=summary)
