"""Train tab: base model, dataset (built-in / Hub / upload, preview, column mapping), method with only its settings,
rewards with their test bench, an environment with a dry run, LoRA and 4-bit, the pre-flight check, and Queue.

Thin over the facade: the fields are declared once in ``components/train_form.py`` (bound to spec paths); here they are
laid out and wired. Handlers return ``{component: update}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gradio as gr
from gradio.utils import NamedString

from backend.api import (
    DEFAULT_HF_JOB_FLAVOR,
    HF_JOB_FLAVORS,
    JobNotFound,
    SpecError,
    StudioAPI,
    UnmappedUpload,
    builtin_dataset_help,
    counted,
    field_methods,
    generates,
    load_spec_text,
    method_part,
    methods,
)
from components import uploads_panel
from components.job_pickers import finished_job_choices, job_choice_id
from components.session import as_user, require_user
from components.train_form import (
    BASE_MODEL_HELP,
    FIELDS,
    FORM_FIELDS,
    KEEP,
    RECIPE_FIELDS,
    SECTION_TITLES,
    SECTIONS,
    TRI_STATE,
    FormError,
    FormField,
    dataset_choices,
    field_problems,
    field_section,
    field_warnings,
    form_to_spec,
    holdout_shown,
    labelled_warning,
    model_notice,
    parse_column_map,
    pick_dataset,
    queue_place,
    queued_link,
    recipe_updates,
    route_problems,
    short_label,
)

FIELD_NAMES = list(FIELDS)
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


@dataclass
class TrainHandles:
    """The Train tab's handles other tabs need: its inputs (Clone fills them), error boxes and result."""

    inputs: dict[str, Any]  # form field name -> component, in FIELDS order
    errors: dict[str, gr.Markdown]  # section -> the box under it
    result: gr.Markdown

    def input_list(self) -> list:
        """The form's components in FIELDS order (the order of the API's parameters)."""
        return [self.inputs[name] for name in FIELD_NAMES]


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
    kw = {"label": f.label, "info": f.info or None, "value": FIELDS[f.name], **options}
    described = f.spec
    if described.kind == "bool":
        return gr.Radio(list(TRI_STATE), **kw) if described.optional else gr.Checkbox(**kw)
    if f.choices is not None and not closed:  # an open catalogue: any Hub id, job or URL may be typed
        return gr.Dropdown(list(f.choices), allow_custom_value=True, elem_classes=[FREE_TEXT_CLASS], **kw)
    choices = list(f.choices if f.choices is not None else described.choices)
    if choices and described.kind not in ("int", "float"):
        return (gr.Radio if len(choices) <= MAX_RADIO_CHOICES else gr.Dropdown)(choices, **kw)
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


def _problems_markdown(problems: list[str]) -> str:
    return "\n".join(f"⚠️ {p}" for p in problems)


def _bench_row(text: str | None) -> Any:
    """The bench's dataset row from its JSON text box (None when empty)."""
    if not (text or "").strip():
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise FormError(
            "method",
            f'the dataset row is not valid JSON ({str(exc)[:80]}); write an object such as {{"solution": "$4$"}}',
        ) from None


def _values(args: tuple) -> dict[str, Any]:
    return dict(zip(FIELD_NAMES, args))


@dataclass
class _Layout:
    """The components the handlers need besides the form's inputs."""

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


