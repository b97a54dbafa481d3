"""The Jobs tab's behaviour: module-level handlers of ``(api, handles, <what Gradio passes>)``, wired in ``wire``.

Everything is read from the store on a timer, so a closed tab never stops a job and a reloaded page shows the same
state. The table and the detail come from one read per tick, so they never disagree. The data shaping lives in
``views.py`` and ``monitor.py`` (no Gradio there).
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import gradio as gr
from gradio.context import Context

from backend.api import JobNotFound, JobRecord, JobStatus, StudioAPI, User, generates
from components import tables
from components.job_pickers import job_choice_id
from components.jobs import export_panel, forecast_actions, monitor, plots, sweep_panel, views
from components.jobs.benchmark_views import benchmarks_compare_markdown, benchmarks_markdown
from components.jobs.layout import RAW_LOG_LINES, REFRESH_S, JobsLayout
from components.session import SIGN_IN_FIRST, as_user
from components.train.form import spec_to_form
from components.train.recipes import FIELDS
from components.wiring import bind

__all__ = ["REFRESH_S", "follow", "pause", "wire"]

# A running job's plots, samples and logs are sent at most this often by the tick (its summary and progress at every
# tick): drawing them is most of a tick's cost in the browser, and a page that redrew them every 2 s was never free
# (issue 37: a click on the Jobs tab waited behind those draws; benchmarks/jobs_tab.py).
HEAVY_EVERY_S = 10.0
HEAVY_AT = "heavy_at"  # the key, in the page's digests, of when its plots, samples and logs were last sent
HEAVY_OF = "heavy_of"  # and of the job (and its status) they were sent for: a change sends them at once
SAMPLES_CAPTION = "Sampled completions (GRPO), newest step first"
LOG_ROWS_CAPTION = "Training log (newest first)"
# Scroll the raw log to its last line when its accordion opens (a few times, while it renders).
SCROLL_LOG_TO_END = """() => {
    const scroll = (tries) => {
        const scroller = document.querySelector("#job-log textarea");
        if (scroller) scroller.scrollTop = scroller.scrollHeight;
        if (tries > 0) setTimeout(() => scroll(tries - 1), 100);
    };
    scroll(5);
}"""
QUIET: dict[str, Any] = {"queue": False, "show_progress": "hidden"}


class TrainForm(Protocol):
    """What Clone needs of the Train tab's form (components/train's ``TrainHandles``; the page hands it over)."""

    inputs: dict[str, Any]  # form field name -> component

    def input_list(self) -> list:
        """The form's components in field order."""
        ...


def follow():
    """The Jobs tab's timer on: the tab is open."""
    return gr.Timer(active=True)


def pause():
    """The Jobs tab's timer off: another tab is open, and nothing there shows the jobs' progress."""
    return gr.Timer(active=False)


def light_updates(api: StudioAPI, h: JobsLayout, user: User | None, job: JobRecord | None) -> list:
    """The picked job's summary, progress, actions and evaluation (None: hidden), in the order of ``h.light``: what a
    user reads first, cheap to send and to draw."""
    if job is None or user is None:
        return [
            gr.update(value=""),
            "",
            gr.update(visible=False),
            *(gr.update(interactive=False),) * 4,
            "",
            *forecast_actions.button_updates(None),
        ]
    actions = views.job_actions(api, job)
    return [
        views.summary_markdown(api, job, api.jobs.metrics(job.id, user=user)),
        views.progress_html(job),
        gr.update(visible=True),
        gr.update(interactive=actions.cancel),
        gr.update(interactive=actions.resume),
        gr.update(interactive=actions.push),
        gr.update(interactive=actions.download),
        "\n\n".join(filter(None, [views.evaluation_markdown(job), benchmarks_markdown(job)])),
        *forecast_actions.button_updates(job),
    ]


def heavy_updates(api: StudioAPI, h: JobsLayout, user: User | None, job: JobRecord | None) -> list:
    """The picked job's plots, samples and logs (None: hidden), in the order of ``h.heavy``: sent after the rest, and
    thinned, since the browser redraws every point of every plot it is sent."""
    if job is None or user is None:
        return [
            "",
            "",
            gr.update(visible=False, value=""),
            gr.update(visible=False, value=""),
            "",
        ]
    method = job.spec.method.value
    metrics = api.jobs.metrics(job.id, user=user)
    sampled = generates(method)  # an online method keeps its completions and their rewards
    kept = api.jobs.samples(job.id, user=user) if sampled else []
    weights = {r.name: r.weight for r in job.spec.rollout.rewards} if sampled else {}
    rows = monitor.log_rows(method, metrics)
    return [
        plots.plots_html(method, metrics, (job.progress or {}).get("total_steps")),
        monitor.best_and_worst(kept, weights),
        gr.update(value=tables.html_table(monitor.samples_table(kept, weights), SAMPLES_CAPTION), visible=bool(kept)),
        gr.update(value=tables.html_table(rows, LOG_ROWS_CAPTION), visible=not rows.empty),
        "\n".join(api.jobs.log_tail(job.id, RAW_LOG_LINES, user=user)),
    ]


