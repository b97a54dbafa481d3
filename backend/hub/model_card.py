"""The Hub model card of a finished job: metadata, settings, results, lineage, usage, the TRL CLI config and a plot."""

from __future__ import annotations

import math
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core.hub_names import BUILTIN_PREFIX, hub_model_id, is_builtin, slug
from backend.core.spec import JobSpec, Method
from backend.core.uploads import dataset_file_name
from backend.hub.benchmark_card import benchmark_eval_results, benchmark_lines
from backend.hub.snippets import UseSnippet, usage_snippet, use_snippets
from backend.hub.trl_cli import PLACEHOLDER_NAMESPACE, trl_cli_yaml
from backend.hub.verdict_card import learning_lines
from backend.methods.table import plots_for, support
from backend.training.flops import TOKENS_COUNTED, performance_line

if TYPE_CHECKING:
    from huggingface_hub import ModelCard

    from backend.core.artifacts import JobArtifacts
    from backend.jobs.records import JobRecord

PLOT_FILENAME = "training_curves.png"

# --- the training curves ---------------------------------------------------------------------------------------


def training_series(metrics: list[dict[str, Any]], method: Method) -> dict[str, list[tuple[int, float]]]:
    """(step, value) points per metric the method plots (the method table's ``plots``: the loss, GRPO's reward)."""
    keys = [key for key, _ in plots_for(method)]
    series: dict[str, list[tuple[int, float]]] = {}
    for key in keys:
        points = [
            (int(row["step"]), float(row[key]))
            for row in metrics
            if row.get("step") is not None and isinstance(row.get(key), (int, float)) and math.isfinite(row[key])
        ]
        if points:
            series[key] = points
    return series


def _nice(value: float) -> str:
    return f"{value:.3g}"


def draw_training_curves(metrics: list[dict[str, Any]], method: Method, path: Path) -> Path | None:
    """Draw each series against the step into one PNG at ``path``; None when there is nothing to draw.

    Drawn with Pillow (a Gradio dependency, so always present with the app) rather than matplotlib, which the
    app does not install; one panel per series, with the value range and first/last step labelled.
    """
    series = training_series(metrics, method)
    if not series:
        return None
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError:
        return None
    panel_w, panel_h, margin = 640, 320, 56
    image = Image.new("RGB", (panel_w * len(series), panel_h), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=14)
    colours = {"loss": (31, 119, 180), "reward": (44, 160, 44)}
    for index, (name, points) in enumerate(series.items()):
        left, top = index * panel_w + margin, 36
        right, bottom = (index + 1) * panel_w - 20, panel_h - 40
        draw.text((left, 10), f"{name} vs step", fill="black", font=font)
        draw.rectangle((left, top, right, bottom), outline=(120, 120, 120))
        steps = [s for s, _ in points]
        values = [v for _, v in points]
        lo, hi = min(values), max(values)
        if hi - lo < 1e-12:
            lo, hi = lo - 0.5, hi + 0.5
        first, last = min(steps), max(steps)
        span = max(last - first, 1)

        def xy(step: int, value: float) -> tuple[float, float]:
            x = left + (step - first) / span * (right - left) if last > first else (left + right) / 2
            return x, bottom - (value - lo) / (hi - lo) * (bottom - top)

        coords = [xy(s, v) for s, v in points]
        if len(coords) > 1:
            draw.line(coords, fill=colours.get(name, (200, 80, 0)), width=2)
        for x, y in coords:
            draw.ellipse((x - 2.5, y - 2.5, x + 2.5, y + 2.5), fill=colours.get(name, (200, 80, 0)))
        draw.text((4 + index * panel_w, top - 7), _nice(hi), fill="black", font=font)
        draw.text((4 + index * panel_w, bottom - 7), _nice(lo), fill="black", font=font)
        draw.text((left, bottom + 6), str(first), fill="black", font=font)
        draw.text((right - 30, bottom + 6), str(last), fill="black", font=font)
        draw.text(((left + right) / 2 - 14, bottom + 18), "step", fill="black", font=font)
    path = Path(path)
    image.save(path, format="PNG")
    return path


