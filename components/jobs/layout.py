"""The Jobs tab's widgets, laid out in page order and held in ``JobsLayout`` (no behaviour: handlers.py wires it)."""

from __future__ import annotations

from dataclasses import dataclass, field

import gradio as gr

from backend.api import StudioAPI
from components import charts, tables
from components.jobs import benchmark_panel, export_panel, monitor, sweep_panel, views

REFRESH_S = 2.0
RAW_LOG_LINES = 400
JOBS_CSS = (
    """
#job-log textarea { font-family: ui-monospace, monospace; font-size: 0.85em; }
/* The jobs table fits its frame at 1280 px (its ETA and created columns were past the edge): cells wrap (Gradio
   sizes the columns from hidden sizing rows, which it kept on one line), in smaller text. */
#jobs-table .header-table, #jobs-table .virtual-row { font-size: var(--text-sm); }
#jobs-table .sizing-body td, #jobs-table .virtual-row span { white-space: normal; text-overflow: clip; }
"""
    + sweep_panel.SWEEP_CSS
    + charts.CHART_CSS
    + tables.TABLE_CSS
)


@dataclass
class JobsLayout:
    """Every widget of the Jobs tab, and the groups of them its handlers answer for (in their outputs' order)."""

    empty_note: gr.Markdown
    jobs_list: gr.Column
    table: gr.Dataframe
    picker: gr.Dropdown
    detail_box: gr.Column
    summary: gr.Markdown
    progress: gr.HTML
    cancel_button: gr.Button
    resume_button: gr.Button
    clone_button: gr.Button
    train_anyway_button: gr.Button  # a job its forecast stopped, or a forecast alone: train whatever it says
    clone_suggested_button: gr.Button  # ... or clone it with the forecast's suggested change
    prepare_button: gr.Button
    download: gr.DownloadButton
    push_repo: gr.Textbox
    push_private: gr.Checkbox
    push_button: gr.Button
    action_note: gr.Markdown
    plots: gr.HTML  # every metric family's chart of the picked job (monitor.plots_html)
    evaluation: gr.Markdown
    samples_note: gr.Markdown
    samples: gr.HTML
    log_rows: gr.HTML
    raw_log: gr.Accordion
    log: gr.Textbox
    compare_box: gr.Column
    compare_jobs: gr.Dropdown
    compare_metric: gr.Dropdown
    compare_note: gr.Markdown
    compare_plot: gr.HTML
    compare_again: gr.Button
    remote_table: gr.Dataframe
    remote_id: gr.Textbox
    remote_refresh: gr.Button
    remote_cancel: gr.Button
    remote_status: gr.Markdown
    remote_log: gr.Code
    # What this page's Jobs tab shows, as digests by position in ``everything`` (monitor.unchanged). Every handler
    # that draws the tab from scratch records it; one that changes part of it empties it, so the next tick sends all.
    shown: gr.State
    timer: gr.Timer
    sweep: sweep_panel.SweepHandles  # the picked job's sweep, when it is a child of one
    export: export_panel.ExportHandles  # "Use this model" and Export, for the picked job
    light: list = field(init=False)  # the picked job's summary, progress, actions and evaluation: cheap to draw
    heavy: list = field(init=False)  # its plots, samples and logs: most of a refresh's cost in the browser
    detail: list = field(init=False)  # the order of /show_job's first outputs, as scripts read them
    picked: list = field(init=False)  # all that a pick answers: the detail, then the panels, digests and note
    everything: list = field(init=False)  # the whole tab, in the order of the refresh's outputs
    position: dict = field(init=False)  # an output's place in ``everything``
    heavy_ids: set = field(init=False)

    def __post_init__(self) -> None:
        self.light = [
            self.summary,
            self.progress,
            self.detail_box,
            self.cancel_button,
            self.resume_button,
            self.push_button,
            self.prepare_button,
            self.evaluation,
            self.train_anyway_button,
            self.clone_suggested_button,
        ]
        self.heavy = [self.plots, self.samples_note, self.samples, self.log_rows, self.log]
        self.heavy_ids = {id(c) for c in self.heavy}
        self.detail = [self.summary, self.progress, self.plots, self.detail_box, *self.light[3:], *self.heavy[1:]]
        self.everything = [
            self.empty_note,
            self.jobs_list,
            self.compare_box,
            self.table,
            self.picker,
            self.compare_jobs,
            *self.detail,
        ]
        self.position = {id(c): i for i, c in enumerate(self.everything)}
        self.picked = [
            *self.detail,
            self.download,
            self.action_note,
            self.shown,
            *self.sweep.outputs,
            *self.export.shown,
        ]

    @property
    def refreshed(self) -> list:
        """The outputs of a whole refresh: the tab, then the digests of what it shows."""
        return [*self.everything, self.shown]