def detail_updates(api: StudioAPI, h: JobsLayout, user: User | None, job: JobRecord | None) -> list:
    """Every detail output for ``job`` (None: hidden), in the order of ``h.detail``."""
    parts = [*h.light, *h.heavy]
    answers = [*light_updates(api, h, user, job), *heavy_updates(api, h, user, job)]
    values = {id(c): v for c, v in zip(parts, answers)}
    return [values[id(c)] for c in h.detail]


def listing(api: StudioAPI, user: User | None, selected) -> tuple[list[JobRecord], list, dict, JobRecord | None]:
    """One read of the user's jobs: (jobs, table rows, picker update, the picked job from that same read).

    The picker's values are job ids (its labels carry the status), so a tick only sends the choices and never
    overwrites a job the user has just picked; it sets the value only when none of the user's jobs is picked (then
    the newest) or when it holds a label rather than an id (a deep link may set either).
    """
    jobs = api.jobs.list_jobs(user=user) if user else []
    remote = api.hub.list_remote_jobs(user) if user else []  # the last stage seen: no Hub call on a tick
    newest_first = list(reversed(jobs))
    choices = [(views.choice(j), j.id) for j in newest_first]
    wanted = job_choice_id(selected)
    picked = next((j for j in jobs if j.id == wanted), None) or (newest_first[0] if newest_first else None)
    update = gr.update(choices=choices)
    if picked is None or picked.id != selected:
        update = gr.update(choices=choices, value=picked.id if picked else None)
    return jobs, views.jobs_table(api, jobs, remote), update, picked


def list_jobs(api: StudioAPI, user: User | None, selected):
    """The user's jobs table and picker (the picker keeps the current choice, else picks the newest)."""
    _, rows, picker_update, _ = listing(api, user, selected)
    return rows, picker_update


def listed(api: StudioAPI, user: User | None, selected) -> tuple[list, JobRecord | None]:
    """The first six of ``everything`` (empty state, list, compare box, table, picker, compare choices) from one read,
    and the picked job."""
    jobs, rows, picker_update, picked = listing(api, user, selected)
    note = SIGN_IN_FIRST if user is None else views.EMPTY_JOBS
    values = [
        gr.update(visible=not rows, value=note),
        gr.update(visible=bool(rows)),
        gr.update(visible=bool(jobs)),
        rows,
        picker_update,
        gr.update(choices=[(views.choice(j), j.id) for j in reversed(jobs)]),
    ]
    return values, picked


def refresh(api: StudioAPI, h: JobsLayout, user: User | None, selected):
    """The whole tab, all of it sent (the page may show anything), and the digests of what it now shows."""
    values, picked = listed(api, user, selected)
    values = [*values, *detail_updates(api, h, user, picked)]
    return [*values, monitor.unchanged(values, None)[1]]


def tick(api: StudioAPI, h: JobsLayout, user: User | None, selected, seen):
    """The timer's refresh: only what changed since the page's last view. A finished job's plots, samples and log are
    not sent (nor redrawn by the browser) every 2 s, and a running job's at most every ``HEAVY_EVERY_S``, or at once
    when the job's status changed (its last samples and final curves when it ends). Until they are due they are not
    even built: reading the metrics and drawing the frames is most of a tick's work."""
    values, picked = listed(api, user, selected)
    now, state = time.monotonic(), views.heavy_state(picked)
    if seen and now - seen.get(HEAVY_AT, 0.0) < HEAVY_EVERY_S and seen.get(HEAVY_OF) == state:
        light = [*h.everything[:6], *h.light]
        *answers, digests = sent(h, [*values, *light_updates(api, h, user, picked)], seen, light)
        out: list = [gr.skip()] * len(h.everything)
        for component, answer in zip(light, answers):
            out[h.position[id(component)]] = answer
        return [*out, digests]
    values = [*values, *detail_updates(api, h, user, picked)]
    *answers, digests = sent(h, values, seen, h.everything)
    return [*answers, {**digests, HEAVY_AT: now, HEAVY_OF: state}]


