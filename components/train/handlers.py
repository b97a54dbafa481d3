"""The Train tab's behaviour: module-level handlers of ``(api, ui, <what Gradio passes>)``, wired in ``wire``.

Thin over the facade: the fields are declared once (fields.py, bound to spec paths) and laid out in layout.py; here
one field's change updates others, an upload is checked, and Preview, the reward bench, the dry run, the warm-up,
Check, Queue and Hugging Face Jobs read the whole form. Handlers return ``{component: update}``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr

from backend.api import (
    JobNotFound,
    SpecError,
    StudioAPI,
    UnmappedUpload,
    builtin_dataset_help,
    load_spec_text,
)
from components.job_pickers import finished_job_choices, job_choice_id
from components.session import as_user
from components.train import bench, forecast_panel, splits_note, uploads_panel, views
from components.train.fields import BASE_MODEL_HELP, SECTIONS, FormError, parse_column_map
from components.train.form import (
    field_problems,
    field_warnings,
    form_to_spec,
    model_notice,
    route_problems,
)
from components.train.layout import SETTINGS_ROWS, TrainLayout
from components.train.recipes import (
    FIELDS,
    KEEP,
    RECIPE_FIELDS,
    dataset_choices,
    holdout_shown,
    pick_dataset,
    recipe_updates,
)
from components.train.views import FIELD_NAMES, problems_markdown
from components.wiring import bind

HOLDOUT_OF = ("dataset_source", "builtin_dataset", "base_model", "method", "env_name", "holdout_rows")


def wire(api: StudioAPI, ui: TrainLayout) -> None:
    """Every event of the Train tab."""
    _wire_form(api, ui)
    splits_note.wire(api, ui.inputs["env_name"], ui.splits_note)
    _wire_upload(api, ui)
    uploads_panel.wire(api, ui.uploads_panel, ui.inputs["upload_id"])
    _wire_actions(api, ui)


# --- what one field changes in others ------------------------------------------------------------------------------


def source_widgets(ui: TrainLayout) -> dict[str, list]:
    """Each dataset source's widgets (shown for it alone)."""
    return {
        "builtin": [ui.columns["builtin_dataset"]],
        "hub": [ui.columns["hub_dataset"], ui.columns["hub_split"]],
        "upload": [ui.upload, ui.upload_note],
    }


def on_source(ui: TrainLayout, source):
    """The picked dataset source's widgets shown, the others hidden."""
    return {widget: gr.update(visible=kind == source) for kind, ws in source_widgets(ui).items() for widget in ws}


def on_data(*values):
    """A recipe's held-out count is for its own dataset: another dataset shows empty (auto), as it is sent."""
    shown = holdout_shown(dict(zip(HOLDOUT_OF, values)))
    return gr.update() if shown is KEEP else shown


def recipe_changes(ui: TrainLayout, before, model, method, env, values, dataset: bool) -> dict:
    """The recipe fields' updates for ``before`` -> (model, method, env) (components/train/recipes.py's rule)."""
    inputs = ui.inputs
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
    return {**updates, ui.recipe_pair: [model, method, env]}


def on_method(ui: TrainLayout, method, model, current, env):
    """Every method change (a clone's too): its settings group, and a built-in dataset that suits it."""
    return {
        **{group: gr.update(visible=method in ui.shown_for[name]) for name, group in ui.groups.items()},
        ui.inputs["builtin_dataset"]: gr.update(
            choices=dataset_choices(model, method, env), value=pick_dataset(model, method, current, env)
        ),
        ui.recipe_pair: [model, method, env],
    }


def on_method_input(ui: TrainLayout, before, model, method, env, *values):
    """A method the user picks applies its demo recipe (the method's change event picks the dataset)."""
    return recipe_changes(ui, before, model, method, env, values, dataset=False)


def on_pick_input(ui: TrainLayout, before, model, method, env, *values):
    """A model or environment the user picks applies its demo recipe, the dataset included."""
    return recipe_changes(ui, before, model, method, env, values, dataset=True)


def on_environment(ui: TrainLayout, env_name, rewards, model, method):
    """The default reward (accuracy on a `solution` column) is for prompt datasets; with an environment its reward is
    the environment's, and the editor holds extra rewards only: start it empty."""
    rewards_input, pair = ui.inputs["rollout_rewards"], ui.recipe_pair
    if env_name and (rewards or "").strip() == FIELDS["rollout_rewards"].strip():
        return {rewards_input: "", pair: [model, method, env_name]}
    return {rewards_input: gr.update(), pair: [model, method, env_name]}