def lay_out(api: StudioAPI) -> JobsLayout:
    """The tab's widgets in page order (the export and benchmark panels build and wire themselves in place)."""
    parts: dict = {"empty_note": gr.Markdown(views.EMPTY_JOBS, elem_id="jobs-empty")}
    with gr.Column(visible=False) as parts["jobs_list"]:
        parts["table"] = gr.Dataframe(
            headers=views.TABLE_COLUMNS, value=[], interactive=False, label="Jobs", elem_id="jobs-table"
        )
        parts["picker"] = gr.Dropdown(
            [], label="Job", info="Pick a job to follow it live", elem_id="job-picker", allow_custom_value=True
        )
    with gr.Column(visible=False, elem_id="job-detail") as parts["detail_box"]:
        _lay_out_detail(api, parts)
    benchmark_panel.build(api, parts["picker"])
    parts["sweep"] = sweep_panel.lay_out()
    with (
        gr.Column(visible=False) as parts["compare_box"],
        gr.Accordion("Compare jobs", open=False, elem_id="compare-box"),
    ):
        _lay_out_compare(parts)
    parts["shown"] = gr.State({})
    # A cheap read every 2 s while the Jobs tab is open (handlers.follow; the page pauses it on the other tabs).
    parts["timer"] = gr.Timer(REFRESH_S, active=False)
    with gr.Accordion("Jobs on Hugging Face Jobs", open=False):
        parts["remote_table"] = gr.Dataframe(
            headers=views.REMOTE_COLUMNS, value=[], interactive=False, elem_id="remote-table"
        )
        with gr.Row():
            parts["remote_id"] = gr.Textbox(label="HF job id", scale=3)
            parts["remote_refresh"] = gr.Button("Refresh status and logs", size="sm", scale=1)
            parts["remote_cancel"] = gr.Button("Cancel it", size="sm", scale=1)
        parts["remote_status"] = gr.Markdown()
        parts["remote_log"] = gr.Code(label="Remote log (last lines)", language=None, lines=10)
    return JobsLayout(**parts)


def _lay_out_detail(api: StudioAPI, parts: dict) -> None:
    parts["summary"] = gr.Markdown(elem_id="job-summary")
    parts["progress"] = gr.HTML(elem_id="job-progress")
    with gr.Row():
        parts["cancel_button"] = gr.Button("Cancel", elem_id="cancel-button", size="sm", interactive=False)
        parts["resume_button"] = gr.Button(
            "Resume from checkpoint", elem_id="resume-button", size="sm", interactive=False
        )
        parts["clone_button"] = gr.Button("Clone settings into Train", elem_id="clone-button", size="sm")
        parts["train_anyway_button"] = gr.Button(
            "Train anyway", elem_id="train-anyway-button", size="sm", visible=False
        )
        parts["clone_suggested_button"] = gr.Button(
            "Clone with the suggested change", elem_id="clone-suggested-button", size="sm", visible=False
        )
        parts["prepare_button"] = gr.Button(
            "Prepare adapter zip", elem_id="prepare-download-button", size="sm", interactive=False
        )
        parts["download"] = gr.DownloadButton("Download adapter", visible=False, elem_id="download-button", size="sm")
    with gr.Row():
        parts["push_repo"] = gr.Textbox(label="Hub repo (empty: the job's setting, else you/<run name>)", scale=3)
        parts["push_private"] = gr.Checkbox(True, label="Private", scale=1)
        parts["push_button"] = gr.Button("Push adapter to the Hub", elem_id="push-button", scale=1, interactive=False)
    parts["action_note"] = gr.Markdown(elem_id="job-action-note")
    parts["export"] = export_panel.build(api, parts["picker"])  # "Use this model" and Export
    with gr.Row(elem_id="job-plots"):
        # One panel of server-drawn charts (components/charts.py), its whole markup replaced by each update: nothing
        # a pick draws outlives it (issue 47; Gradio's LinePlot left a ResizeObserver behind at every redraw).
        parts["plots"] = gr.HTML(elem_id="job-plot-panel")
    parts["evaluation"] = gr.Markdown(elem_id="job-evaluation")
    parts["samples_note"] = gr.Markdown(elem_id="job-samples-best")
    # Tables drawn on the server (components/tables.py), replaced whole at each update: Gradio's Dataframe kept every
    # pick's old cells alive.
    parts["samples"] = gr.HTML(elem_id="job-samples", visible=False)
    parts["log_rows"] = gr.HTML(elem_id="job-log-rows", visible=False)
    with gr.Accordion("Raw log", open=False, elem_id="job-raw-log") as parts["raw_log"]:
        # A plain text box, kept scrolled to its end: the code editor it was opened at its top and drew only the
        # lines in view, so a finished job's log seemed to stop at its 36th line (issue 24).
        parts["log"] = gr.Textbox(
            label=f"Log (last {RAW_LOG_LINES} lines)",
            elem_id="job-log",
            lines=16,
            max_lines=40,
            interactive=False,
            autoscroll=True,
            buttons=["copy"],
        )


def _lay_out_compare(parts: dict) -> None:
    with gr.Row():
        parts["compare_jobs"] = gr.Dropdown(
            [],
            multiselect=True,
            label="Jobs to compare",
            elem_id="compare-jobs",
            info="Two or more of your jobs: a sweep, or the stages of a staged run",
            scale=3,
        )
        parts["compare_metric"] = gr.Dropdown(
            list(monitor.compare_metrics()),
            value="loss",
            label="Metric",
            allow_custom_value=True,
            elem_id="compare-metric",
            scale=1,
        )
    parts["compare_note"] = gr.Markdown(elem_id="compare-note")
    parts["compare_plot"] = gr.HTML(elem_id="compare-plot", visible=False)
    parts["compare_again"] = gr.Button("Compare again (latest steps)", size="sm")