def sent(h: JobsLayout, values: list, seen: dict | None, outputs: list) -> list:
    """``values`` for ``outputs`` (some of ``h.everything``), skipping those the page already shows, and the digests
    of all it shows afterwards (by position in ``h.everything``)."""
    same, digests = monitor.unchanged(values, seen, (h.position[id(c)] for c in outputs))
    return [*(gr.skip() if kept else value for value, kept in zip(values, same)), digests]


def open_first(api: StudioAPI, h: JobsLayout, user: User | None, selected, seen):
    """The tab opened, first part: the list and the picked job's summary, what changed since the page last drew them.
    The plots, samples and logs follow (``open_rest``): drawing them is most of a refresh's cost."""
    values, picked = listed(api, user, selected)
    light = light_updates(api, h, user, picked)
    return [*sent(h, [*values, *light], seen, [*h.everything[:6], *h.light]), follow()]


def open_rest(api: StudioAPI, h: JobsLayout, user: User | None, selected, seen):
    """The tab opened, second part: the picked job's plots, samples and logs, what changed since last drawn."""
    job = _picked(api, selected, user)
    *answers, digests = sent(h, heavy_updates(api, h, user, job), seen, h.heavy)
    return [*answers, {**digests, HEAVY_AT: time.monotonic(), HEAVY_OF: views.heavy_state(job)}]


def show_job(api: StudioAPI, h: JobsLayout, user: User | None, selected):
    """The picked job's detail at once (not at the next tick), in the order of ``h.detail``."""
    return _detail_of(api, h, selected, user)[0]


def _detail_of(api: StudioAPI, h: JobsLayout, selected, user: User | None) -> tuple[list, JobRecord | None]:
    """The detail outputs for the picked job (a sentence when it is not the user's), and the job."""
    job = _picked(api, selected, user)
    detail = detail_updates(api, h, user, job)
    if job is None and user is not None and job_choice_id(selected):
        detail = ["Job not found.", *detail[1:]]
    return detail, job


def pick(api: StudioAPI, h: JobsLayout, user: User | None, selected, seen, sweep_seen):
    """Another job picked: everything that follows the pick in one answer (``h.picked``): its detail, the last job's
    download and action note gone, the digests of what the page now shows (so the next tick sends only what changed
    since), its sweep and its "Use this model" snippets.

    One event a pick, not one per panel: Gradio's page walks every output it has ever updated at each event's start
    and end (issue 47: each pick's six events cost seconds of main thread on a page used for a while)."""
    detail, job = _detail_of(api, h, selected, user)
    _, digests = monitor.unchanged(detail, seen, (h.position[id(c)] for c in h.detail))
    return [
        *detail,
        gr.update(value=None, visible=False),
        "",
        {**digests, HEAVY_AT: time.monotonic(), HEAVY_OF: views.heavy_state(job)},
        *sweep_panel.show(api, user, selected, sweep_seen),
        *export_panel.show(api, user, selected),
    ]


def _picked(api: StudioAPI, selected, user: User | None) -> JobRecord | None:
    try:
        return api.jobs.get_job(job_choice_id(selected) or "", user) if user else None
    except JobNotFound:
        return None


def compare(api: StudioAPI, user: User | None, job_ids, metric):
    """Overlay ``metric`` (smoothed) of the picked jobs in one plot."""
    if user is None or not job_ids:
        return gr.update(visible=False, value=""), "Pick two or more jobs to compare."
    jobs = []
    for job_id in job_ids:
        try:
            jobs.append(api.jobs.get_job(job_id, user))
        except JobNotFound:
            continue
    labels = monitor.compare_labels([(job.id, job.spec.output.run_name) for job in jobs])
    curves = [(label, api.jobs.metrics(job.id, user=user)) for label, job in zip(labels, jobs)]
    chart = plots.compare_chart(curves, metric or "loss")
    if chart is None:
        return gr.update(visible=False, value=""), f"None of these jobs logged `{metric}` yet.\n\n" + (
            benchmarks_compare_markdown(jobs)
        )
    return (
        gr.update(visible=True, value=chart),
        f"{metric} of {len(curves)} jobs, smoothed (EMA {monitor.SMOOTHING}).\n\n" + benchmarks_compare_markdown(jobs),
    )