def _lay_out() -> _Layout:
    """Place every declared field (method settings in one group per method, shown for it alone) and the rest."""
    inputs: dict[str, Any] = {}
    errors: dict[str, gr.Markdown] = {}
    extra: dict[str, Any] = {}
    marks: dict[str, gr.Markdown] = {}
    columns: dict[str, gr.Column] = {}
    extra["marks"], extra["columns"] = marks, columns  # for the parts laid out below

    def box(section: str) -> gr.Markdown:
        return gr.Markdown(elem_classes="field-error", elem_id=f"{section}-error")

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
    for part, lay_out in (("rollout", _lay_out_rollout), ("environment", _lay_out_environment)):
        shown_for[part] = field_methods(part) or ()
        with gr.Group(visible=FIELDS["method"] in shown_for[part]) as groups[part]:
            lay_out(inputs, errors, extra, box)
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
    errors["general"] = box("general")
    with gr.Accordion("…or run it on Hugging Face Jobs (your account, billed to you)", open=False):
        with gr.Row():
            extra["hf_flavor"] = gr.Dropdown(list(HF_JOB_FLAVORS), value=DEFAULT_HF_JOB_FLAVOR, label="Hardware flavor")
            extra["hf_timeout"] = gr.Textbox("6h", label="Timeout", info="e.g. 90m, 6h")
            extra["hf_button"] = gr.Button("Send to Hugging Face Jobs", elem_id="hf-jobs-button")
        gr.Markdown(
            "The same worker runs there with the same spec and pushes the adapter to your account "
            "(turn on *Push to the Hub*); follow it in the Jobs tab."
        )
    return _Layout(inputs, errors, groups, shown_for, extra, marks, columns)