# --- the card ---------------------------------------------------------------------------------------------------


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return f"{value:.4g}"


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(_number(cell) for cell in row) + " |" for row in rows]
    return lines


def _dataset_text(spec: JobSpec) -> str:
    d = spec.dataset
    if d.source == "hub":
        text = f"[{d.name}](https://huggingface.co/datasets/{d.name})"
        if d.config:
            text += f" (config `{d.config}`)"
        return text + f", split `{d.split}`"
    if d.source == "builtin":
        return f"the app's built-in sample `{d.name}`"
    if d.source == "upload":
        return f"an uploaded file `{dataset_file_name(d)}`"
    return f"a local file `{dataset_file_name(d)}`"


def _batch_text(spec: JobSpec, artifacts: JobArtifacts) -> str:
    """``per device x accumulation``, a job of several processes' as each process ran it."""
    d, t = artifacts.distributed, spec.training
    if d is not None and d.per_process_batch is not None:
        return f"{d.per_process_batch} x {d.gradient_accumulation_steps} on each of {d.processes} processes"
    return f"{t.batch_size} x {t.gradient_accumulation_steps}"


def settings_rows(spec: JobSpec, artifacts: JobArtifacts) -> list[tuple[str, Any]]:
    """The training settings a reader needs to judge or repeat the run (as run: auto-tune's choices applied)."""
    from backend.training.autotune import as_run

    spec = as_run(spec, artifacts)
    t = spec.training
    rows: list[tuple[str, Any]] = [
        ("method", spec.method.value.upper()),
        ("base model", f"`{spec.model.name_or_path}`" + (f" @ `{spec.model.revision}`" if spec.model.revision else "")),
        ("dataset", _dataset_text(spec)),
    ]
    if spec.dataset.max_rows:
        rows.append(("rows used", spec.dataset.max_rows))
    if spec.lora.enabled:
        targets = spec.lora.target_modules
        targets = targets if isinstance(targets, str) else ", ".join(targets)
        rows += [
            ("LoRA rank / alpha / dropout", f"{spec.lora.r} / {spec.lora.alpha} / {spec.lora.dropout}"),
            ("LoRA target modules", targets),
        ]
    else:
        rows.append(("adapter", "none (all weights trained)"))
    quant = {"none": "not quantized", "4bit": "4-bit NF4 with double quantization (QLoRA)", "8bit": "8-bit"}
    rows.append(("base model loading", quant[spec.quantization.mode]))
    rows.append(("epochs", t.epochs) if t.max_steps is None else ("max steps", t.max_steps))
    if artifacts.global_step is not None:
        rows.append(("optimizer steps done", artifacts.global_step))
    rows += [
        ("learning rate", t.learning_rate),
        ("batch size per device x gradient accumulation", _batch_text(spec, artifacts)),
        ("max length (tokens)", t.max_length),
        ("warmup ratio", t.warmup_ratio),
        ("seed", t.seed),
        ("gradient checkpointing", {True: "on", False: "off", None: "auto"}[t.gradient_checkpointing]),
    ]
    if artifacts.distributed is not None:  # how the ranks were launched, as rank 0 saw them
        rows.append(("processes", artifacts.distributed.describe()))
        rows.append(("launched with", f"`{artifacts.distributed.launch}`"))
    if t.attn_implementation:
        rows.append(("attention", t.attn_implementation))
    if t.use_liger_kernel:
        rows.append(("Liger kernels", "on"))
    return rows + support(spec.method).card_rows(spec)