def on_model(ui: TrainLayout, model, method, env):
    """The picked model's notice."""
    return {ui.model_note: model_notice(model), ui.recipe_pair: [model, method, env]}


def on_parent(api: StudioAPI, ui: TrainLayout, user, parent_choice, before, method, env, *values):
    """With a parent job the base model is the parent's: shown, locked until the parent is cleared, and its demo
    recipe applied as if it had been picked."""
    base_model = ui.inputs["base_model"]
    parent_id = job_choice_id(parent_choice)
    unlocked = {base_model: gr.update(interactive=True, info=BASE_MODEL_HELP)}
    if not parent_id or user is None:
        return unlocked
    try:
        parent_model = api.jobs.get_job(parent_id, user).spec.model.name_or_path
    except JobNotFound:
        return unlocked
    return {
        base_model: gr.update(
            value=parent_model,
            interactive=False,
            info=f"The parent job {parent_id}'s base model; clear the parent job to pick another.",
        ),
        **recipe_changes(ui, before, parent_model, method, env, values, dataset=True),
    }


def on_builtin_dataset(ui: TrainLayout, name):
    """The picked built-in dataset's help."""
    return {ui.inputs["builtin_dataset"]: gr.update(info=builtin_dataset_help(name))}


def refresh_parents(api: StudioAPI, ui: TrainLayout, user):
    """The parent job's choices: the user's finished jobs."""
    return {ui.inputs["parent_job"]: gr.update(choices=finished_job_choices(api, user))}


def _wire_form(api: StudioAPI, ui: TrainLayout) -> None:
    """What one field changes in others: the dataset source's widgets, the method's group, the parent's model."""
    inputs, pair = ui.inputs, ui.recipe_pair
    recipe_inputs = [inputs[name] for name in RECIPE_FIELDS]
    widgets = [w for ws in source_widgets(ui).values() for w in ws]
    inputs["dataset_source"].change(bind(on_source, ui), inputs["dataset_source"], widgets, api_name=False)
    for name in ("dataset_source", "builtin_dataset"):
        inputs[name].change(
            on_data, [inputs[n] for n in HOLDOUT_OF], inputs["holdout_rows"], api_name=False, show_progress="hidden"
        )
    inputs["method"].change(
        bind(on_method, ui),
        [inputs["method"], inputs["base_model"], inputs["builtin_dataset"], inputs["env_name"]],
        [*ui.groups.values(), inputs["builtin_dataset"], pair],
        api_name=False,
    )
    # A method, model or environment the user picks applies its demo recipe; a clone's (a change, not an input) keeps
    # its values. The method's change event picks the dataset above (by the same rule): one writer for it.
    picked = [pair, inputs["base_model"], inputs["method"], inputs["env_name"], *recipe_inputs]
    inputs["method"].input(
        bind(on_method_input, ui),
        picked,
        [*(i for i in recipe_inputs if i is not inputs["builtin_dataset"]), pair],
        api_name=False,
    )
    for name in ("base_model", "env_name"):
        inputs[name].input(bind(on_pick_input, ui), picked, [*recipe_inputs, pair], api_name=False)
    inputs["env_name"].change(
        bind(on_environment, ui),
        [inputs["env_name"], inputs["rollout_rewards"], inputs["base_model"], inputs["method"]],
        [inputs["rollout_rewards"], pair],
        api_name=False,
    )
    inputs["base_model"].change(
        bind(on_model, ui),
        [inputs["base_model"], inputs["method"], inputs["env_name"]],
        [ui.model_note, pair],
        api_name=False,
    )
    inputs["parent_job"].change(
        as_user(bind(on_parent, api, ui), signed_in=False),
        [inputs["parent_job"], pair, inputs["method"], inputs["env_name"], *recipe_inputs],
        [inputs["base_model"], *recipe_inputs, pair],
        api_name=False,
    )
    dataset = inputs["builtin_dataset"]
    dataset.change(bind(on_builtin_dataset, ui), dataset, dataset, api_name=False)
    parents = as_user(bind(refresh_parents, api, ui), signed_in=False)
    inputs["parent_job"].focus(parents, None, inputs["parent_job"], api_name=False)


# --- the upload ----------------------------------------------------------------------------------------------------


