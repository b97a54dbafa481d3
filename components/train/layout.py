"""The Train tab's widgets, laid out in page order and held in ``TrainLayout`` (no behaviour: handlers.py wires it).
Every declared field of the form (components/train/fields.py) is placed by its name; the method settings sit in one
group per method, shown for it alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import gradio as gr
from gradio.utils import NamedString

from backend.api import DEFAULT_HF_JOB_FLAVOR, HF_JOB_FLAVORS, field_methods, method_part, methods
from components.train import forecast_panel, uploads_panel
from components.train.fields import FORM_FIELDS, TRI_STATE, FormField
from components.train.form import model_notice
from components.train.recipes import FIELDS

SETTINGS_ROWS = (
    ("max_steps", "learning_rate", "batch_size", "grad_accum", "max_length"),
    ("lora_enabled", "lora_r", "lora_alpha", "lora_dropout", "quant_mode"),
    ("holdout_rows", "run_name"),
    ("push_to_hub", "push_checkpoints", "hub_repo_id", "hub_private", "trackio"),
)
ENVIRONMENT_ROW = ("env_name", "env_reward", "env_max_iterations", "env_eval_episodes")
MAX_RADIO_CHOICES = 6  # more choices than this are a dropdown
FIELD_MARK = "field-mark"  # the box under a field that shows its problems
FIELD_MARK_CSS = f".{FIELD_MARK}:not(:has(p)) {{ display: none !important; }}"


# A typed Hub id, URL or job id stays as typed: Gradio's dropdown takes the highlighted (nearest) entry on Enter, so
# `Qwen/Qwen2.5-0.5B-Instruc` became `...-Instruct`. In an open catalogue's picker, Enter leaves the field as Tab does
# (keeping the text) unless an arrow key chose an entry since the last keystroke; a click still picks one.
FREE_TEXT_CLASS = "free-text"
FREE_TEXT_JS = f"""
() => {{
    const chose = new WeakSet();
    const inPicker = (el) => el instanceof HTMLInputElement && el.closest(".{FREE_TEXT_CLASS}");
    document.addEventListener("keydown", (event) => {{
        const input = event.target;
        if (!inPicker(input)) return;
        if (event.key === "ArrowDown" || event.key === "ArrowUp") {{ chose.add(input); return; }}
        if (event.key !== "Enter" || chose.has(input)) return;
        event.preventDefault();
        event.stopImmediatePropagation();
        input.blur();
    }}, true);
    document.addEventListener("input", (event) => {{ if (inPicker(event.target)) chose.delete(event.target); }}, true);
}}
"""


def field_widget(f: FormField) -> Any:
    """The Gradio input of one declared field: its kind and choices from the spec, label and help from the form."""
    options = dict(f.options)
    closed = options.pop("closed", False)
    radio = options.pop("radio", False)  # a radio however many its choices
    kw = {"label": f.label, "info": f.info or None, "value": FIELDS[f.name], **options}
    described = f.spec
    if described.kind == "bool":
        return gr.Radio(list(TRI_STATE), **kw) if described.optional else gr.Checkbox(**kw)
    if f.choices is not None and not closed:  # an open catalogue: any Hub id, job or URL may be typed
        return gr.Dropdown(list(f.choices), allow_custom_value=True, elem_classes=[FREE_TEXT_CLASS], **kw)
    choices = list(f.choices if f.choices is not None else described.choices)
    if choices and described.kind not in ("int", "float"):
        return (gr.Radio if radio or len(choices) <= MAX_RADIO_CHOICES else gr.Dropdown)(choices, **kw)
    if described.kind in ("int", "float"):
        return gr.Number(precision=0 if described.kind == "int" else None, **kw)
    return gr.Textbox(**kw)


def _row(inputs: dict[str, Any], names, marks: dict[str, gr.Markdown], columns: dict[str, gr.Column]) -> None:
    """One row of declared fields, each in a column over the box that shows its problems (``marks``); a field hidden
    at first (the Hub dataset's) hides its column."""
    with gr.Row():
        for name in names:
            f = FORM_FIELDS[name]
            with gr.Column(min_width=160, visible=f.options.get("visible", True)) as columns[name]:
                inputs[name] = field_widget(replace(f, options={k: v for k, v in f.options.items() if k != "visible"}))
                # Plain text (a script reads it as such); hidden while empty by FIELD_MARK_CSS.
                marks[name] = gr.Markdown(
                    elem_classes=["field-error", FIELD_MARK], elem_id=f"field-error-{name.replace('_', '-')}"
                )


@dataclass
class TrainLayout:
    """Every widget of the Train tab: the form's inputs by field name, and the rest (``extra``, read as attributes)."""

    inputs: dict[str, Any]
    errors: dict[str, gr.Markdown]
    groups: dict[str, gr.Group]  # a method or a shared part -> the group of its settings
    shown_for: dict[str, tuple[str, ...]]  # group -> the methods it is shown for
    extra: dict[str, Any]  # name -> a component that is not a form field (buttons, notes, the upload widget)
    marks: dict[str, gr.Markdown]  # field name -> the box under it that shows its problems
    columns: dict[str, gr.Column]  # field name -> the column holding it and its box

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["extra"][name]
        except KeyError:
            raise AttributeError(name) from None


def lay_out() -> TrainLayout:
    """Place every declared field (method settings in one group per method, shown for it alone) and the rest."""
    inputs: dict[str, Any] = {}
    errors: dict[str, gr.Markdown] = {}
    extra: dict[str, Any] = {}
    marks: dict[str, gr.Markdown] = {}
    columns: dict[str, gr.Column] = {}
    extra["marks"], extra["columns"] = marks, columns  # for the parts laid out below
    box = _box

    gr.Markdown("### 1. Model")
    _row(inputs, ("base_model", "parent_job"), marks, columns)
    extra["model_note"] = gr.Markdown(model_notice(FIELDS["base_model"]), elem_id="model-notice")
    # The (base model, method, environment) whose demo recipe the fields were last set for. A hidden component, not
    # gr.State: its value travels with each event as the browser had it when the event fired, so a change event
    # updating it cannot overtake the input event that reads the pair from before the change.
    extra["recipe_pair"] = gr.JSON([FIELDS["base_model"], FIELDS["method"], FIELDS["env_name"]], visible=False)
    errors["model"] = box("model")

    gr.Markdown("### 2. Dataset")
    _row(inputs, ("dataset_source", "builtin_dataset", "hub_dataset", "hub_split"), marks, columns)
    # No file_types: Gradio's own filter drops another file in the browser without a word (a .png dropped on it was
    # answered by nothing). Every file reaches the server, whose upload check answers any that is not a dataset with
    # a sentence under the dataset and keeps nothing of it.
    upload = gr.File(
        label="Upload a dataset (.jsonl, .json, .csv, .parquet)",
        visible=False,
        elem_id="dataset-upload",
    )
    # Gradio 6.31's File.preprocess creates an empty temp file per upload that nobody removes
    # (gradio/components/file.py). The handler needs only the path.
    upload._process_single_file = lambda f: NamedString(f.path)
    extra["upload"] = upload
    inputs["upload_id"] = field_widget(FORM_FIELDS["upload_id"])  # an id only: resolved in the user's own folder
    extra["upload_note"] = gr.Markdown(visible=False, elem_id="upload-note")
    _row(inputs, ("column_map", "max_rows"), marks, columns)
    errors["dataset"] = box("dataset")
    with gr.Accordion("Preview: the first rows as the trainer sees them", open=False):
        extra["preview_button"] = gr.Button("Render preview", size="sm")
        extra["preview_out"] = gr.Markdown(elem_id="dataset-preview")
    extra["uploads_panel"] = uploads_panel.lay_out()

    gr.Markdown("### 3. Method")
    inputs["method"] = field_widget(FORM_FIELDS["method"])
    groups: dict[str, gr.Group] = {}  # method, or a shared part ("rollout", "environment") -> its group
    shown_for: dict[str, tuple[str, ...]] = {}  # group -> the methods it is shown for
    for method in methods():
        own = [name for name, f in FORM_FIELDS.items() if method_part(f.path) == method and not f.derived]
        with gr.Group(visible=method == FIELDS["method"]) as groups[method]:
            if own:
                _row(inputs, own, marks, columns)
        shown_for[method] = (method,)
    for part, place in (("rollout", _lay_out_rollout), ("environment", _lay_out_environment)):
        shown_for[part] = field_methods(part) or ()
        with gr.Group(visible=FIELDS["method"] in shown_for[part]) as groups[part]:
            place(inputs, errors, extra, box)
    errors["method"] = box("method")

    with gr.Accordion("4. Training settings, LoRA and quantization", open=False) as extra["settings_box"]:
        for names in SETTINGS_ROWS:
            _row(inputs, names, marks, columns)
    errors["settings"] = box("settings")

    with gr.Row():
        extra["check_button"] = gr.Button("Check (pre-flight and memory)", elem_id="check-button")
        extra["queue_button"] = gr.Button("Queue", variant="primary", elem_id="queue-button")
    # Check's and Queue's answer right under their buttons, and what no field shows (issue 24: it was a screen away).
    extra["result"] = gr.Markdown(elem_id="queue-result")
    # Check's forecast of a rollout job under its answer: followed from the forecast job's id (forecast_panel.py).
    extra["forecast"] = forecast_panel.lay_out()
    errors["general"] = box("general")
    with gr.Accordion("…or run it on Hugging Face Jobs (your account, billed to you)", open=False):
        with gr.Row():
            extra["hf_flavor"] = gr.Dropdown(
                list(HF_JOB_FLAVORS),
                value=DEFAULT_HF_JOB_FLAVOR,
                label="Hardware flavor",
                info="auto: the smallest that holds the job's memory estimate",
            )
            extra["hf_timeout"] = gr.Textbox("6h", label="Timeout", info="e.g. 90m, 6h")
            extra["hf_button"] = gr.Button("Send to Hugging Face Jobs", elem_id="hf-jobs-button")
        gr.Markdown(
            "The same worker runs there with the same spec and pushes the adapter to your account "
            "(turn on *Push to the Hub*); follow it in the Jobs tab."
        )
    return TrainLayout(inputs, errors, groups, shown_for, extra, marks, columns)


def _box(section: str) -> gr.Markdown:
    """The box under a section that shows its problems."""
    return gr.Markdown(elem_classes="field-error", elem_id=f"{section}-error")


def _lay_out_rollout(inputs: dict[str, Any], errors: dict, extra: dict, box) -> None:
    """An online method's sampling and its forecast's settings, and its rewards editor with the test bench."""
    for part in ("rollout.", "forecast."):
        _row(
            inputs,
            [name for name, f in FORM_FIELDS.items() if f.path.startswith(part) and not f.derived],
            extra["marks"],
            extra["columns"],
        )
    rewards = FORM_FIELDS["rollout_rewards"]
    inputs["rollout_rewards"] = gr.Code(FIELDS["rollout_rewards"], language="yaml", label=rewards.label)
    with gr.Accordion("Reward test bench: score completions before training", open=False):
        extra["bench_completions"] = gr.Textbox(lines=3, label="Completions, one per line")
        extra["bench_row"] = gr.Textbox(
            label="Dataset row (JSON) for rewards that read a column", placeholder='{"solution": "$4$"}'
        )
        extra["bench_button"] = gr.Button("Score", size="sm")
        extra["bench_note"] = gr.Markdown(elem_id="bench-note")
        extra["bench_out"] = gr.Dataframe(label="Scores", interactive=False, elem_id="bench-scores")


def _lay_out_environment(inputs: dict[str, Any], errors: dict, extra: dict, box) -> None:
    """The environment with its dry run and warm-up, for the methods that can play one."""
    gr.Markdown("**Environment** (multi-turn agent training with OpenEnv)")
    _row(inputs, ENVIRONMENT_ROW, extra["marks"], extra["columns"])
    extra["splits_note"] = gr.Markdown(elem_id="environment-splits")  # its task splits (OpenEnv's Task API)
    errors["environment"] = box("environment")
    with gr.Row():
        extra["dry_run_button"] = gr.Button("Dry run: play one episode", size="sm")
        extra["warm_up_button"] = gr.Button("Warm up on this environment", size="sm", elem_id="warm-up-button")
    gr.Markdown(
        "*Warm up* writes tool-call demonstrations by playing the environment with your prompts, queues "
        "SFT on them, then this GRPO job from that adapter: a model that has never called these tools "
        "gives GRPO nothing to learn from."
    )
    extra["transcript"] = gr.Markdown(elem_id="dry-run-transcript")