def _evaluation_lines(evaluation: dict[str, Any] | None, environment: dict[str, Any] | None) -> list[str]:
    lines: list[str] = []
    if evaluation:
        lines += ["## Evaluation", ""]
        if "error" in evaluation:
            lines += [f"The before/after evaluation failed: {evaluation['error']}", ""]
        else:
            tuned, base = evaluation.get("tuned", {}), evaluation.get("base", {})
            lines += [
                f"On {evaluation.get('rows', '?')} held-out rows, the base model (adapter switched off) "
                "against the tuned model:",
                "",
            ]
            header = ("metric", "base", "tuned") if base else ("metric", "tuned")
            rows = [((k, base.get(k, "—"), v) if base else (k, v)) for k, v in tuned.items()]
            lines += _table(header, rows) + [""]
    if environment:
        if not evaluation:
            lines += ["## Evaluation", ""]
        if "error" in environment:
            lines += [f"The environment evaluation failed: {environment['error']}", ""]
        else:
            tuned, base = environment.get("tuned", {}), environment.get("base", {})
            lines += [
                f"Environment episodes played by each model (same seeds): {environment.get('episodes', '?')}"
                + (
                    f", tasks of the environment's held-out {environment.get('split')!r} split."
                    if environment.get("held_out")
                    else f", from the {environment['episodes_from']} (not held out by the environment)."
                    if environment.get("episodes_from")
                    else "."
                ),
                "",
            ]
            header = ("metric", "base", "tuned") if base else ("metric", "tuned")
            rows = [((k, base.get(k, "—"), v) if base else (k, v)) for k, v in tuned.items()]
            lines += _table(header, rows) + [""]
            if "success_rate" in tuned:
                change = f" (base: {base['success_rate']:.0%})" if "success_rate" in base else ""
                lines += [f"**Success rate: {tuned['success_rate']:.0%}**{change}", ""]
    return lines


def _performance_lines(performance: dict[str, Any] | None) -> list[str]:
    """The run's speed on its device: tokens/s, step time, peak memory and MFU where the device is known."""
    line = performance_line(performance)
    if not line:
        return []
    note = (
        f"Tokens are {TOKENS_COUNTED}; the step time is the training's wall-clock time (checkpoint saves included) "
        f"over its {performance.get('steps')} steps, and tokens/s the tokens over that same time."
    )
    if performance.get("mfu") is None:
        note += " MFU is left out where the device's peak bf16 FLOP/s is not known (a CPU, or a GPU not in the table)."
    return ["## Training performance", "", line, "", note, ""]


def _lineage_lines(spec: JobSpec, artifacts: JobArtifacts, parent: JobRecord | None) -> list[str]:
    parent_id = spec.model.parent_job_id
    if not parent_id:
        return []
    lines = [
        "## Lineage",
        "",
        f"This is a later stage of a staged run: it continued the LoRA adapter of job "
        f"`{parent_id}` rather than starting a fresh one, so the adapter here already contains that stage.",
        "",
    ]
    rows: list[tuple[str, Any]] = [("parent job", f"`{parent_id}`")]
    if parent is not None:
        rows.append(("parent method", parent.spec.method.value.upper()))
        rows.append(("parent dataset", _dataset_text(parent.spec)))
    rows.append(("base model", f"`{spec.model.name_or_path}`"))
    pushed = parent.artifacts.hub.repo_id if parent is not None and parent.artifacts.hub else None
    if pushed:
        rows.append(("parent adapter", f"[{pushed}](https://huggingface.co/{pushed})"))
    elif artifacts.parent_adapter:
        rows.append(("parent adapter", "kept locally (not published)"))
    return lines + _table(("", ""), rows) + [""]


def _merged_place(artifacts: JobArtifacts) -> str | None:
    """Where the job's merged export is, as its snippets name it: the pushed repo, else the local folder."""
    merged = artifacts.merged
    return (merged.repo_id or merged.path) if merged is not None else None


def _more_uses(snippets: list[UseSnippet], shown: str) -> list[str]:
    """The "Use this model" snippets other than ``shown`` (the Python the card's "How to use" starts with)."""
    lines: list[str] = []
    for snippet in snippets:
        if snippet.code != shown:
            lines += [snippet.markdown(), ""]
    return lines


def _versions() -> list[tuple[str, str]]:
    found = []
    for package in ("trl", "transformers", "peft", "torch", "huggingface_hub"):
        try:
            found.append((package, metadata.version(package)))
        except metadata.PackageNotFoundError:
            continue
    return found