# The Column mapping comes last with a None default, so scripts that send (file, method) keep working: gradio_client
# reads optional parameters from the handler's own signature (as_user shows Gradio the handler's, after ``user``).
def on_upload(api: StudioAPI, ui: TrainLayout, user, file, method, column_map=None):
    """Keep an uploaded dataset file if it reads for the method (with the Column mapping)."""
    upload_id, note, box, widget = ui.inputs["upload_id"], ui.upload_note, ui.errors["dataset"], ui.upload
    if file is None:
        return {upload_id: "", note: gr.update(value="", visible=False), box: "", widget: gr.update()}
    path = Path(file if isinstance(file, str) else file.name)
    try:
        try:
            columns = parse_column_map(column_map)
        except FormError:
            api.datasets.discard_upload_source(path)  # gradio's copy, unless an identical upload is being checked
            raise
        # The facade removes gradio's copy once no identical upload is checked; a wait for a free check says so.
        kept, summary = api.datasets.upload_dataset(path, path.name, method, user, columns, on_wait=gr.Info)
    except UnmappedUpload as exc:  # kept: filling the Column mapping makes it usable, no second upload
        return {
            upload_id: exc.upload_id,
            note: gr.update(value=f"📄 {exc.summary}", visible=True),
            box: problems_markdown(exc.problems),
            widget: gr.update(),
        }
    except (SpecError, FormError) as exc:
        # The widget is emptied too, so it never shows a file that was not kept.
        problems = exc.problems if isinstance(exc, SpecError) else [str(exc)]
        return {upload_id: "", note: gr.update(value="", visible=False), box: problems_markdown(problems), widget: None}
    return {upload_id: kept, note: gr.update(value=f"✅ {summary}", visible=True), box: "", widget: gr.update()}


def recheck_upload(api: StudioAPI, ui: TrainLayout, user, source, upload_id, method, column_map):
    """The kept upload checked again with the new Column mapping or method: its summary, or what to fix."""
    note, box = ui.upload_note, ui.errors["dataset"]
    if source != "upload" or not upload_id:
        return {note: gr.update(), box: gr.update()}
    try:
        summary = api.datasets.check_upload(upload_id, method, parse_column_map(column_map), user, on_wait=gr.Info)
    except FormError as exc:
        return {note: gr.update(), box: problems_markdown([str(exc)])}
    except SpecError as exc:
        return {note: gr.update(), box: problems_markdown(exc.problems)}
    return {note: gr.update(value=f"✅ {summary}", visible=True), box: ""}


def waiting(ui: TrainLayout) -> list:
    """The buttons that read the upload: they wait while a file is checked (seconds: in a child process), since a
    Queue clicked meanwhile would read no upload yet, and the check's answer would then clear the refusal from the
    dataset's box."""
    return [ui.check_button, ui.queue_button, ui.hf_button]


def hold(ui: TrainLayout):
    """The buttons that read the upload off."""
    return [gr.update(interactive=False)] * len(waiting(ui))


def release(ui: TrainLayout):
    """The buttons that read the upload on again."""
    return [gr.update(interactive=True)] * len(waiting(ui))


def queuing():
    """The Queue button while its click is answered: busy, so a double click queues nothing twice."""
    return gr.update(value="Queuing…", interactive=False)


def queue_again():
    """The Queue button once the answer is in (or the handler failed)."""
    return gr.update(value="Queue", interactive=True)


def _held(ui: TrainLayout, trigger, handler, inputs, outputs, **kwargs) -> None:
    """``trigger(handler)`` with the buttons that read the upload off until it has answered (even by failing).

    A trigger while the last check still runs is answered after it ("always_last"): Gradio's default for a chained
    handler ("once") dropped it, so a mapping fixed seconds after another edit kept the old refusal."""
    quiet = {"queue": False, "show_progress": "hidden", "api_name": False}
    trigger(bind(hold, ui), None, waiting(ui), **quiet).then(
        handler, inputs, outputs, trigger_mode="always_last", **kwargs
    ).then(bind(release, ui), None, waiting(ui), **quiet)


def _wire_upload(api: StudioAPI, ui: TrainLayout) -> None:
    """An upload is kept if it loads (checked with the Column mapping); a mapping can follow the upload."""
    inputs, note, box, widget = ui.inputs, ui.upload_note, ui.errors["dataset"], ui.upload
    _held(
        ui,
        widget.upload,
        as_user(bind(on_upload, api, ui)),
        [widget, inputs["method"], inputs["column_map"]],
        [inputs["upload_id"], note, box, widget],
        api_name="upload_dataset",
    )
    recheck = ([inputs["dataset_source"], inputs["upload_id"], inputs["method"], inputs["column_map"]], [note, box])
    for trigger in (inputs["column_map"].blur, inputs["column_map"].submit, inputs["method"].input):
        _held(ui, trigger, as_user(bind(recheck_upload, api, ui)), *recheck, api_name=False)