def prepare(api: StudioAPI, user: User, selected):
    """Zip the picked job's adapter into a fresh downloads path (on click only, never in the refresh)."""
    path = export_panel.archived(api.jobs.adapter_archive, selected, user)
    size_mb = path.stat().st_size / 1e6
    return (
        gr.update(value=str(path), visible=True),
        f"Adapter zip ready ({size_mb:.1f} MB): click **Download adapter**.",
    )


def cancel(api: StudioAPI, user: User, selected):
    """Cancel the picked job: a queued one at once, a running one at its next step."""
    try:
        status = api.jobs.cancel(job_choice_id(selected) or "", user)
    except JobNotFound:
        raise gr.Error("Pick one of your jobs first.") from None
    except Exception as exc:  # InvalidTransition: already finished
        raise gr.Error(str(exc)) from None
    if status is JobStatus.cancelled:
        return "Cancelled before it started."
    return "Asked to stop: it ends at its next training step."


def resume(api: StudioAPI, user: User, selected):
    """Queue the picked job again, from its last checkpoint."""
    try:
        job = api.jobs.resume(job_choice_id(selected) or "", user)
    except JobNotFound:
        raise gr.Error("Pick one of your jobs first.") from None
    except Exception as exc:  # noqa: BLE001 - InvalidTransition: not resumable; the message says so
        raise gr.Error(str(exc)) from None
    return f"Queued again: {job.id} continues from its last checkpoint."


def push(api: StudioAPI, user: User, selected, repo, private):
    """Push the picked job's adapter to the Hub in one commit."""
    from backend.api import PushError  # loads the model card's drawing code: on first use only

    try:
        result = api.hub.push_to_hub(
            job_choice_id(selected) or "", user, repo_id=(repo or "").strip() or None, private=bool(private)
        )
    except JobNotFound:
        raise gr.Error("Pick one of your jobs first.") from None
    except PushError as exc:
        return f"⚠️ Not pushed: {exc}"
    return f"Pushed to [{result.repo_id}]({result.url}) in one commit ({len(result.files)} files)."


def refresh_remote(api: StudioAPI, user: User, hf_id):
    """The user's Hugging Face Jobs, and the stage and log tail of the one named."""
    from backend.api import RemoteJobError  # loads huggingface_hub's jobs client: on first use only

    rows = views.remote_rows(api.hub.list_remote_jobs(user, refresh=True))  # the jobs table shows these stages too
    if not (hf_id or "").strip():
        return rows, "", ""
    try:
        stage, sentence, lines = api.hub.remote_job_status(hf_id.strip(), user)
        page = api.hub.remote_job_url(api.hub.remote_job(hf_id.strip(), user))
    except JobNotFound:
        return rows, "No such job of yours.", ""
    except RemoteJobError as exc:
        return rows, f"⚠️ {exc}", ""
    status = f"**{stage}**: {sentence} [Its page on the Hub]({page})"
    return views.remote_rows(api.hub.list_remote_jobs(user)), status, "\n".join(lines)


def cancel_remote(api: StudioAPI, user: User, hf_id):
    """Ask Hugging Face Jobs to cancel the named job."""
    from backend.api import RemoteJobError  # loads huggingface_hub's jobs client: on first use only

    try:
        api.hub.cancel_remote_job((hf_id or "").strip(), user)
    except JobNotFound:
        raise gr.Error("No such job of yours.") from None
    except RemoteJobError as exc:
        raise gr.Error(str(exc)) from None
    return "Asked Hugging Face Jobs to cancel it; refresh to see the stage."


def clone(api: StudioAPI, h: JobsLayout, train: TrainForm, user: User, selected):
    """The picked job's settings copied into the Train tab's form."""
    try:
        job = api.jobs.get_job(job_choice_id(selected) or "", user)
    except JobNotFound:
        raise gr.Error("Pick one of your jobs first.") from None
    values = spec_to_form(job.spec)
    return {
        **{train.inputs[name]: values[name] for name in FIELDS},
        h.action_note: f"Settings of {job.id} copied into the Train tab.",
    }


def clone_best(api: StudioAPI, h: JobsLayout, train: TrainForm, user: User, selected):
    """The best child of the picked job's sweep cloned into the Train tab's form, as Clone does for one job."""
    return clone(api, h, train, user, sweep_panel.best_job_id(api, selected, user))


