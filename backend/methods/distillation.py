"""On-policy distillation: translate a JobSpec into TRL's DistillationConfig and build a DistillationTrainer. The
student (the job's base model with LoRA) writes its own answers to the prompts, and learns the teacher's next-token
distribution over every token of them (a generalized Jensen-Shannon divergence: ``distillation.beta``).

The teacher is a finished job's tuned model (its base with its adapter merged; the facade turns the job's id into
its adapter folder before the job is stored), a built-in model, a Hub id or a local model folder. Its token ids must
mean what the student's mean: :func:`tokenizer_problem` says why not, and pre-flight refuses such a teacher.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core.hub_names import BUILTIN_MODELS, hub_model_id
from backend.core.learning import LearningMetric
from backend.core.spec import JobSpec, Method, ModelSpec, quote_input
from backend.methods.common import base_training_kwargs, load_policy
from backend.methods.rendering import render_prompt_row
from backend.methods.support import DataFormat, MethodSupport, TrainerInputs, always
from backend.models import loading as models
from backend.models.mixed_batch import GenerationSettings
from backend.models.scoring import PER_ROW, as_messages, generate_completions

if TYPE_CHECKING:
    from trl import DistillationConfig, DistillationTrainer

# The evaluation's entry for the teacher's own scores on the held-out rows: a reference, not a side.
TEACHER = "teacher"
ADAPTER_CONFIG = "adapter_config.json"


def distillation_config_kwargs(spec: JobSpec, dataset_format: str | None = None) -> dict[str, Any]:
    """DistillationConfig's method kwargs, for the trainer and the TRL CLI export alike."""
    d = spec.distillation
    return {"beta": d.beta, "max_completion_length": d.max_completion_length, "temperature": d.temperature}


def to_distillation_config(spec: JobSpec, output_dir: Path) -> DistillationConfig:
    """Pure translation of the spec's settings into TRL's DistillationConfig (generation with transformers)."""
    from trl import DistillationConfig

    return DistillationConfig(
        **base_training_kwargs(spec, output_dir), **distillation_config_kwargs(spec), use_vllm=False
    )


def teacher_source(teacher: str, models_dir: Path) -> tuple[str, str | None]:
    """(the model folder or Hub id to load, the adapter folder to merge into it or None) for a teacher name: a
    built-in model, an adapter folder (a finished job's: its ``adapter_config.json`` names its base), or a model."""
    teacher = teacher.strip()
    if teacher in BUILTIN_MODELS:
        return models.resolve_model(ModelSpec(name_or_path=teacher), models_dir), None
    config = Path(teacher).expanduser() / ADAPTER_CONFIG
    if config.is_file():
        base = json.loads(config.read_text(encoding="utf-8"))["base_model_name_or_path"]
        return base, str(config.parent)
    return teacher, None


def load_teacher(spec: JobSpec, models_dir: Path):
    """The teacher as a plain causal LM in the compute dtype: a job's adapter merged into its base model."""
    import transformers

    base, adapter = teacher_source(spec.distillation.teacher, models_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        base, dtype=models.compute_dtype(), trust_remote_code=spec.model.trust_remote_code
    )
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    return model.eval()


def tokenizer_problem(student, teacher) -> str | None:
    """Why ``teacher``'s tokens do not mean the student's (None when they do). The divergence compares the two
    next-token distributions id by id, so every id must stand for the same token string (the same vocabulary, added
    tokens included) and an answer must end on the same end-of-sequence token."""
    mine, theirs = student.get_vocab(), teacher.get_vocab()
    if mine != theirs:
        differ = sorted(set(mine.items()) ^ set(theirs.items()), key=lambda item: item[1])
        example = f", e.g. id {differ[0][1]} is {differ[0][0]!r} in one and not the other" if differ else ""
        return f"its vocabulary ({len(theirs)} tokens) is not the student's ({len(mine)} tokens){example}"
    if student.eos_token != teacher.eos_token:
        return f"it ends answers with {teacher.eos_token!r}, the student with {student.eos_token!r}"
    return None