# --- the actions that read the whole form --------------------------------------------------------------------------


def error_boxes(ui: TrainLayout) -> list:
    """Every box that shows problems: the section boxes first (scripts read them by position), then each field's."""
    return [*(ui.errors[s] for s in SECTIONS), *ui.marks.values()]


def error_updates(
    ui: TrainLayout, problems: list[str] | None = None, form_error: FormError | None = None, values: dict | None = None
) -> dict:
    """Every box: each problem under the fields it is about, in their labels' words with the spec path after it, the
    rest under their section; every other box emptied."""
    said = str(form_error) if form_error is not None else None
    at, rest = field_problems([*(problems or []), *([said] if said else [])], values or {}, ui.marks)
    routed = route_problems([p for p in rest if p != said])
    if said in rest and form_error is not None:  # a form error no field takes: under the section it names
        routed[form_error.section].append(said)
    fields = {mark: views.field_lines(name, at.get(name, [])) for name, mark in ui.marks.items()}
    return {**{ui.errors[section]: problems_markdown(routed[section]) for section in SECTIONS}, **fields}


def with_warnings(ui: TrainLayout, boxes: dict, warnings: list[str]) -> dict:
    """``boxes`` with each warning about one setting (``path: ...``) under that setting's field too, in its label's
    words, as a problem there would be; the others are said in the result only."""
    at = field_warnings(warnings, ui.marks)
    return {**boxes, **{ui.marks[name]: views.field_lines(name, texts) for name, texts in at.items()}}


def refused(ui: TrainLayout, what: str, boxes: dict) -> str:
    """The answer under the button that asked: that nothing was done, and where the problems are shown."""
    marked = [name for name, mark in ui.marks.items() if boxes.get(mark)]
    return views.refused_text(what, marked, [s for s in SECTIONS if boxes.get(ui.errors[s])])


def with_spec(ui: TrainLayout, action: Callable[[dict], Any], args) -> tuple[Any, dict]:
    """Run ``action(spec)`` on the form's spec: (its result, error boxes), or (None, the problems by field)."""
    values = views.form_values(args)
    try:
        return action(form_to_spec(values)), error_updates(ui)
    except FormError as exc:
        return None, error_updates(ui, form_error=exc, values=values)
    except SpecError as exc:
        return None, error_updates(ui, exc.problems, values=values)


def with_environment(ui: TrainLayout, what: str, action: Callable[[dict], Any], args) -> tuple[Any, dict]:
    """``with_spec`` for actions that play the environment: any failure (an unreachable server, a model that cannot
    load, calls all refused) becomes a sentence in the environment's error box."""
    try:
        return with_spec(ui, action, args)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        return None, error_updates(ui, [f"environment: {what} failed: {exc}"])


def unfold(*texts):
    """A problem at a field of the folded settings opens them: its box would be out of sight."""
    return gr.update(open=True) if any(texts) else gr.update()


def on_preview(api: StudioAPI, ui: TrainLayout, user, *args):
    """The first rows of the form's dataset as the trainer sees them."""
    preview, boxes = with_spec(ui, lambda spec: api.datasets.preview(spec, rows=3, user=user), args)
    if preview is None:
        return {ui.preview_out: "", **boxes}
    return {ui.preview_out: views.preview_markdown(preview), **boxes}


def on_dry_run(api: StudioAPI, ui: TrainLayout, user, *args):
    """One episode of the form's environment, played by its model."""
    episode, boxes = with_environment(ui, "dry run", lambda spec: api.environments.dry_run(spec, user=user), args)
    if episode is None:  # said under the button too: the boxes may be a screen away from it
        said = "\n\n".join(text for text in boxes.values() if isinstance(text, str) and text)
        return {ui.transcript: f"**The dry run did not play.**\n\n{said}", **boxes}
    return {ui.transcript: episode.transcript(), **boxes}


def on_warm_up(api: StudioAPI, ui: TrainLayout, user, *args):
    """Tool-call demonstrations written from the environment, SFT on them queued, then this GRPO job from it."""
    warm, boxes = with_environment(ui, "warm-up", lambda spec: api.environments.warm_up(spec, user=user), args)
    if warm is None:
        return {ui.result: refused(ui, "Nothing written or queued", boxes), **boxes}
    return {ui.result: views.warm_up_markdown(warm), **boxes}