def card_tags(spec: JobSpec) -> list[str]:
    """The model card's tags: trl, the method, LoRA/PEFT, quantization, OpenEnv and the environment, the base model."""
    tags = ["trl", spec.method.value]
    if spec.lora.enabled:
        tags += ["lora", "peft"]
    if spec.quantization.mode != "none":
        tags.append(spec.quantization.mode)
    if spec.environment.name:
        tags.append("openenv")
        name = spec.environment.name
        if not name.startswith(("http://", "https://")):
            tags.append(name.removeprefix(BUILTIN_PREFIX))
    base = hub_model_id(spec.model.name_or_path)
    if base:
        tags.append(f"base_model:{'adapter' if spec.lora.enabled else 'finetune'}:{base}")
    tags.append("post-training-studio")
    return tags


def build_model_card(
    job: JobRecord,
    metrics: list[dict[str, Any]],
    base_card_license: str | None = None,
    plot_path: Path | str | None = None,
    *,
    repo_id: str | None = None,
    parent: JobRecord | None = None,
) -> ModelCard:
    """The README.md of the pushed repo: YAML metadata the Hub indexes, then a body a person can act on.

    ``repo_id`` is where the card will live (used by the usage snippet); ``parent`` is the job a staged run
    continued, for the lineage section; ``plot_path`` is a drawn :func:`draw_training_curves` image that is
    uploaded beside the card.
    """
    from huggingface_hub import ModelCard, ModelCardData

    spec = job.spec
    repo_id = repo_id or f"{PLACEHOLDER_NAMESPACE}/{slug(spec.output.run_name or f'{spec.method.value}-{job.id}')}"
    base = hub_model_id(spec.model.name_or_path)
    data = ModelCardData(
        base_model=base,
        datasets=[spec.dataset.name] if spec.dataset.source == "hub" else None,
        library_name="peft" if spec.lora.enabled else "transformers",
        license=base_card_license or None,
        model_name=repo_id.split("/")[-1],
        pipeline_tag="text-generation",
        tags=card_tags(spec),
        eval_results=benchmark_eval_results(job.artifacts.benchmarks),
    )
    what = "A LoRA adapter" if spec.lora.enabled else "A fine-tuned model"
    lines = [f"# {repo_id.split('/')[-1]}", ""]
    lines += [
        f"{what} for `{spec.model.name_or_path}`, trained with [TRL](https://github.com/huggingface/trl) "
        f"{support(spec.method).summary} in Post-Training Studio (job `{job.id}`).",
        "",
    ]
    if base is None:
        where = (
            "the app's built-in tiny random demo model, which is not on the Hub"
            if is_builtin(spec.model.name_or_path)
            else "a local folder, not a Hub model"
        )
        lines += [
            f"> The base model `{spec.model.name_or_path}` is {where}, so `base_model` is left out of the "
            "metadata; load the adapter on the same base.",
            "",
        ]
    if base_card_license:
        lines += [f"The license (`{base_card_license}`) is inherited from the base model.", ""]

    lines += ["## Training settings", ""] + _table(("setting", "value"), settings_rows(spec, job.artifacts)) + [""]

    final = {k: v for k, v in (job.artifacts.final_metrics or {}).items() if isinstance(v, (int, float))}
    logged = [row for row in metrics if isinstance(row.get("loss"), (int, float))]
    verdict = learning_lines(job.artifacts)
    if verdict or final or logged:
        lines += ["## Results", ""] + verdict
    if final or logged:
        rows: list[tuple[str, Any]] = []
        if logged:
            rows.append(("last logged loss", logged[-1]["loss"]))
        for key, label in plots_for(spec.method)[1:]:  # the method's curves beyond the loss (GRPO's mean reward)
            plotted = [row for row in metrics if isinstance(row.get(key), (int, float))]
            if plotted:
                rows += [(f"first {label}", plotted[0][key]), (f"last {label}", plotted[-1][key])]
        rows += sorted(final.items())
        lines += _table(("metric", "value"), rows) + [""]
    lines += _evaluation_lines(job.artifacts.evaluation, job.artifacts.environment_evaluation)
    lines += benchmark_lines(job.artifacts.benchmarks)
    lines += _performance_lines(job.artifacts.performance)
    if plot_path is not None:
        lines += ["## Training curves", "", f"![training curves]({Path(plot_path).name})", ""]
    lines += _lineage_lines(spec, job.artifacts, parent)
    shown = usage_snippet(spec, repo_id)
    lines += ["## How to use", "", "```python", shown, "```", ""]
    lines += _more_uses(use_snippets(spec, job.id, repo_id, _merged_place(job.artifacts)), shown)
    lines += [
        "## Reproduce with the TRL CLI",
        "",
        "The same run as a `trl` config (also uploaded as `training_config.yaml`); comments say what the CLI "
        "cannot express.",
        "",
        "```yaml",
        trl_cli_yaml(spec, output_dir=repo_id.split("/")[-1]).rstrip(),
        "```",
        "",
        "The job's full spec is in `spec.json`, its logged metrics in `metrics.jsonl`.",
        "",
    ]
    versions = _versions()
    if versions:
        lines += ["## Framework versions", ""] + [f"- {name}: {version}" for name, version in versions] + [""]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines))