FIELD = "distillation.teacher"


def teacher_problems(spec: JobSpec, models_dir: Path) -> list[str]:
    """Pre-flight's refusals of the teacher, one sentence each naming :data:`FIELD`: none named, a folder that is not
    there, a model that cannot be loaded, or one whose tokens are not the student's (the base model has been found
    by then). A job id has become its adapter folder before this (``training.named_jobs.NamedJobs.runnable``)."""
    from transformers import AutoConfig, AutoTokenizer

    teacher = spec.distillation.teacher.strip()
    if not teacher:
        return [
            f"{FIELD}: name the model to learn from: a finished job of yours (its id), a Hub id or a built-in model, "
            "with the same tokenizer as model.name_or_path"
        ]
    base, adapter = teacher_source(teacher, models_dir)
    if base == teacher and hub_model_id(teacher) is None and not Path(teacher).expanduser().is_dir():
        return [
            f"{FIELD}: {quote_input(teacher)} is neither a job id, a Hub id, a built-in model nor a model folder; "
            "name the model to learn from"
        ]
    load_kwargs = {"trust_remote_code": spec.model.trust_remote_code}
    try:
        tokenizer = AutoTokenizer.from_pretrained(adapter or base, **load_kwargs)
        vocab_size = AutoConfig.from_pretrained(base, **load_kwargs).get_text_config().vocab_size
    except Exception as exc:  # transformers raises OSError/ValueError/HTTP errors for the same "cannot load"
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        return [f"{FIELD}: {quote_input(teacher)} could not be loaded as a model ({first})"]
    student_path = models.resolve_model(spec.model, models_dir)
    student = models.load_tokenizer(student_path, spec.model)
    why = tokenizer_problem(student, tokenizer)
    if why is None:
        theirs = AutoConfig.from_pretrained(student_path, **load_kwargs).get_text_config().vocab_size
        if theirs != vocab_size:
            why = f"its output layer scores {vocab_size} tokens, the student's {theirs}"
    if why is None:
        return []
    return [
        f"{FIELD}: {teacher} cannot teach {spec.model.name_or_path}: {why}; distillation compares the two models' "
        "next-token distributions token by token, so pick a teacher with the student's tokenizer (the same model "
        "family)"
    ]


def build_distillation_trainer(inputs: TrainerInputs) -> DistillationTrainer:
    """The DistillationTrainer: the job's policy (fresh LoRA or a parent's adapter) as the student, the teacher
    loaded and merged, the prompts as they are (plain text or conversations)."""
    from trl import DistillationTrainer

    spec = inputs.spec
    policy = load_policy(spec, inputs.models_dir, inputs.parent_adapter)
    policy.tokenizer.padding_side = "left"  # TRL generates from left-padded prompts
    return DistillationTrainer(
        teacher_model=load_teacher(spec, inputs.models_dir),
        args=to_distillation_config(spec, inputs.output_dir),
        train_dataset=inputs.dataset,
        callbacks=inputs.callbacks,
        **policy.trainer_kwargs(),
    )


def _accuracy(rows: list[dict], prompts: list, texts: list[str]) -> list[float]:
    """1.0 where a greedy answer is the row's ``solution`` (TRL's accuracy check, as GRPO's accuracy reward)."""
    from backend.methods.rewards.accuracy_rewards import TRLReward

    completions = [
        [{"role": "assistant", "content": text}] if as_messages(prompt) is not None else text
        for prompt, text in zip(prompts, texts)
    ]
    solutions = [row["solution"] for row in rows]
    return [1.0 if v == 1 else 0.0 for v in TRLReward("accuracy")(completions=completions, solution=solutions)]