def wire(api: StudioAPI, h: JobsLayout, train: TrainForm | None) -> None:
    """Every event of the Jobs tab: a view shows a visitor (user None) nothing, an action asks them to sign in."""
    h.raw_log.expand(None, None, None, js=SCROLL_LOG_TO_END)
    _wire_compare(api, h)
    # Answered directly, not through Gradio's queue, whose round trip (and one-at-a-time default per event) was most
    # of its latency (benchmarks/latency.py). An idle page that ticked on every tab cost its browser a fifth of a core.
    h.timer.tick(
        as_user(bind(tick, api, h), signed_in=False), [h.picker, h.shown], h.refreshed, api_name="refresh_jobs", **QUIET
    )
    # The first view without waiting for a tick: when the Jobs tab is opened here, and on page load in
    # components/deep_links.py, once it has put the job the address links to (if any) in the picker.
    # Two parts, each only what changed: the summary shows at once, the plots draw after it (issue 24: the whole tab
    # sent on every open kept the browser busy for seconds, benchmarks/jobs_tab.py).
    if isinstance(Context.block, gr.Tab):
        # The timer starts in the same answer as the summary: one request on opening, not two.
        first = [*h.everything[:6], *h.light, h.shown, h.timer]
        Context.block.select(
            as_user(bind(open_first, api, h), signed_in=False),
            [h.picker, h.shown],
            first,
            api_visibility="private",
            **QUIET,
        ).then(
            as_user(bind(open_rest, api, h), signed_in=False),
            [h.picker, h.shown],
            [*h.heavy, h.shown],
            api_visibility="private",
            trigger_mode="always_last",
            **QUIET,
        )
    h.picker.change(
        as_user(bind(pick, api, h), signed_in=False),
        [h.picker, h.shown, h.sweep.shown],
        h.picked,
        api_name="show_job",
        trigger_mode="always_last",
        **QUIET,
    )
    h.picker.focus(
        as_user(bind(list_jobs, api), signed_in=False), h.picker, [h.table, h.picker], api_name="list_jobs", queue=False
    )
    h.prepare_button.click(
        as_user(bind(prepare, api)), h.picker, [h.download, h.action_note], api_name="prepare_download"
    )
    again = {"api_visibility": "private", "show_progress": "hidden"}
    refreshed = as_user(bind(refresh, api, h), signed_in=False)
    h.cancel_button.click(as_user(bind(cancel, api)), h.picker, h.action_note, api_name="cancel_job").then(
        refreshed, h.picker, h.refreshed, **again
    )
    h.resume_button.click(as_user(bind(resume, api)), h.picker, h.action_note, api_name="resume_job").then(
        refreshed, h.picker, h.refreshed, **again
    )
    h.train_anyway_button.click(
        as_user(bind(forecast_actions.train_anyway, api)), h.picker, h.action_note, api_name="train_anyway"
    ).then(refreshed, h.picker, h.refreshed, **again)
    pushed = as_user(bind(push, api))
    h.push_button.click(pushed, [h.picker, h.push_repo, h.push_private], h.action_note, api_name="push_to_hub")
    remote_outputs = [h.remote_table, h.remote_status, h.remote_log]
    h.remote_refresh.click(as_user(bind(refresh_remote, api)), h.remote_id, remote_outputs, api_name="remote_status")
    h.remote_cancel.click(as_user(bind(cancel_remote, api)), h.remote_id, h.remote_status, api_name="cancel_remote")
    sweep_panel.wire(api, h.sweep, h.picker)
    if train is not None:
        h.clone_button.click(
            as_user(bind(clone, api, h, train)), h.picker, [*train.input_list(), h.action_note], api_name="clone_job"
        )
        h.sweep.clone_best.click(
            as_user(bind(clone_best, api, h, train)),
            h.picker,
            [*train.input_list(), h.action_note],
            api_name="clone_best",
        )
        h.clone_suggested_button.click(
            as_user(bind(forecast_actions.clone_suggested, api, h.action_note, train)),
            h.picker,
            [*train.input_list(), h.action_note],
            api_name="clone_suggested",
        )


def _wire_compare(api: StudioAPI, h: JobsLayout) -> None:
    inputs, outputs = [h.compare_jobs, h.compare_metric], [h.compare_plot, h.compare_note]
    compared = as_user(bind(compare, api), signed_in=False)
    for trigger in (h.compare_jobs.change, h.compare_metric.change):
        # the last selection is drawn, not dropped while the one before draws
        trigger(compared, inputs, outputs, api_visibility="private", trigger_mode="always_last")
    h.compare_again.click(compared, inputs, outputs, api_name="compare_jobs")
