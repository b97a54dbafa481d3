"""Jobs tab: the user's jobs (all of them for an admin), and for the picked one: status, the learning verdict and
GRPO's no-signal warning (live), progress with ETA, one small-multiple plot per metric family, the training log as
rows (raw log one click away), GRPO samples, the before/after evaluation; cancel, resume, clone, push and download,
each enabled only when it makes sense; and a compare view overlaying several jobs' curves.

Everything is read from the store on a timer, so a closed tab never stops a job and a reloaded page shows the same
state. The table and the detail come from one read per tick, so they never disagree. The data shaping lives in
``components/job_views.py`` and ``components/job_monitor.py`` (no Gradio there).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import gradio as gr
from gradio.context import Context

from backend.api import JobNotFound, JobRecord, JobStatus, StudioAPI, User, generates
from components import benchmark_panel, export_panel, job_monitor, job_views
from components.benchmark_views import benchmarks_compare_markdown, benchmarks_markdown
from components.job_pickers import job_choice_id
from components.session import SIGN_IN_FIRST, require_user, user_from
from components.train_form import FIELDS, spec_to_form

REFRESH_S = 2.0
# A running job's plots, samples and logs are sent at most this often by the tick (its summary and progress at every
# tick): drawing them is most of a tick's cost in the browser, and a page that redrew them every 2 s was never free
# (issue 37: a click on the Jobs tab waited behind those draws; benchmarks/jobs_tab.py).
HEAVY_EVERY_S = 10.0
# The step axis's labels, slanted: level, Vega-Lite set them edge to edge or over each other on a plot a third of the
# page wide ("1,8002,000", "280300" in issue 37's walk).
STEP_LABEL_ANGLE = -40
HEAVY_AT = "heavy_at"  # the key, in the page's digests, of when its plots, samples and logs were last sent
HEAVY_OF = "heavy_of"  # and of the job (and its status) they were sent for: a change sends them at once


def heavy_state(job: JobRecord | None) -> str:
    """The job and status a page's plots, samples and logs were drawn for ("" for none)."""
    return f"{job.id}:{job.status.value}" if job is not None else ""


# A plot with nothing to draw is hidden by a class, kept in the page: Gradio's LinePlot, unmounted (visible=False)
# while it still drew, threw "Cannot read properties of null (reading 'offsetWidth')" (issue 24).
UNDRAWN = "undrawn"
HIDDEN_PLOT = gr.update(elem_classes=[UNDRAWN], value=None)
RAW_LOG_LINES = 400
JOBS_CSS = """
#job-plots .undrawn { display: none !important; }
#job-log textarea { font-family: ui-monospace, monospace; font-size: 0.85em; }
/* The jobs and samples tables fit their frame at 1280 px (the jobs' ETA and created columns, the samples' rewards
   were past the edge): cells wrap (Gradio sizes the columns from hidden sizing rows, which it kept on one line);
   the jobs table's text is smaller. A header never breaks inside a word ("ste" over "p"). */
#jobs-table .header-table, #jobs-table .virtual-row { font-size: var(--text-sm); }
#jobs-table .sizing-body td, #jobs-table .virtual-row span, #job-samples .sizing-body td {
    white-space: normal; text-overflow: clip;
}
#job-samples th span.header { white-space: nowrap; word-break: normal; overflow-wrap: normal; }
/* A series of one point is a line of no length, which draws nothing: round caps make it a dot. */
#job-plots .mark-line path:not([d*="L"]), #compare-plot .mark-line path:not([d*="L"]) {
    stroke-linecap: round; stroke-width: 6px;
}
"""
# Scroll the raw log to its last line when its accordion opens (a few times, while it renders).
SCROLL_LOG_TO_END = """() => {
    const scroll = (tries) => {
        const scroller = document.querySelector("#job-log textarea");
        if (scroller) scroller.scrollTop = scroller.scrollHeight;
        if (tries > 0) setTimeout(() => scroll(tries - 1), 100);
    };
    scroll(5);
}"""