def distillation_scores(trainer, spec: JobSpec, rows, sides) -> dict[str | None, dict[str, Any]]:
    """Per side, over each side's greedy answer to the held-out prompts: its accuracy against the rows' ``solution``
    (where they have one) and how often it is the teacher's own greedy answer. The teacher's scores on the same rows
    come under :data:`TEACHER`, for reference."""
    tokenizer = trainer.processing_class
    settings = GenerationSettings(
        max_new_tokens=spec.distillation.max_completion_length, temperature=0, seed=spec.training.seed
    )
    prompts = [row["prompt"] for row in rows]
    # Short answers: many rows per call (batched), every side in the same batches.
    answers = generate_completions(trainer.model, tokenizer, prompts, sides, settings, batched=True)
    teacher = generate_completions(trainer.teacher_model, tokenizer, prompts, [None], settings, batched=True)[None]
    solved = "solution" in rows[0]
    result: dict[str | None, dict[str, Any]] = {}
    for side, texts in answers.items():
        agreement = [float(a.strip() == t.strip()) for a, t in zip(texts, teacher)]
        per_row = {"teacher_agreement": agreement}
        if solved:
            per_row["accuracy"] = _accuracy(rows, prompts, texts)
        result[side] = {key: sum(values) / len(values) for key, values in per_row.items()} | {PER_ROW: per_row}
    if solved:
        right = _accuracy(rows, prompts, teacher)
        result[TEACHER] = {"accuracy": sum(right) / len(right)}
    return result


def learning_metrics(spec: JobSpec) -> tuple[LearningMetric, ...]:
    """Held-out accuracy where the rows carry a ``solution``; else how often the student answers as the teacher."""
    return (
        LearningMetric("accuracy", "held-out accuracy", rate=True),
        LearningMetric("teacher_agreement", "held-out agreement with the teacher's answers", rate=True),
    )


def _card_rows(spec: JobSpec) -> list[tuple[str, Any]]:
    d = spec.distillation
    return [
        ("teacher", d.teacher),
        ("divergence beta (0 forward KL, 1 reverse KL)", d.beta),
        ("max completion length", d.max_completion_length),
        ("temperature", d.temperature),
    ]


def _cli_extras(spec: JobSpec) -> dict[str, Any]:
    """The teacher, where TRL's script can load it by name (a Hub id)."""
    teacher = spec.distillation.teacher.strip()
    return {"teacher_model_name_or_path": teacher} if hub_model_id(teacher) else {}


def _cli_notes(spec: JobSpec) -> list[str]:
    teacher = spec.distillation.teacher.strip()
    if hub_model_id(teacher):
        return []
    return [
        f"teacher: {teacher} is not a Hub model; merge it (python -m backend export JOB --merged for a job), push "
        "it and set teacher_model_name_or_path to its Hub id."
    ]


SUPPORT = MethodSupport(
    method=Method.distillation,
    spec_part="distillation",
    summary="on-policy distillation: the model's own answers to prompts, scored token by token by a teacher model",
    formats=(DataFormat("prompt-only", ("prompt",)),),  # TRL reads plain-text and conversational prompts
    optional_columns=("solution",),  # the evaluation's accuracy, where the prompts have answers
    config_kwargs=distillation_config_kwargs,
    build_trainer=build_distillation_trainer,
    evaluate=distillation_scores,
    learning_metrics=learning_metrics,
    render=render_prompt_row,
    card_rows=_card_rows,
    cli_extras=_cli_extras,
    cli_notes=_cli_notes,
    reference_model=always,  # the teacher: a frozen model's forward pass at every step
    loss_unit="divergence to the teacher",
    monitored=("completions/mean_length", "completions/clipped_ratio"),  # entropy: every method's plot
    plots=(("loss", "loss"), ("completions/mean_length", "answer length (tokens)")),
    log_columns=(
        ("loss", "loss"),
        ("completions/mean_length", "length (tokens)"),
        ("learning_rate", "lr"),
        ("grad_norm", "grad norm"),
    ),
    preflight=teacher_problems,
    trl_name="Distillation",
)
