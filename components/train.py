"""Train tab: base model, dataset (built-in / Hub / upload, preview, column mapping), method with only its settings,
rewards with their test bench, an environment with a dry run, LoRA and 4-bit, the pre-flight check, and Queue.

Thin over the facade: the form <-> spec mapping lives in ``components/form.py``.
"""

from __future__ import annotations

import json
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
from gradio.utils import NamedString

from backend.api import StudioAPI
from backend.spec import REWARD_NAMES, SpecError, load_spec_text
from backend.store import JobNotFound, JobStatus
from backend.uploads import UnmappedUpload
from components.form import (
    BASE_MODEL_HELP, CURATED_MODELS, DATASET_SOURCES, ENVIRONMENT_CHOICES, FIELDS, SECTIONS, FormError,
    builtin_dataset_choices, builtin_dataset_help, form_help, job_choice_id, model_notice, parse_column_map,
    queued_link, TRI_STATE, form_to_spec, route_problems,
)
from components.session import as_user, require_user


FIELD_NAMES = list(FIELDS)


@dataclass
class TrainHandles:
    inputs: dict[str, Any]  # form field name -> component, in FIELDS order
    errors: dict[str, gr.Markdown]  # section -> the box under it
    result: gr.Markdown

    def input_list(self) -> list:
        return [self.inputs[name] for name in FIELD_NAMES]


def _problems_markdown(problems: list[str]) -> str:
    return "\n".join(f"⚠️ {p}" for p in problems)


def error_updates(problems: list[str] | None = None, form_error: FormError | None = None) -> list[str]:
    """One Markdown value per section box (in SECTIONS order): each problem next to the field it is about."""
    routed = route_problems(problems or [])
    if form_error is not None:
        routed[form_error.section].append(str(form_error))
    return [_problems_markdown(routed[section]) for section in SECTIONS]


def finished_job_choices(api: StudioAPI, user) -> list[str]:
    """Succeeded jobs with an adapter, newest first, as ``<id> · <method> · <name>``."""
    if user is None:
        return [""]
    jobs = [j for j in reversed(api.list_jobs(user=user))
            if j.status is JobStatus.succeeded and j.artifacts.adapter_dir]
    return [""] + [f"{j.id} · {j.spec.method.value} · {j.spec.output.run_name or j.spec.dataset.name}" for j in jobs]


def _bench_row(text: str | None) -> Any:
    """The bench's dataset row from its JSON text box (None when empty)."""
    if not (text or "").strip():
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise FormError("method", f"the dataset row is not valid JSON ({str(exc)[:80]}); "
                        'write an object such as {"solution": "$4$"}') from None


def _values(args: tuple) -> dict[str, Any]:
    return dict(zip(FIELD_NAMES, args))