def _lay_out_rollout(inputs: dict[str, Any], errors: dict, extra: dict, box) -> None:
    """An online method's sampling, and its rewards editor with the test bench."""
    _row(
        inputs,
        [name for name, f in FORM_FIELDS.items() if f.path.startswith("rollout.") and not f.derived],
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


def build(api: StudioAPI) -> TrainHandles:
    """Lay the Train tab out and wire it to the facade."""
    ui = _lay_out()
    if api.storage_status()["mode"] == "none":  # nothing survives a restart here: the Hub keeps the adapter
        ui.inputs["push_to_hub"].value = True
    _wire_form(api, ui)
    _wire_upload(api, ui)
    uploads_panel.wire(api, ui.uploads_panel, ui.inputs["upload_id"])
    _wire_actions(api, ui)
    return TrainHandles(inputs=ui.inputs, errors=ui.errors, result=ui.result)


def _wire_form(api: StudioAPI, ui: _Layout) -> None:
    """What one field changes in others: the dataset source's widgets, the method's group, the parent's model."""
    inputs, pair = ui.inputs, ui.recipe_pair
    source_widgets = {
        "builtin": [ui.columns["builtin_dataset"]],
        "hub": [ui.columns["hub_dataset"], ui.columns["hub_split"]],
        "upload": [ui.upload, ui.upload_note],
    }
    recipe_inputs = [inputs[name] for name in RECIPE_FIELDS]

    def on_source(source):
        return {widget: gr.update(visible=kind == source) for kind, ws in source_widgets.items() for widget in ws}

    inputs["dataset_source"].change(
        on_source, inputs["dataset_source"], [w for ws in source_widgets.values() for w in ws], api_name=False
    )

    holdout_of = ["dataset_source", "builtin_dataset", "base_model", "method", "env_name", "holdout_rows"]

    def on_data(*values):
        """A recipe's held-out count is for its own dataset: another dataset shows empty (auto), as it is sent."""
        shown = holdout_shown(dict(zip(holdout_of, values)))
        return gr.update() if shown is KEEP else shown

    for name in ("dataset_source", "builtin_dataset"):
        inputs[name].change(
            on_data, [inputs[n] for n in holdout_of], inputs["holdout_rows"], api_name=False, show_progress="hidden"
        )

    def recipe_changes(before, model, method, env, values, dataset: bool) -> dict:
        """The recipe fields' updates for ``before`` -> (model, method, env) (components/train_form.py's rule)."""
        before = tuple(before) if before else (FIELDS["base_model"], FIELDS["method"], FIELDS["env_name"])
        current = dict(zip(RECIPE_FIELDS, values))
        changed = recipe_updates(current, before, (model, method, env))
        updates = {
            inputs[name]: changed[name] if name in changed else gr.update()
            for name in RECIPE_FIELDS
            if name != "builtin_dataset"
        }
        if dataset:
            updates[inputs["builtin_dataset"]] = gr.update(
                choices=dataset_choices(model, method, env),
                value=changed.get("builtin_dataset", current["builtin_dataset"]),
            )
        return {**updates, pair: [model, method, env]}

    def on_method(method, model, current, env):
        """Every method change (a clone's too): its settings group, and a built-in dataset that suits it."""
        return {
            **{group: gr.update(visible=method in ui.shown_for[name]) for name, group in ui.groups.items()},
            inputs["builtin_dataset"]: gr.update(
                choices=dataset_choices(model, method, env), value=pick_dataset(model, method, current, env)
            ),
            pair: [model, method, env],
        }

    inputs["method"].change(
        on_method,
        [inputs["method"], inputs["base_model"], inputs["builtin_dataset"], inputs["env_name"]],
        [*ui.groups.values(), inputs["builtin_dataset"], pair],
        api_name=False,
    )

    # A method, model or environment the user picks applies its demo recipe; a clone's (a change, not an input) keeps
    # its values. The method's change event picks the dataset above (by the same rule): one writer for it.
    def on_method_input(before, model, method, env, *values):
        return recipe_changes(before, model, method, env, values, dataset=False)

    inputs["method"].input(
        on_method_input,
        [pair, inputs["base_model"], inputs["method"], inputs["env_name"], *recipe_inputs],
        [*(i for i in recipe_inputs if i is not inputs["builtin_dataset"]), pair],
        api_name=False,
    )

    def on_pick_input(before, model, method, env, *values):
        return recipe_changes(before, model, method, env, values, dataset=True)

    for picker in ("base_model", "env_name"):
        inputs[picker].input(
            on_pick_input,
            [pair, inputs["base_model"], inputs["method"], inputs["env_name"], *recipe_inputs],
            [*recipe_inputs, pair],
            api_name=False,
        )

    def on_environment(env_name, rewards, model, method):
        # The default reward (accuracy on a `solution` column) is for prompt datasets; with an environment its
        # reward is the environment's, and the editor holds extra rewards only: start it empty.
        if env_name and (rewards or "").strip() == FIELDS["rollout_rewards"].strip():
            return {inputs["rollout_rewards"]: "", pair: [model, method, env_name]}
        return {inputs["rollout_rewards"]: gr.update(), pair: [model, method, env_name]}

    inputs["env_name"].change(
        on_environment,
        [inputs["env_name"], inputs["rollout_rewards"], inputs["base_model"], inputs["method"]],
        [inputs["rollout_rewards"], pair],
        api_name=False,
    )

    def on_model(model, method, env):
        return {ui.model_note: model_notice(model), pair: [model, method, env]}

    inputs["base_model"].change(
        on_model, [inputs["base_model"], inputs["method"], inputs["env_name"]], [ui.model_note, pair], api_name=False
    )

    @as_user(signed_in=False)
    def on_parent(user, parent_choice, before, method, env, *values):
        """With a parent job the base model is the parent's: shown, locked until the parent is cleared, and its
        demo recipe applied as if it had been picked."""
        parent_id = job_choice_id(parent_choice)
        unlocked = {inputs["base_model"]: gr.update(interactive=True, info=BASE_MODEL_HELP)}
        if not parent_id or user is None:
            return unlocked
        try:
            parent_model = api.jobs.get_job(parent_id, user).spec.model.name_or_path
        except JobNotFound:
            return unlocked
        return {
            inputs["base_model"]: gr.update(
                value=parent_model,
                interactive=False,
                info=f"The parent job {parent_id}'s base model; clear the parent job to pick another.",
            ),
            **recipe_changes(before, parent_model, method, env, values, dataset=True),
        }

    inputs["parent_job"].change(
        on_parent,
        [inputs["parent_job"], pair, inputs["method"], inputs["env_name"], *recipe_inputs],
        [inputs["base_model"], *recipe_inputs, pair],
        api_name=False,
    )

    def on_builtin_dataset(name):
        return {inputs["builtin_dataset"]: gr.update(info=builtin_dataset_help(name))}

    inputs["builtin_dataset"].change(
        on_builtin_dataset, inputs["builtin_dataset"], inputs["builtin_dataset"], api_name=False
    )

    @as_user(signed_in=False)
    def refresh_parents(user):
        return {inputs["parent_job"]: gr.update(choices=finished_job_choices(api, user))}

    inputs["parent_job"].focus(refresh_parents, None, inputs["parent_job"], api_name=False)


def _wire_upload(api: StudioAPI, ui: _Layout) -> None:
    """An upload is kept if it loads (checked with the Column mapping); a mapping can follow the upload."""
    inputs, note, box, widget = ui.inputs, ui.upload_note, ui.errors["dataset"], ui.upload

    # The Column mapping comes last with a None default, so scripts that send (file, method) keep working:
    # gradio_client reads optional parameters from the handler's own signature (as_user's *inputs hides them).
    def on_upload(
        file, method, column_map=None, profile: gr.OAuthProfile | None = None, token: gr.OAuthToken | None = None
    ):
        """Keep an uploaded dataset file if it reads for the method (with the Column mapping)."""
        user = require_user(profile, token)
        if file is None:
            return {inputs["upload_id"]: "", note: gr.update(value="", visible=False), box: "", widget: gr.update()}
        path = Path(file if isinstance(file, str) else file.name)
        try:
            try:
                columns = parse_column_map(column_map)
            except FormError:
                api.datasets.discard_upload_source(path)  # gradio's copy, unless an identical upload is being checked
                raise
            # The facade removes gradio's copy once no identical upload is checked; a wait for a free check says so.
            upload_id, summary = api.datasets.upload_dataset(path, path.name, method, user, columns, on_wait=gr.Info)
        except UnmappedUpload as exc:  # kept: filling the Column mapping makes it usable, no second upload
            return {
                inputs["upload_id"]: exc.upload_id,
                note: gr.update(value=f"📄 {exc.summary}", visible=True),
                box: _problems_markdown(exc.problems),
                widget: gr.update(),
            }
        except (SpecError, FormError) as exc:
            # The widget is emptied too, so it never shows a file that was not kept.
            problems = exc.problems if isinstance(exc, SpecError) else [str(exc)]
            return {
                inputs["upload_id"]: "",
                note: gr.update(value="", visible=False),
                box: _problems_markdown(problems),
                widget: None,
            }
        return {
            inputs["upload_id"]: upload_id,
            note: gr.update(value=f"✅ {summary}", visible=True),
            box: "",
            widget: gr.update(),
        }

    # While a file is checked (seconds: in a child process), the buttons that read it wait: a Queue clicked meanwhile
    # would read no upload yet, and the check's answer would then clear the refusal from the dataset's box.
    waiting = [ui.check_button, ui.queue_button, ui.hf_button]

    def hold():
        return [gr.update(interactive=False)] * len(waiting)

    def release():
        return [gr.update(interactive=True)] * len(waiting)

    def held(trigger, handler, inputs_, outputs, **kwargs):
        """``trigger(handler)`` with the buttons that read the upload off until it has answered (even by failing).

        A trigger while the last check still runs is answered after it ("always_last"): Gradio's default for a
        chained handler ("once") dropped it, so a mapping fixed seconds after another edit kept the old refusal."""
        trigger(hold, None, waiting, queue=False, show_progress="hidden", api_name=False).then(
            handler, inputs_, outputs, trigger_mode="always_last", **kwargs
        ).then(release, None, waiting, queue=False, show_progress="hidden", api_name=False)

    held(
        widget.upload,
        on_upload,
        [widget, inputs["method"], inputs["column_map"]],
        [inputs["upload_id"], note, box, widget],
        api_name="upload_dataset",
    )

    @as_user
    def recheck_upload(user, source, upload_id, method, column_map):
        """The kept upload checked again with the new Column mapping or method: its summary, or what to fix."""
        if source != "upload" or not upload_id:
            return {note: gr.update(), box: gr.update()}
        try:
            summary = api.datasets.check_upload(upload_id, method, parse_column_map(column_map), user, on_wait=gr.Info)
        except FormError as exc:
            return {note: gr.update(), box: _problems_markdown([str(exc)])}
        except SpecError as exc:
            return {note: gr.update(), box: _problems_markdown(exc.problems)}
        return {note: gr.update(value=f"✅ {summary}", visible=True), box: ""}

    recheck = ([inputs["dataset_source"], inputs["upload_id"], inputs["method"], inputs["column_map"]], [note, box])
    for trigger in (inputs["column_map"].blur, inputs["column_map"].submit, inputs["method"].input):
        held(trigger, recheck_upload, *recheck, api_name=False)


def _wire_actions(api: StudioAPI, ui: _Layout) -> None:
    """Preview, reward bench, dry run, warm-up, Check, Queue and Hugging Face Jobs: each reads the whole form."""
    inputs, errors = ui.inputs, ui.errors
    form = [inputs[name] for name in FIELD_NAMES]
    marks = ui.marks
    # The section boxes first (scripts read them by position), then each field's own box.
    error_boxes = [*(errors[s] for s in SECTIONS), *marks.values()]

    def error_updates(
        problems: list[str] | None = None, form_error: FormError | None = None, values: dict | None = None
    ) -> dict:
        """Every box: each problem under the fields it is about, in their labels' words with the spec path after it,
        the rest under their section; every other box emptied."""
        said = str(form_error) if form_error is not None else None
        at, rest = field_problems([*(problems or []), *([said] if said else [])], values or {}, marks)
        routed = route_problems([p for p in rest if p != said])
        if said in rest:  # a form error no field takes: under the section it names
            routed[form_error.section].append(said)
        fields = {
            mark: "\n".join(f"⚠️ {p} (`{FORM_FIELDS[name].path}`)" for p in at.get(name, []))
            for name, mark in marks.items()
        }
        return {**{errors[section]: _problems_markdown(routed[section]) for section in SECTIONS}, **fields}

    def with_warnings(boxes: dict, warnings: list[str]) -> dict:
        """``boxes`` with each warning about one setting (``path: ...``) under that setting's field too, in its
        label's words, as a problem there would be; the others are said in the result only."""
        at = field_warnings(warnings, marks)
        said = {marks[n]: "\n".join(f"⚠️ {p} (`{FORM_FIELDS[n].path}`)" for p in texts) for n, texts in at.items()}
        return {**boxes, **said}

    def refused(what: str, boxes: dict) -> str:
        """The answer under the button that asked: that nothing was done, and where the problems are shown."""
        marked = [name for name, mark in marks.items() if boxes.get(mark)]
        where = [f"**{short_label(FORM_FIELDS[n])}** ({SECTION_TITLES[field_section(n)]})" for n in marked]
        where += [
            "the note below" if s == "general" else f"the note under {SECTION_TITLES[s]}"
            for s in SECTIONS
            if boxes.get(errors[s])
        ]
        return f"⚠️ {what}: see " + ", ".join(where) + "." if where else f"⚠️ {what}."

    def with_spec(action, args) -> tuple[Any, dict]:
        """Run ``action(spec)`` on the form's spec: (its result, error boxes), or (None, the problems by field)."""
        values = _values(args)
        try:
            return action(form_to_spec(values)), error_updates()
        except FormError as exc:
            return None, error_updates(form_error=exc, values=values)
        except SpecError as exc:
            return None, error_updates(exc.problems, values=values)

    def with_environment(what: str, action, args) -> tuple[Any, dict]:
        """``with_spec`` for actions that play the environment: any failure (an unreachable server, a model that
        cannot load, calls all refused) becomes a sentence in the environment's error box."""
        try:
            return with_spec(action, args)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            return None, error_updates([f"environment: {what} failed: {exc}"])

    # A problem at a field of the folded settings opens them: its box would be out of sight.
    settings_marks = [marks[name] for names in SETTINGS_ROWS for name in names]

    def unfold(*texts):
        return gr.update(open=True) if any(texts) else gr.update()

    open_settings = {
        "fn": unfold,
        "inputs": settings_marks,
        "outputs": ui.settings_box,
        "api_visibility": "private",
        "queue": False,
        "show_progress": "hidden",
    }

    @as_user
    def on_preview(user, *args):
        preview, boxes = with_spec(lambda spec: api.datasets.preview(spec, rows=3, user=user), args)
        if preview is None:
            return {ui.preview_out: "", **boxes}
        parts = [
            f"**{counted(preview.total_rows, 'row')}**, format `{preview.format}`, "
            f"columns: {', '.join(preview.columns)}; "
            f"longest previewed: {preview.summary.max_tokens} tokens (max_length {preview.summary.max_length})"
        ]
        for i, row in enumerate(preview.rows):
            cut = " — **longer than max_length: will be cut**" if row.over_max_length else ""
            parts.append(f"Row {i} · {row.n_tokens} tokens{cut}\n```\n{row.rendered}\n```")
            if row.rendered_rejected is not None:
                parts.append(f"Rejected · {row.n_tokens_rejected} tokens\n```\n{row.rendered_rejected}\n```")
        return {ui.preview_out: "\n\n".join(parts), **boxes}

    ui.preview_button.click(on_preview, form, [ui.preview_out, *error_boxes], api_name="preview_dataset").then(
        **open_settings
    )
    _wire_bench(api, ui)

    @as_user
    def on_dry_run(user, *args):
        episode, boxes = with_environment("dry run", lambda spec: api.environments.dry_run(spec, user=user), args)
        if episode is None:  # said under the button too: the boxes may be a screen away from it
            said = "\n\n".join(text for text in boxes.values() if isinstance(text, str) and text)
            return {ui.transcript: f"**The dry run did not play.**\n\n{said}", **boxes}
        return {ui.transcript: episode.transcript(), **boxes}

    ui.dry_run_button.click(on_dry_run, form, [ui.transcript, *error_boxes], api_name="dry_run").then(**open_settings)

    @as_user
    def on_warm_up(user, *args):
        warm, boxes = with_environment("warm-up", lambda spec: api.environments.warm_up(spec, user=user), args)
        if warm is None:
            return {ui.result: refused("Nothing written or queued", boxes), **boxes}
        text = (
            f"Wrote {warm.demonstrations}. Queued {queued_link(warm.sft.job.id)} (SFT warm-up), then "
            f"{queued_link(warm.grpo.job.id)} (this GRPO job, from the warm-up's adapter; it waits for it). "
            f"Follow them in the Jobs tab (click an id to open it there)."
        )
        warnings = warm.sft.warnings + warm.grpo.warnings
        return {ui.result: text + "".join(f"\n- ⚠️ {labelled_warning(w)}" for w in warnings), **boxes}

    ui.warm_up_button.click(on_warm_up, form, [ui.result, *error_boxes], api_name="warm_up").then(**open_settings)

    @as_user
    def on_check(user, *args):
        checked, boxes = with_spec(lambda spec: api.jobs.check(spec, user=user), args)
        if checked is None:
            return {ui.result: refused("The pre-flight did not pass", boxes), **boxes}
        warnings, memory = checked
        lines = ["✅ Pre-flight passed."] + [f"- ⚠️ {labelled_warning(w)}" for w in warnings] + [f"```\n{memory}\n```"]
        return {ui.result: "\n".join(lines), **with_warnings(boxes, warnings)}

    ui.check_button.click(on_check, form, [ui.result, *error_boxes], api_name="check_job").then(**open_settings)

    @as_user
    def on_queue(user, *args):
        submitted, boxes = with_spec(lambda spec: api.jobs.submit(spec, user=user), args)
        if submitted is None:
            return {ui.result: refused("Not queued", boxes), **boxes}
        where = queue_place(submitted.queue_position, submitted.free_workers)
        text = f"Queued {queued_link(submitted.job.id)} ({where}). Click the id to follow it in the Jobs tab."
        if submitted.warnings:
            text += "\n" + "\n".join(f"- ⚠️ {labelled_warning(w)}" for w in submitted.warnings)
        return {ui.result: text, **with_warnings(boxes, submitted.warnings)}

    ui.queue_button.click(on_queue, form, [ui.result, *error_boxes], api_name="submit_job").then(**open_settings)

    @as_user
    def on_hf_jobs(user, *args):
        from backend.api import RemoteJobError  # loads huggingface_hub's jobs client: on first use only

        *form_args, flavor, timeout = args
        try:
            hf_id, boxes = with_spec(lambda spec: api.hub.send_to_hf_jobs(spec, user, flavor, timeout), form_args)
        except RemoteJobError as exc:
            boxes = error_updates([f"spec: {exc}"])
            return {ui.result: refused("Not sent", boxes), **boxes}
        if hf_id is None:
            return {ui.result: refused("Not sent", boxes), **boxes}
        return {ui.result: f"Sent to Hugging Face Jobs as **{hf_id}** ({flavor}). Follow it in the Jobs tab.", **boxes}

    ui.hf_button.click(
        on_hf_jobs, [*form, ui.hf_flavor, ui.hf_timeout], [ui.result, *error_boxes], api_name="send_to_hf_jobs"
    )

    def submit_spec(spec_json: str, profile: gr.OAuthProfile | None = None) -> str:
        """Queue a job from a JSON spec (for scripts and gradio_client); returns the job id."""
        user = require_user(profile)
        try:
            return api.jobs.submit(load_spec_text(spec_json), user=user).job.id
        except SpecError as exc:
            raise gr.Error("; ".join(exc.problems)) from None

    gr.api(submit_spec, api_name="submit_spec")


# What the reward bench reads its first row with: the dataset fields, and the (online) method the rewards are for.
ONLINE_METHOD = next(m for m in methods() if generates(m))  # the bench's method when the caller gives none
BENCH_DATASET = ("dataset_source", "builtin_dataset", "hub_dataset", "hub_split", "upload_id", "column_map", "method")


def _wire_bench(api: StudioAPI, ui: _Layout) -> None:
    """The reward test bench: score typed completions with the editor's rewards, against a dataset row."""
    from components.train_form import bench_table, parse_rewards

    inputs = ui.inputs

    def on_bench(
        rewards_yaml,
        completions,
        row_json,
        dataset_source=None,
        builtin_dataset=None,
        hub_dataset=None,
        hub_split=None,
        upload_id=None,
        column_map=None,
        method=None,
        profile: gr.OAuthProfile | None = None,
        token: gr.OAuthToken | None = None,
    ):
        """Scores per reward as a table, and a sentence: which row was scored against, or what to fix (shown next
        to the bench; an exception would leave only a bare "Error" in the table's frame). The dataset fields are
        optional for scripts (gradio_client treats a None default as optional): the form's defaults then."""
        user = require_user(profile, token)
        dataset_args = (
            dataset_source or "builtin",
            builtin_dataset or "math-demo",
            hub_dataset or "",
            hub_split or "train",
            upload_id or "",
            column_map or "",
            method if method and generates(method) else ONLINE_METHOD,  # the rewards score an online method's rows
        )

        empty = {"headers": ["completion", "total", "notes"], "data": []}
        lines = [c for c in (completions or "").splitlines() if c.strip()]
        if not lines:
            return {ui.bench_out: empty, ui.bench_note: "⚠️ Type at least one completion, one per line."}
        try:
            rewards = parse_rewards(rewards_yaml)
            row, where = _bench_row(row_json), "the row typed above"
            if row is not None and not isinstance(row, dict):
                raise FormError("method", 'the dataset row must be a JSON object, e.g. {"solution": "$4$"}')
            if row is None and dataset_args:  # the picked dataset's first row, as the trainer would see it
                row, where = bench_first_row(user, dict(zip(BENCH_DATASET, dataset_args)))
            scored = api.datasets.score_rewards(rewards, lines, row, user=user)
        except (FormError, ValueError, SpecError) as exc:
            return {ui.bench_out: empty, ui.bench_note: "⚠️ " + str(exc)[:500]}
        return {ui.bench_out: bench_table(scored), ui.bench_note: f"Scored against {where}."}

    def bench_first_row(user, dataset_values) -> tuple[dict | None, str]:
        try:  # batch size "auto": any group size divides it, and only the dataset matters here
            row = api.datasets.first_row(form_to_spec({**dataset_values, "batch_size": None}), user=user)
        except Exception:  # noqa: BLE001 - no readable dataset (offline Hub, no upload): score without a row
            return None, "no dataset row (type one above for rewards that read a column)"
        shown = json.dumps(row, ensure_ascii=False, default=str)
        return row, f"the dataset's first row: `{shown[:160]}{'…' if len(shown) > 160 else ''}`"

    ui.bench_button.click(
        on_bench,
        [inputs["rollout_rewards"], ui.bench_completions, ui.bench_row, *(inputs[name] for name in BENCH_DATASET)],
        [ui.bench_out, ui.bench_note],
        api_name="score_rewards",
    )