def merged_dtype_sentence(dtype: str, dequantized: bool, quant_mode: str) -> str:
    """How the merged weights were made, in one sentence (the export's result, its card and the Jobs tab say it)."""
    if dequantized:
        return (
            f"The job trained on a {quant_mode.replace('bit', '-bit')} base, so the adapter was merged into the "
            f"16-bit dequantized base (loaded unquantized, {dtype}) and saved in {dtype}."
        )
    return f"The adapter was merged into the base at the base's dtype ({dtype}) and saved in {dtype}."


def whole_model_card_data(
    spec: JobSpec, place: str, library: str, kind_tags: list[str], relation: str, base_card_license: str | None
):
    """The card metadata of a whole model made from a job (a merged model, a GGUF): the job's tags less the adapter's,
    ``kind_tags``, and the base as ``base_model:<relation>:<base>`` (finetune, quantized)."""
    from huggingface_hub import ModelCardData

    base = hub_model_id(spec.model.name_or_path)
    tags = [t for t in card_tags(spec) if t not in ("lora", "peft") and not t.startswith("base_model:")]
    tags += kind_tags + ([f"base_model:{relation}:{base}"] if base else [])
    return ModelCardData(
        base_model=base,
        datasets=[spec.dataset.name] if spec.dataset.source == "hub" else None,
        library_name=library,
        license=base_card_license or None,
        model_name=place.rstrip("/").split("/")[-1],
        pipeline_tag="text-generation",
        tags=tags,
    )


def build_merged_card(
    job: JobRecord, place: str, dtype: str, dequantized: bool, base_card_license: str | None = None
) -> ModelCard:
    """The README.md of a merged export: a whole model for transformers and vLLM, with how it was made.

    ``place`` is where the model will be (the repo id when pushed, else its folder), which the snippets name.
    """
    from huggingface_hub import ModelCard

    spec = job.spec
    data = whole_model_card_data(spec, place, "transformers", ["merged"], "finetune", base_card_license)
    lines = [f"# {place.rstrip('/').split('/')[-1]}", ""]
    lines += [
        f"A merged model: the LoRA adapter of Post-Training Studio job `{job.id}` ({spec.method.value.upper()} with "
        f"[TRL](https://github.com/huggingface/trl)) folded into `{spec.model.name_or_path}` with peft's "
        "`merge_and_unload`, so it loads without peft. "
        + merged_dtype_sentence(dtype, dequantized, spec.quantization.mode),
        "",
    ]
    lines += learning_lines(job.artifacts)
    lines += ["## Training settings", ""] + _table(("setting", "value"), settings_rows(spec, job.artifacts)) + [""]
    adapter = job.artifacts.hub.repo_id if job.artifacts.hub else None
    lines += ["## Use this model", ""]
    for snippet in use_snippets(spec, job.id, adapter, place):
        lines += [snippet.markdown(), ""]
    versions = _versions()
    if versions:
        lines += ["## Framework versions", ""] + [f"- {name}: {version}" for name, version in versions] + [""]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines))