def build(api: StudioAPI) -> TrainHandles:
    inputs: dict[str, Any] = {}
    errors: dict[str, gr.Markdown] = {}

    gr.Markdown("### 1. Model")
    with gr.Row():
        inputs["base_model"] = gr.Dropdown(
            CURATED_MODELS, value=FIELDS["base_model"], allow_custom_value=True, label="Base model",
            info=BASE_MODEL_HELP, elem_id="base-model",
        )
        inputs["parent_job"] = gr.Dropdown(
            [""], value="", label="…or continue from a finished job", info=form_help("parent_job", ""),
            elem_id="parent-job", allow_custom_value=True,
        )
    model_note = gr.Markdown(model_notice(FIELDS["base_model"]), elem_id="model-notice")
    errors["model"] = gr.Markdown(elem_classes="field-error", elem_id="model-error")

    gr.Markdown("### 2. Dataset")
    with gr.Row():
        inputs["dataset_source"] = gr.Radio(DATASET_SOURCES, value="builtin", label="Source", elem_id="dataset-source")
        inputs["builtin_dataset"] = gr.Dropdown(
            builtin_dataset_choices(), value=FIELDS["builtin_dataset"], label="Built-in dataset",
            info=builtin_dataset_help(FIELDS["builtin_dataset"]),
            elem_id="builtin-dataset", allow_custom_value=True,
        )
        inputs["hub_dataset"] = gr.Textbox(label="Hub dataset id", placeholder="trl-lib/Capybara", visible=False)
        inputs["hub_split"] = gr.Textbox(value="train", label="Split", visible=False)
    # file_types filters the browser's file picker; on the server the upload check refuses other files with a
    # sentence and removes them.
    upload = gr.File(label="Upload a dataset (.jsonl, .json, .csv, .parquet)", visible=False,
                     file_types=[".jsonl", ".json", ".csv", ".parquet"], elem_id="dataset-upload")
    # Gradio 6.31's File.preprocess checks file_types (refusing with its own message, the file left in its temp
    # folder) and creates an empty temp file per upload that nobody removes (gradio/components/file.py). The
    # handler needs only the path.
    upload._process_single_file = lambda f: NamedString(f.path)
    inputs["upload_id"] = gr.Textbox(visible=False)  # an id only: the server resolves it in the user's own folder
    upload_note = gr.Markdown(visible=False)
    with gr.Row():
        inputs["column_map"] = gr.Textbox(
            label="Column mapping", placeholder="prompt=question, completion=answer", elem_id="column-map",
            info=form_help("column_map", ""),
        )
        inputs["max_rows"] = gr.Number(value=None, precision=0, minimum=0, label="Max rows (0: all)",
                                       info=form_help("max_rows", "dataset.max_rows"))
    errors["dataset"] = gr.Markdown(elem_classes="field-error", elem_id="dataset-error")
    with gr.Accordion("Preview: the first rows as the trainer sees them", open=False):
        preview_button = gr.Button("Render preview", size="sm")
        preview_out = gr.Markdown(elem_id="dataset-preview")

    gr.Markdown("### 3. Method")
    inputs["method"] = gr.Radio(["sft", "dpo", "grpo"], value="sft", label="Method", info=form_help("method", "method"),
                                elem_id="method")
    with gr.Group(visible=True) as sft_group:
        with gr.Row():
            inputs["sft_completion_only"] = gr.Checkbox(True, label="Loss on completions only",
                                                        info=form_help("sft_completion_only",
                                                                       "sft.completion_only_loss"))
            inputs["sft_packing"] = gr.Radio(list(TRI_STATE), value="auto", label="Packing",
                                             info=form_help("sft_packing", "sft.packing"))
    with gr.Group(visible=False) as dpo_group:
        with gr.Row():
            inputs["dpo_beta"] = gr.Number(0.1, label="beta", info=form_help("dpo_beta", "dpo.beta"))
            inputs["dpo_loss_type"] = gr.Dropdown(
                ["sigmoid", "ipo", "hinge", "robust", "apo_zero", "apo_down", "sigmoid_norm"], value="sigmoid",
                label="Loss", info=form_help("dpo_loss_type", "dpo.loss_type"),
            )
    with gr.Group(visible=False) as grpo_group:
        with gr.Row():
            inputs["grpo_num_generations"] = gr.Number(4, precision=0, label="Generations per prompt",
                                                       info=form_help("grpo_num_generations", "grpo.num_generations"))
            inputs["grpo_max_completion_length"] = gr.Number(
                FIELDS["grpo_max_completion_length"], precision=0, label="Max completion length",
                info=form_help("grpo_max_completion_length", "grpo.max_completion_length"))
            inputs["grpo_temperature"] = gr.Number(1.0, label="Temperature",
                                                   info=form_help("grpo_temperature", "grpo.temperature"))
        inputs["grpo_rewards"] = gr.Code(
            FIELDS["grpo_rewards"], language="yaml", label=f"Rewards (YAML list; names: {', '.join(REWARD_NAMES)})",
        )
        with gr.Accordion("Reward test bench: score completions before training", open=False):
            bench_completions = gr.Textbox(lines=3, label="Completions, one per line")
            bench_row = gr.Textbox(label="Dataset row (JSON) for rewards that read a column",
                                   placeholder='{"solution": "$4$"}')
            bench_button = gr.Button("Score", size="sm")
            bench_note = gr.Markdown(elem_id="bench-note")
            bench_out = gr.Dataframe(label="Scores", interactive=False, elem_id="bench-scores")
        gr.Markdown("**Environment** (multi-turn agent training with OpenEnv)")
        with gr.Row():
            inputs["env_name"] = gr.Dropdown(
                ENVIRONMENT_CHOICES, value="", allow_custom_value=True, label="Environment",
                info=form_help("env_name", "environment.name"), elem_id="env-name",
            )
            inputs["env_reward"] = gr.Radio(["success", "last", "sum"], value="success", label="Reward",
                                            info=form_help("env_reward", "environment.reward"))
            inputs["env_max_iterations"] = gr.Number(8, precision=0, label="Max tool calls per episode",
                                                     info=form_help("env_max_iterations",
                                                                    "environment.max_tool_calling_iterations"))
            inputs["env_eval_episodes"] = gr.Number(16, precision=0, label="Evaluation episodes",
                                                    info=form_help("env_eval_episodes", "environment.eval_episodes"))
        errors["environment"] = gr.Markdown(elem_classes="field-error", elem_id="environment-error")
        with gr.Row():
            dry_run_button = gr.Button("Dry run: play one episode", size="sm")
            warm_up_button = gr.Button("Warm up on this environment", size="sm", elem_id="warm-up-button")
        gr.Markdown("*Warm up* writes tool-call demonstrations by playing the environment with your prompts, queues "
                    "SFT on them, then this GRPO job from that adapter: a model that has never called these tools "
                    "gives GRPO nothing to learn from.")
        transcript = gr.Markdown(elem_id="dry-run-transcript")
    errors["method"] = gr.Markdown(elem_classes="field-error", elem_id="method-error")

    with gr.Accordion("4. Training settings, LoRA and quantization", open=False):
        with gr.Row():
            inputs["max_steps"] = gr.Number(FIELDS["max_steps"], precision=0, label="Max steps",
                                            info=form_help("max_steps", "training.max_steps"))
            inputs["learning_rate"] = gr.Number(FIELDS["learning_rate"], step=1e-5, label="Learning rate",
                                                info=form_help("learning_rate", "training.learning_rate"))
            inputs["batch_size"] = gr.Number(FIELDS["batch_size"], precision=0, label="Batch size",
                                             info=form_help("batch_size", "training.batch_size"))
            inputs["grad_accum"] = gr.Number(1, precision=0, label="Gradient accumulation",
                                             info=form_help("grad_accum", "training.gradient_accumulation_steps"))
            inputs["max_length"] = gr.Number(FIELDS["max_length"], precision=0, label="Max length",
                                             info=form_help("max_length", "training.max_length"))
        with gr.Row():
            inputs["lora_enabled"] = gr.Checkbox(True, label="LoRA", info=form_help("lora_enabled", "lora.enabled"))
            inputs["lora_r"] = gr.Number(16, precision=0, label="LoRA rank", info=form_help("lora_r", "lora.r"))
            inputs["lora_alpha"] = gr.Number(32, precision=0, label="LoRA alpha",
                                             info=form_help("lora_alpha", "lora.alpha"))
            inputs["quant_mode"] = gr.Radio(["none", "4bit", "8bit"], value="none", label="Quantization",
                                            info=form_help("quant_mode", "quantization.mode"))
        with gr.Row():
            inputs["holdout_rows"] = gr.Number(0, precision=0, label="Held-out rows (before/after evaluation)",
                                               info=form_help("holdout_rows", "eval.holdout_rows"))
            inputs["run_name"] = gr.Textbox(label="Run name", info=form_help("run_name", "output.run_name"))
        with gr.Row():
            inputs["push_to_hub"] = gr.Checkbox(False, label="Push to the Hub when done",
                                                info=form_help("push_to_hub", "output.push_to_hub"))
            inputs["hub_repo_id"] = gr.Textbox(label="Hub repo", placeholder="you/my-adapter",
                                               info=form_help("hub_repo_id", "output.hub_repo_id"))
            inputs["hub_private"] = gr.Checkbox(True, label="Private repo",
                                                info=form_help("hub_private", "output.private"))
            inputs["trackio"] = gr.Checkbox(False, label="Track with trackio",
                                            info=form_help("trackio", "output.trackio"))
    errors["settings"] = gr.Markdown(elem_classes="field-error", elem_id="settings-error")

    with gr.Row():
        check_button = gr.Button("Check (pre-flight and memory)", elem_id="check-button")
        queue_button = gr.Button("Queue", variant="primary", elem_id="queue-button")
    with gr.Accordion("…or run it on Hugging Face Jobs (your account, billed to you)", open=False):
        with gr.Row():
            hf_flavor = gr.Dropdown(["l4x1", "a10g-small", "a10g-large", "l40sx1", "a100-large", "h200", "t4-small",
                                     "cpu-upgrade"], value="l4x1", label="Hardware flavor")
            hf_timeout = gr.Textbox("6h", label="Timeout", info="e.g. 90m, 6h")
            hf_button = gr.Button("Send to Hugging Face Jobs", elem_id="hf-jobs-button")
        gr.Markdown("The same worker runs there with the same spec and pushes the adapter to your account "
                    "(turn on *Push to the Hub*); follow it in the Jobs tab.")
    errors["general"] = gr.Markdown(elem_classes="field-error", elem_id="general-error")
    result = gr.Markdown(elem_id="queue-result")

    handles = TrainHandles(inputs=inputs, errors=errors, result=result)
    form = handles.input_list()
    error_boxes = [errors[s] for s in SECTIONS]

    # --- visibility --------------------------------------------------------------------------------------
    def on_source(source):
        return (gr.update(visible=source == "builtin"), gr.update(visible=source == "hub"),
                gr.update(visible=source == "hub"), gr.update(visible=source == "upload"),
                gr.update(visible=source == "upload"))

    inputs["dataset_source"].change(
        on_source, inputs["dataset_source"],
        [inputs["builtin_dataset"], inputs["hub_dataset"], inputs["hub_split"], upload, upload_note],
        api_name=False,
    )

    def on_method(method, current):
        choices = builtin_dataset_choices(method)
        return (gr.update(visible=method == "sft"), gr.update(visible=method == "dpo"),
                gr.update(visible=method == "grpo"),
                gr.update(choices=choices, value=current if current in choices else choices[0]))

    inputs["method"].change(on_method, [inputs["method"], inputs["builtin_dataset"]],
                            [sft_group, dpo_group, grpo_group, inputs["builtin_dataset"]], api_name=False)

    def on_environment(env_name, rewards):
        # The default reward (accuracy on a `solution` column) is for prompt datasets; with an environment its
        # reward is the environment's, and the editor holds extra rewards only: start it empty.
        if env_name and (rewards or "").strip() == FIELDS["grpo_rewards"].strip():
            return ""
        return gr.update()

    inputs["env_name"].change(on_environment, [inputs["env_name"], inputs["grpo_rewards"]], inputs["grpo_rewards"],
                              api_name=False)

    # --- upload: kept if it loads (checked with the Column mapping); a mapping can follow the upload --------------
    # The Column mapping comes last with a None default, so scripts that send (file, method) keep working:
    # gradio_client reads optional parameters from the handler's own signature (as_user's *inputs hides them).
    def on_upload(file, method, column_map=None, profile: gr.OAuthProfile | None = None,
                  token: gr.OAuthToken | None = None):
        """Keep an uploaded dataset file if it reads for the method (with the Column mapping)."""
        user = require_user(profile, token)
        if file is None:
            return "", gr.update(value="", visible=False), "", gr.update()
        path = Path(file if isinstance(file, str) else file.name)
        try:
            columns = parse_column_map(column_map)
            upload_id, summary = api.upload_dataset(path, path.name, method, user, columns)  # removes gradio's copy
        except UnmappedUpload as exc:  # kept: filling the Column mapping makes it usable, no second upload
            return (exc.upload_id, gr.update(value=f"📄 {exc.summary}", visible=True),
                    _problems_markdown(exc.problems), gr.update())
        except (SpecError, FormError) as exc:
            # The widget is emptied too, so it never shows a file that was not kept.
            problems = exc.problems if isinstance(exc, SpecError) else [str(exc)]
            return "", gr.update(value="", visible=False), _problems_markdown(problems), None
        finally:
            path.unlink(missing_ok=True)  # a FormError comes before the facade, which otherwise removes it
            with suppress(OSError):  # and the folder gradio made for it, once empty
                path.parent.rmdir()
        return upload_id, gr.update(value=f"✅ {summary}", visible=True), "", gr.update()

    upload.upload(on_upload, [upload, inputs["method"], inputs["column_map"]],
                  [inputs["upload_id"], upload_note, errors["dataset"], upload], api_name="upload_dataset")

    @as_user
    def recheck_upload(user, source, upload_id, method, column_map):
        """The kept upload checked again with the new Column mapping or method: its summary, or what to fix."""
        if source != "upload" or not upload_id:
            return gr.update(), gr.update()
        try:
            summary = api.check_upload(upload_id, method, parse_column_map(column_map), user)
        except FormError as exc:
            return gr.update(), _problems_markdown([str(exc)])
        except SpecError as exc:
            return gr.update(), _problems_markdown(exc.problems)
        return gr.update(value=f"✅ {summary}", visible=True), ""

    recheck = ([inputs["dataset_source"], inputs["upload_id"], inputs["method"], inputs["column_map"]],
               [upload_note, errors["dataset"]])
    inputs["column_map"].blur(recheck_upload, *recheck, api_name=False)
    inputs["column_map"].submit(recheck_upload, *recheck, api_name=False)
    inputs["method"].input(recheck_upload, *recheck, api_name=False)

    # --- the model: the demo's caveat, a parent job's base model ------------------------------------------------
    inputs["base_model"].change(model_notice, inputs["base_model"], model_note, api_name=False)

    @as_user(signed_in=False)
    def on_parent(user, parent_choice):
        """With a parent job the base model is the parent's: shown, and locked until the parent is cleared."""
        parent_id = job_choice_id(parent_choice)
        if not parent_id or user is None:
            return gr.update(interactive=True, info=BASE_MODEL_HELP)
        try:
            parent_model = api.get_job(parent_id, user).spec.model.name_or_path
        except JobNotFound:
            return gr.update(interactive=True, info=BASE_MODEL_HELP)
        return gr.update(value=parent_model, interactive=False,
                         info=f"The parent job {parent_id}'s base model; clear the parent job to pick another.")

    inputs["parent_job"].change(on_parent, inputs["parent_job"], inputs["base_model"], api_name=False)
    inputs["builtin_dataset"].change(lambda name: gr.update(info=builtin_dataset_help(name)),
                                     inputs["builtin_dataset"], inputs["builtin_dataset"], api_name=False)

    # --- preview, reward bench, dry run -------------------------------------------------------------------------
    def with_spec(action, args) -> tuple[Any, list[str]]:
        """Run ``action(spec)`` on the form's spec: (its result, error boxes), or (None, the problems by field)."""
        try:
            return action(form_to_spec(_values(args))), error_updates()
        except FormError as exc:
            return None, error_updates(form_error=exc)
        except SpecError as exc:
            return None, error_updates(exc.problems)

    @as_user
    def on_preview(user, *args):
        preview, boxes = with_spec(lambda spec: api.preview(spec, rows=3, user=user), args)
        if preview is None:
            return "", *boxes
        parts = [f"**{preview.total_rows} rows**, format `{preview.format}`, columns: {', '.join(preview.columns)}; "
                 f"longest previewed: {preview.summary.max_tokens} tokens (max_length {preview.summary.max_length})"]
        for i, row in enumerate(preview.rows):
            cut = " — **longer than max_length: will be cut**" if row.over_max_length else ""
            parts.append(f"Row {i} · {row.n_tokens} tokens{cut}\n```\n{row.rendered}\n```")
            if row.rendered_rejected is not None:
                parts.append(f"Rejected · {row.n_tokens_rejected} tokens\n```\n{row.rendered_rejected}\n```")
        return "\n\n".join(parts), *error_updates()

    preview_button.click(on_preview, form, [preview_out, *error_boxes], api_name="preview_dataset")

    bench_dataset = ["dataset_source", "builtin_dataset", "hub_dataset", "hub_split", "upload_id", "column_map"]

    def on_bench(rewards_yaml, completions, row_json, dataset_source=None, builtin_dataset=None,
                 hub_dataset=None, hub_split=None, upload_id=None, column_map=None,
                 profile: gr.OAuthProfile | None = None, token: gr.OAuthToken | None = None):
        """Scores per reward as a table, and a sentence: which row was scored against, or what to fix (shown next
        to the bench; an exception would leave only a bare "Error" in the table's frame). The dataset fields are
        optional for scripts (gradio_client treats a None default as optional): the form's defaults then."""
        from components.form import bench_table, parse_rewards

        user = require_user(profile, token)
        dataset_args = (dataset_source or "builtin", builtin_dataset or "math-demo", hub_dataset or "",
                        hub_split or "train", upload_id or "", column_map or "")

        empty = {"headers": ["completion", "total", "notes"], "data": []}
        lines = [c for c in (completions or "").splitlines() if c.strip()]
        if not lines:
            return empty, "⚠️ Type at least one completion, one per line."
        try:
            rewards = parse_rewards(rewards_yaml)
            row, where = _bench_row(row_json), "the row typed above"
            if row is not None and not isinstance(row, dict):
                raise FormError("method", 'the dataset row must be a JSON object, e.g. {"solution": "$4$"}')
            if row is None and dataset_args:  # the picked dataset's first row, as GRPO would see it
                row, where = bench_first_row(user, dict(zip(bench_dataset, dataset_args)))
            scored = api.score_rewards(rewards, lines, row, user=user)
        except (FormError, ValueError, SpecError) as exc:
            return empty, "⚠️ " + str(exc)[:500]
        return bench_table(scored), f"Scored against {where}."

    def bench_first_row(user, dataset_values) -> tuple[dict | None, str]:
        try:
            row = api.first_row(form_to_spec({**dataset_values, "method": "grpo"}), user=user)
        except Exception:  # noqa: BLE001 - no readable dataset (offline Hub, no upload): score without a row
            return None, "no dataset row (type one above for rewards that read a column)"
        shown = json.dumps(row, ensure_ascii=False, default=str)
        return row, f"the dataset's first row: `{shown[:160]}{'…' if len(shown) > 160 else ''}`"

    bench_button.click(on_bench, [inputs["grpo_rewards"], bench_completions, bench_row,
                                  *(inputs[name] for name in bench_dataset)],
                       [bench_out, bench_note], api_name="score_rewards")

    def with_environment(what: str, action, args) -> tuple[Any, list[str]]:
        """``with_spec`` for actions that play the environment: any failure (an unreachable server, a model that
        cannot load, calls all refused) becomes a sentence in the environment's error box."""
        try:
            return with_spec(action, args)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            return None, error_updates([f"environment: {what} failed: {exc}"])

    @as_user
    def on_dry_run(user, *args):
        episode, boxes = with_environment("dry run", lambda spec: api.dry_run(spec, user=user), args)
        return (episode.transcript() if episode else ""), *boxes

    dry_run_button.click(on_dry_run, form, [transcript, *error_boxes], api_name="dry_run")

    @as_user
    def on_warm_up(user, *args):
        warm, boxes = with_environment("warm-up", lambda spec: api.warm_up(spec, user=user), args)
        if warm is None:
            return "", *boxes
        text = (f"Wrote {warm.demonstrations}. Queued {queued_link(warm.sft.job.id)} (SFT warm-up), then "
                f"{queued_link(warm.grpo.job.id)} (this GRPO job, from the warm-up's adapter; it waits for it). "
                f"Follow them in the Jobs tab (click an id to open it there).")
        warnings = warm.sft.warnings + warm.grpo.warnings
        return text + "".join(f"\n- ⚠️ {w}" for w in warnings), *boxes

    warm_up_button.click(on_warm_up, form, [result, *error_boxes], api_name="warm_up")

    # --- check and queue -----------------------------------------------------------------------------------------
    @as_user
    def on_check(user, *args):
        checked, boxes = with_spec(lambda spec: api.check(spec, user=user), args)
        if checked is None:
            return "", *boxes
        warnings, memory = checked
        lines = ["✅ Pre-flight passed."] + [f"- ⚠️ {w}" for w in warnings] + [f"```\n{memory}\n```"]
        return "\n".join(lines), *boxes

    check_button.click(on_check, form, [result, *error_boxes], api_name="check_job")

    @as_user
    def on_queue(user, *args):
        submitted, boxes = with_spec(lambda spec: api.submit(spec, user=user), args)
        if submitted is None:
            return "", *boxes
        place = submitted.queue_position
        where = "starting now" if place in (None, 1) else f"#{place} in the queue"
        text = f"Queued {queued_link(submitted.job.id)} ({where}). Click the id to follow it in the Jobs tab."
        if submitted.warnings:
            text += "\n" + "\n".join(f"- ⚠️ {w}" for w in submitted.warnings)
        return text, *boxes

    queue_button.click(on_queue, form, [result, *error_boxes], api_name="submit_job")

    @as_user
    def on_hf_jobs(user, *args):
        from backend.hf_jobs import RemoteJobError

        *form_args, flavor, timeout = args
        try:
            hf_id, boxes = with_spec(lambda spec: api.send_to_hf_jobs(spec, user, flavor, timeout), form_args)
        except RemoteJobError as exc:
            return "", *error_updates([f"spec: {exc}"])
        if hf_id is None:
            return "", *boxes
        return f"Sent to Hugging Face Jobs as **{hf_id}** ({flavor}). Follow it in the Jobs tab.", *boxes

    hf_button.click(on_hf_jobs, [*form, hf_flavor, hf_timeout], [result, *error_boxes], api_name="send_to_hf_jobs")

    def submit_spec(spec_json: str, profile: gr.OAuthProfile | None = None) -> str:
        """Queue a job from a JSON spec (for scripts and gradio_client); returns the job id."""
        user = require_user(profile)
        try:
            return api.submit(load_spec_text(spec_json), user=user).job.id
        except SpecError as exc:
            raise gr.Error("; ".join(exc.problems)) from None

    gr.api(submit_spec, api_name="submit_spec")

    @as_user(signed_in=False)
    def refresh_parents(user):
        return gr.update(choices=finished_job_choices(api, user))

    inputs["parent_job"].focus(refresh_parents, None, inputs["parent_job"], api_name=False)
    return handles