@dataclass
class JobsHandles:
    table: gr.Dataframe
    picker: gr.Dropdown
    summary: gr.Markdown
    refresh: Callable[..., list]  # the whole tab from one read, given the picker's value (the first view on load)
    refreshed: list  # the components ``refresh`` updates, in its order
    timer: gr.Timer  # the tab's live refresh: ``follow`` starts it, ``pause`` stops it (the page wires the other tabs)


def follow():
    """The Jobs tab's timer on: the tab is open."""
    return gr.Timer(active=True)


def pause():
    """The Jobs tab's timer off: another tab is open, and nothing there shows the jobs' progress."""
    return gr.Timer(active=False)


def _plot_id(key: str) -> str:
    return "plot-main" if key == "loss" else f"plot-{key.replace('_', '-')}"


class TrainForm(Protocol):
    """What Clone needs of the Train tab's form (components/train_tab.py's ``TrainHandles``; the page hands it over)."""

    inputs: dict[str, Any]  # form field name -> component

    def input_list(self) -> list:
        """The form's components in field order."""
        ...


def build(api: StudioAPI, train: TrainForm | None = None) -> JobsHandles:
    empty_note = gr.Markdown(job_views.EMPTY_JOBS, elem_id="jobs-empty")
    with gr.Column(visible=False) as jobs_list:
        table = gr.Dataframe(
            headers=job_views.TABLE_COLUMNS, value=[], interactive=False, label="Jobs", elem_id="jobs-table"
        )
        picker = gr.Dropdown(
            [], label="Job", info="Pick a job to follow it live", elem_id="job-picker", allow_custom_value=True
        )
    with gr.Column(visible=False, elem_id="job-detail") as detail_box:
        summary = gr.Markdown(elem_id="job-summary")
        progress = gr.HTML(elem_id="job-progress")
        with gr.Row():
            cancel_button = gr.Button("Cancel", elem_id="cancel-button", size="sm", interactive=False)
            resume_button = gr.Button("Resume from checkpoint", elem_id="resume-button", size="sm", interactive=False)
            clone_button = gr.Button("Clone settings into Train", elem_id="clone-button", size="sm")
            prepare_button = gr.Button(
                "Prepare adapter zip", elem_id="prepare-download-button", size="sm", interactive=False
            )
            download = gr.DownloadButton("Download adapter", visible=False, elem_id="download-button", size="sm")
        with gr.Row():
            push_repo = gr.Textbox(label="Hub repo (empty: the job's setting, else you/<run name>)", scale=3)
            push_private = gr.Checkbox(True, label="Private", scale=1)
            push_button = gr.Button("Push adapter to the Hub", elem_id="push-button", scale=1, interactive=False)
        action_note = gr.Markdown(elem_id="job-action-note")
        export_panel.build(api, picker)  # "Use this model" and Export merged
        with gr.Row(elem_id="job-plots"):
            plots = {
                family.key: gr.LinePlot(
                    x="step",
                    y="value",
                    color="series",
                    x_title="step",
                    x_label_angle=STEP_LABEL_ANGLE,
                    y_title=family.unit,
                    label=family.title,
                    color_title="",
                    elem_id=_plot_id(family.key),
                    elem_classes=[UNDRAWN],
                    min_width=380,
                )
                for family in job_monitor.FAMILIES
            }
        evaluation = gr.Markdown(elem_id="job-evaluation")
        samples_note = gr.Markdown(elem_id="job-samples-best")
        samples = gr.Dataframe(
            value=None,
            interactive=False,
            label="Sampled completions (GRPO), newest step first",
            elem_id="job-samples",
            visible=False,
            wrap=True,
        )
        log_rows = gr.Dataframe(
            value=None, interactive=False, label="Training log (newest first)", elem_id="job-log-rows", visible=False
        )
        with gr.Accordion("Raw log", open=False, elem_id="job-raw-log") as raw_log:
            # A plain text box, kept scrolled to its end: the code editor it was opened at its top and drew only the
            # lines in view, so a finished job's log seemed to stop at its 36th line (issue 24).
            log = gr.Textbox(
                label=f"Log (last {RAW_LOG_LINES} lines)",
                elem_id="job-log",
                lines=16,
                max_lines=40,
                interactive=False,
                autoscroll=True,
                buttons=["copy"],
            )
        raw_log.expand(None, None, None, js=SCROLL_LOG_TO_END)

    def light_updates(user: User | None, job: JobRecord | None) -> list:
        """The picked job's summary, progress, actions and evaluation (None: hidden), in the order of ``light``: what
        a user reads first, cheap to send and to draw."""
        if job is None or user is None:
            return [gr.update(value=""), "", gr.update(visible=False), *(gr.update(interactive=False),) * 4, ""]
        actions = job_views.job_actions(api, job)
        return [
            job_views.summary_markdown(api, job, api.jobs.metrics(job.id, user=user)),
            job_views.progress_html(job),
            gr.update(visible=True),
            gr.update(interactive=actions.cancel),
            gr.update(interactive=actions.resume),
            gr.update(interactive=actions.push),
            gr.update(interactive=actions.download),
            "\n\n".join(filter(None, [job_views.evaluation_markdown(job), benchmarks_markdown(job)])),
        ]

    def heavy_updates(user: User | None, job: JobRecord | None) -> list:
        """The picked job's plots, samples and logs (None: hidden), in the order of ``heavy``: sent after the rest,
        and thinned, since the browser redraws every point of every plot it is sent."""
        if job is None or user is None:
            return [
                *(HIDDEN_PLOT for _ in plots),
                "",
                gr.update(visible=False, value=None),
                gr.update(visible=False, value=None),
                "",
            ]
        method = job.spec.method.value
        metrics = api.jobs.metrics(job.id, user=user)
        views = job_monitor.plot_views(method, metrics, (job.progress or {}).get("total_steps"))
        plot_updates = []
        for key in plots:
            view = views[key]
            plot_updates.append(
                HIDDEN_PLOT
                if view is None
                else gr.update(
                    elem_classes=[],
                    value=job_monitor.thinned(view.frame),
                    color_map=view.color_map,
                    x_lim=view.x_lim,
                    y_title=view.y_title,
                )
            )
        sampled = generates(method)  # an online method keeps its completions and their rewards
        kept = api.jobs.samples(job.id, user=user) if sampled else []
        weights = {r.name: r.weight for r in job.spec.rollout.rewards} if sampled else {}
        rows = job_monitor.log_rows(method, metrics)
        return [
            *plot_updates,
            job_monitor.best_and_worst(kept, weights),
            gr.update(value=job_monitor.samples_table(kept, weights), visible=bool(kept)),
            gr.update(value=rows, visible=not rows.empty),
            "\n".join(api.jobs.log_tail(job.id, RAW_LOG_LINES, user=user)),
        ]

    light = [summary, progress, detail_box, cancel_button, resume_button, push_button, prepare_button, evaluation]
    heavy = [*plots.values(), samples_note, samples, log_rows, log]
    heavy_ids = {id(c) for c in heavy}
    # The order of /show_job's outputs, as scripts read them.
    detail = [summary, progress, *plots.values(), detail_box, *light[3:], samples_note, samples, log_rows, log]

    def detail_updates(user: User | None, job: JobRecord | None) -> list:
        """Every detail output for ``job`` (None: hidden), in the order of ``detail``."""
        parts = [*light, *heavy]
        values = {id(c): v for c, v in zip(parts, [*light_updates(user, job), *heavy_updates(user, job)])}
        return [values[id(c)] for c in detail]

    def listing(user: User | None, selected) -> tuple[list[JobRecord], list, dict, JobRecord | None]:
        """One read of the user's jobs: (jobs, table rows, picker update, the picked job from that same read).

        The picker's values are job ids (its labels carry the status), so a tick only sends the choices and never
        overwrites a job the user has just picked; it sets the value only when none of the user's jobs is picked
        (then the newest) or when it holds a label rather than an id (a deep link may set either).
        """
        jobs = api.jobs.list_jobs(user=user) if user else []
        newest_first = list(reversed(jobs))
        choices = [(job_views.choice(j), j.id) for j in newest_first]
        wanted = job_choice_id(selected)
        picked = next((j for j in jobs if j.id == wanted), None) or (newest_first[0] if newest_first else None)
        update = gr.update(choices=choices)
        if picked is None or picked.id != selected:
            update = gr.update(choices=choices, value=picked.id if picked else None)
        return jobs, job_views.table_rows(api, jobs), update, picked

    def list_jobs(selected, profile: gr.OAuthProfile | None = None):
        """The user's jobs table and picker (the picker keeps the current choice, else picks the newest)."""
        _, rows, picker_update, _ = listing(user_from(profile), selected)
        return rows, picker_update

    def listed(user: User | None, selected) -> tuple[list, JobRecord | None]:
        """The first six of ``everything`` (empty state, list, compare box, table, picker, compare choices) from one
        read, and the picked job."""
        jobs, rows, picker_update, picked = listing(user, selected)
        note = SIGN_IN_FIRST if user is None else job_views.EMPTY_JOBS
        values = [
            gr.update(visible=not jobs, value=note),
            gr.update(visible=bool(jobs)),
            gr.update(visible=bool(jobs)),
            rows,
            picker_update,
            gr.update(choices=[(job_views.choice(j), j.id) for j in reversed(jobs)]),
        ]
        return values, picked

    def view(selected, profile: gr.OAuthProfile | None) -> list:
        """The whole tab from one read: empty state, table, picker, compare choices and the picked job's detail."""
        user = user_from(profile)
        values, picked = listed(user, selected)
        return [*values, *detail_updates(user, picked)]

    def refresh(selected, profile: gr.OAuthProfile | None = None):
        """The whole tab, all of it sent (the page may show anything), and the digests of what it now shows."""
        values = view(selected, profile)
        return [*values, job_monitor.unchanged(values, None)[1]]

    def tick(selected, seen, profile: gr.OAuthProfile | None = None):
        """The timer's refresh: only what changed since the page's last view. A finished job's plots, samples and log
        are not sent (nor redrawn by the browser) every 2 s, and a running job's at most every ``HEAVY_EVERY_S``, or
        at once when the job's status changed (its last samples and final curves when it ends)."""
        user = user_from(profile)
        values, picked = listed(user, selected)
        values = [*values, *detail_updates(user, picked)]
        now, state = time.monotonic(), heavy_state(picked)
        if seen and now - seen.get(HEAVY_AT, 0.0) < HEAVY_EVERY_S and seen.get(HEAVY_OF) == state:
            light_at = [i for i, c in enumerate(everything) if id(c) not in heavy_ids]
            *answers, digests = sent([values[i] for i in light_at], seen, [everything[i] for i in light_at])
            out: list = [gr.skip()] * len(everything)
            for i, answer in zip(light_at, answers):
                out[i] = answer
            return [*out, digests]
        *answers, digests = sent(values, seen, everything)
        return [*answers, {**digests, HEAVY_AT: now, HEAVY_OF: state}]

    def sent(values: list, seen: dict | None, outputs: list) -> list:
        """``values`` for ``outputs`` (some of ``everything``), skipping those the page already shows, and the digests
        of all it shows afterwards (by position in ``everything``)."""
        same, digests = job_monitor.unchanged(values, seen, (position[id(c)] for c in outputs))
        return [*(gr.skip() if kept else value for value, kept in zip(values, same)), digests]

    def open_first(selected, seen, profile: gr.OAuthProfile | None = None):
        """The tab opened, first part: the list and the picked job's summary, what changed since the page last drew
        them. The plots, samples and logs follow (``open_rest``): drawing them is most of a refresh's cost."""
        user = user_from(profile)
        values, picked = listed(user, selected)
        return [*sent([*values, *light_updates(user, picked)], seen, [*everything[:6], *light]), follow()]

    def open_rest(selected, seen, profile: gr.OAuthProfile | None = None):
        """The tab opened, second part: the picked job's plots, samples and logs, what changed since last drawn."""
        user = user_from(profile)
        try:
            job = api.jobs.get_job(job_choice_id(selected) or "", user) if user else None
        except JobNotFound:
            job = None
        *answers, digests = sent(heavy_updates(user, job), seen, heavy)
        return [*answers, {**digests, HEAVY_AT: time.monotonic(), HEAVY_OF: heavy_state(job)}]

    def show_job(selected, profile: gr.OAuthProfile | None = None):
        """The picked job's detail at once (not at the next tick)."""
        user = user_from(profile)
        job_id = job_choice_id(selected)
        if not job_id or user is None:
            return detail_updates(None, None)
        try:
            job = api.jobs.get_job(job_id, user)
        except JobNotFound:
            return ["Job not found.", *detail_updates(None, None)[1:]]
        return detail_updates(user, job)

    benchmark_panel.build(api, picker)

    with gr.Column(visible=False) as compare_box, gr.Accordion("Compare jobs", open=False, elem_id="compare-box"):
        with gr.Row():
            compare_jobs = gr.Dropdown(
                [],
                multiselect=True,
                label="Jobs to compare",
                elem_id="compare-jobs",
                info="Two or more of your jobs: a sweep, or the stages of a staged run",
                scale=3,
            )
            compare_metric = gr.Dropdown(
                list(job_monitor.COMPARE_METRICS),
                value="loss",
                label="Metric",
                allow_custom_value=True,
                elem_id="compare-metric",
                scale=1,
            )
        compare_note = gr.Markdown(elem_id="compare-note")
        compare_plot = gr.LinePlot(
            x="step",
            y="value",
            color="job",
            x_title="step",
            x_label_angle=STEP_LABEL_ANGLE,
            y_title="smoothed value",
            color_title="",
            elem_id="compare-plot",
            visible=False,
        )
        compare_again = gr.Button("Compare again (latest steps)", size="sm")

    def compare(job_ids, metric, profile: gr.OAuthProfile | None = None):
        """Overlay ``metric`` (smoothed) of the picked jobs in one plot."""
        user = user_from(profile)
        if user is None or not job_ids:
            return gr.update(visible=False, value=None), "Pick two or more jobs to compare."
        jobs = []
        for job_id in job_ids:
            try:
                jobs.append(api.jobs.get_job(job_id, user))
            except JobNotFound:
                continue
        labels = job_monitor.compare_labels([(job.id, job.spec.output.run_name) for job in jobs])
        curves = [(label, api.jobs.metrics(job.id, user=user)) for label, job in zip(labels, jobs)]
        frame = job_monitor.compare_frame(curves, metric or "loss")
        if frame is None:
            return gr.update(visible=False, value=None), f"None of these jobs logged `{metric}` yet.\n\n" + (
                benchmarks_compare_markdown(jobs)
            )
        # A colour per job: a new set of jobs changes the colours, which makes the chart redraw its legend.
        colors = {label: job_monitor.PALETTE[i % len(job_monitor.PALETTE)][0] for i, label in enumerate(labels)}
        x_lim = job_monitor.compare_axis(curves, metric or "loss")
        return (
            gr.update(visible=True, value=frame, y_title=f"{metric} (smoothed)", color_map=colors, x_lim=x_lim),
            f"{metric} of {len(curves)} jobs, smoothed (EMA {job_monitor.SMOOTHING}).\n\n"
            + benchmarks_compare_markdown(jobs),
        )

    # Gradio 6.31's LinePlot fixes its legend when first drawn: new series (another job) show only after the plot
    # is drawn afresh, so a changed selection hides it first. Revisit when Gradio redraws legends on new data.
    def hidden():
        return gr.update(visible=False)

    for trigger in (compare_jobs.change, compare_metric.change):
        trigger(hidden, None, compare_plot, api_visibility="private", queue=False).then(
            compare,
            [compare_jobs, compare_metric],
            [compare_plot, compare_note],
            api_visibility="private",
            trigger_mode="always_last",  # the last selection is drawn, not dropped while the one before draws
        )
    compare_again.click(hidden, None, compare_plot, api_visibility="private", queue=False).then(
        compare, [compare_jobs, compare_metric], [compare_plot, compare_note], api_name="compare_jobs"
    )

    everything = [empty_note, jobs_list, compare_box, table, picker, compare_jobs, *detail]
    position = {id(c): i for i, c in enumerate(everything)}  # an output's place in ``everything``
    # What this page's Jobs tab shows, as digests by position in ``everything`` (job_monitor.unchanged). Every
    # handler that draws the tab from scratch records it; one that changes part of it empties it, so the next tick
    # sends all.
    shown = gr.State({})
    refreshed = [*everything, shown]
    # A cheap read every 2 s while the Jobs tab is open (``follow``; the page pauses it on the other tabs): answered
    # directly, not through Gradio's queue, whose round trip (and one-at-a-time default per event) was most of its
    # latency (benchmarks/latency.py). An idle page that ticked on every tab cost its browser a fifth of a core.
    timer = gr.Timer(REFRESH_S, active=False)
    quiet = {"queue": False, "show_progress": "hidden"}
    timer.tick(tick, [picker, shown], refreshed, api_name="refresh_jobs", **quiet)
    # The first view without waiting for a tick: when the Jobs tab is opened here, and on page load in
    # components/deep_links.py, once it has put the job the address links to (if any) in the picker.
    # Two parts, each only what changed: the summary shows at once, the plots draw after it (issue 24: the whole tab
    # sent on every open kept the browser busy for seconds, benchmarks/jobs_tab.py).
    if isinstance(Context.block, gr.Tab):
        # The timer starts in the same answer as the summary: one request on opening, not two.
        first = [*everything[:6], *light, shown, timer]
        Context.block.select(open_first, [picker, shown], first, api_visibility="private", **quiet).then(
            open_rest, [picker, shown], [*heavy, shown], api_visibility="private", trigger_mode="always_last", **quiet
        )
    # The last job's plots are hidden (by class, kept mounted: UNDRAWN) until the picked one's detail arrives.
    picker.change(
        lambda: [*[gr.update(elem_classes=[UNDRAWN])] * len(plots), "", {}],
        None,
        [*plots.values(), action_note, shown],
        api_visibility="private",
        queue=False,
    ).then(show_job, picker, detail, api_name="show_job", show_progress="hidden", trigger_mode="always_last")
    picker.change(lambda: gr.update(value=None, visible=False), None, download, api_visibility="private", queue=False)
    picker.focus(list_jobs, picker, [table, picker], api_name="list_jobs", queue=False)

    def prepare(selected, profile: gr.OAuthProfile | None = None):
        """Zip the picked job's adapter into a fresh downloads path (on click only, never in the refresh)."""
        user = require_user(profile)
        try:
            path = api.jobs.adapter_archive(job_choice_id(selected) or "", user)
        except JobNotFound:
            raise gr.Error("Pick one of your jobs first.") from None
        except ValueError as exc:
            raise gr.Error(str(exc)) from None
        size_mb = path.stat().st_size / 1e6
        return (
            gr.update(value=str(path), visible=True),
            f"Adapter zip ready ({size_mb:.1f} MB): click **Download adapter**.",
        )

    prepare_button.click(prepare, picker, [download, action_note], api_name="prepare_download")

    def cancel(selected, profile: gr.OAuthProfile | None = None):
        user = require_user(profile)
        try:
            status = api.jobs.cancel(job_choice_id(selected) or "", user)
        except JobNotFound:
            raise gr.Error("Pick one of your jobs first.") from None
        except Exception as exc:  # InvalidTransition: already finished
            raise gr.Error(str(exc)) from None
        if status is JobStatus.cancelled:
            return "Cancelled before it started."
        return "Asked to stop: it ends at its next training step."

    cancel_button.click(cancel, picker, action_note, api_name="cancel_job").then(
        refresh, picker, refreshed, api_visibility="private", show_progress="hidden"
    )

    def resume(selected, profile: gr.OAuthProfile | None = None):
        user = require_user(profile)
        try:
            job = api.jobs.resume(job_choice_id(selected) or "", user)
        except JobNotFound:
            raise gr.Error("Pick one of your jobs first.") from None
        except Exception as exc:  # noqa: BLE001 - InvalidTransition: not resumable; the message says so
            raise gr.Error(str(exc)) from None
        return f"Queued again: {job.id} continues from its last checkpoint."

    resume_button.click(resume, picker, action_note, api_name="resume_job").then(
        refresh, picker, refreshed, api_visibility="private", show_progress="hidden"
    )

    def push(selected, repo, private, profile: gr.OAuthProfile | None = None, token: gr.OAuthToken | None = None):
        from backend.api import PushError  # loads the model card's drawing code: on first use only

        user = require_user(profile, token)
        try:
            result = api.hub.push_to_hub(
                job_choice_id(selected) or "", user, repo_id=(repo or "").strip() or None, private=bool(private)
            )
        except JobNotFound:
            raise gr.Error("Pick one of your jobs first.") from None
        except PushError as exc:
            return f"⚠️ Not pushed: {exc}"
        return f"Pushed to [{result.repo_id}]({result.url}) in one commit ({len(result.files)} files)."

    push_button.click(push, [picker, push_repo, push_private], action_note, api_name="push_to_hub")

    with gr.Accordion("Jobs on Hugging Face Jobs", open=False):
        remote_table = gr.Dataframe(
            headers=job_views.REMOTE_COLUMNS, value=[], interactive=False, elem_id="remote-table"
        )
        with gr.Row():
            remote_id = gr.Textbox(label="HF job id", scale=3)
            remote_refresh = gr.Button("Refresh status and logs", size="sm", scale=1)
            remote_cancel = gr.Button("Cancel it", size="sm", scale=1)
        remote_status = gr.Markdown()
        remote_log = gr.Code(label="Remote log (last lines)", language=None, lines=10)

    def refresh_remote(hf_id, profile: gr.OAuthProfile | None = None, token: gr.OAuthToken | None = None):
        from backend.api import RemoteJobError  # loads huggingface_hub's jobs client: on first use only

        user = require_user(profile, token)
        rows = job_views.remote_rows(api.hub.list_remote_jobs(user))
        if not (hf_id or "").strip():
            return rows, "", ""
        try:
            stage, sentence, lines = api.hub.remote_job_status(hf_id.strip(), user)
        except JobNotFound:
            return rows, "No such job of yours.", ""
        except RemoteJobError as exc:
            return rows, f"⚠️ {exc}", ""
        return job_views.remote_rows(api.hub.list_remote_jobs(user)), f"**{stage}**: {sentence}", "\n".join(lines)

    remote_refresh.click(refresh_remote, remote_id, [remote_table, remote_status, remote_log], api_name="remote_status")

    def cancel_remote(hf_id, profile: gr.OAuthProfile | None = None, token: gr.OAuthToken | None = None):
        from backend.api import RemoteJobError  # loads huggingface_hub's jobs client: on first use only

        user = require_user(profile, token)
        try:
            api.hub.cancel_remote_job((hf_id or "").strip(), user)
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
                job = api.jobs.get_job(job_choice_id(selected) or "", user)
            except JobNotFound:
                raise gr.Error("Pick one of your jobs first.") from None
            values = spec_to_form(job.spec)
            return {
                **{train.inputs[name]: values[name] for name in FIELDS},
                action_note: f"Settings of {job.id} copied into the Train tab.",
            }

        clone_button.click(clone, picker, [*train.input_list(), action_note], api_name="clone_job")
    return JobsHandles(table=table, picker=picker, summary=summary, refresh=refresh, refreshed=refreshed, timer=timer)