def on_check(api: StudioAPI, ui: TrainLayout, user, *args):
    """The pre-flight check and memory estimate of the form's spec."""
    checked, boxes = with_spec(ui, lambda spec: api.jobs.check(spec, user=user), args)
    if checked is None:
        return {ui.result: refused(ui, "The pre-flight did not pass", boxes), **boxes}
    warnings, memory = checked
    return {ui.result: views.check_markdown(warnings, memory), **with_warnings(ui, boxes, warnings)}


def on_queue(api: StudioAPI, ui: TrainLayout, user, *args):
    """The form's job queued."""
    submitted, boxes = with_spec(ui, lambda spec: api.jobs.submit(spec, user=user), args)
    if submitted is None:
        return {ui.result: refused(ui, "Not queued", boxes), **boxes}
    return {ui.result: views.queued_markdown(submitted), **with_warnings(ui, boxes, submitted.warnings)}


def on_hf_jobs(api: StudioAPI, ui: TrainLayout, user, *args):
    """The form's job sent to Hugging Face Jobs (the last two inputs: flavor and timeout)."""
    from backend.api import RemoteJobError  # loads huggingface_hub's jobs client: on first use only

    *form_args, flavor, timeout = args
    try:
        hf_id, boxes = with_spec(ui, lambda spec: api.hub.send_to_hf_jobs(spec, user, flavor, timeout), form_args)
    except RemoteJobError as exc:
        boxes = error_updates(ui, [f"spec: {exc}"])
        return {ui.result: refused(ui, "Not sent", boxes), **boxes}
    if hf_id is None:
        return {ui.result: refused(ui, "Not sent", boxes), **boxes}
    flavor = api.hub.remote_job(hf_id, user).flavor  # "auto" became the smallest flavor that fits
    return {ui.result: f"Sent to Hugging Face Jobs as **{hf_id}** ({flavor}). Follow it in the Jobs tab.", **boxes}


def submit_spec(api: StudioAPI, user, spec_json: str) -> str:
    """Queue a job from a JSON spec (for scripts and gradio_client); returns the job id."""
    try:
        return api.jobs.submit(load_spec_text(spec_json), user=user).job.id
    except SpecError as exc:
        raise gr.Error("; ".join(exc.problems)) from None


def _wire_actions(api: StudioAPI, ui: TrainLayout) -> None:
    """Preview, reward bench, dry run, warm-up, Check, Queue and Hugging Face Jobs: each reads the whole form."""
    form = [ui.inputs[name] for name in FIELD_NAMES]
    boxes = error_boxes(ui)
    open_settings = {
        "fn": unfold,
        "inputs": [ui.marks[name] for names in SETTINGS_ROWS for name in names],
        "outputs": ui.settings_box,
        "api_visibility": "private",
        "queue": False,
        "show_progress": "hidden",
    }
    actions = (
        (ui.preview_button, on_preview, ui.preview_out, "preview_dataset"),
        (ui.dry_run_button, on_dry_run, ui.transcript, "dry_run"),
        (ui.warm_up_button, on_warm_up, ui.result, "warm_up"),
        (ui.check_button, on_check, ui.result, "check_job"),
        (ui.queue_button, on_queue, ui.result, "submit_job"),
    )
    quiet = {"queue": False, "show_progress": "hidden", "api_name": False}
    for button, handler, output, api_name in actions:
        answer = {"fn": as_user(bind(handler, api, ui)), "inputs": form, "outputs": [output, *boxes]}
        if button is ui.queue_button:  # busy from the click until the answer: a second click cannot queue again
            event = button.click(queuing, None, button, **quiet).then(**answer, api_name=api_name)
            event = event.then(queue_again, None, button, **quiet)
        else:
            event = button.click(**answer, api_name=api_name)
        event.then(**open_settings)
        if button is ui.check_button:  # a rollout job's forecast, queued once the pre-flight passed
            forecast_panel.wire(api, ui.forecast, event, ui.result, form)
        if handler is on_preview:  # the bench's events follow the preview's, as the page lays them out
            bench.wire(api, ui)
    ui.hf_button.click(
        as_user(bind(on_hf_jobs, api, ui)),
        [*form, ui.hf_flavor, ui.hf_timeout],
        [ui.result, *boxes],
        api_name="send_to_hf_jobs",
    )
    gr.api(as_user(bind(submit_spec, api)), api_name="submit_spec")
