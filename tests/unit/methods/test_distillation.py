"""On-policy distillation, added through the method table: the student writes answers to prompts and learns a
teacher's token distributions over them (TRL's DistillationTrainer). A few steps move the student toward the teacher,
measured here by code that shares nothing with the method's own evaluation; a teacher with other tokens is refused
before anything is stored."""

from __future__ import annotations

import threading

import pytest
import torch
import yaml

from backend.core.spec import DatasetSpec, Method, parse_spec
from backend.core.users import User
from backend.data.builtin import BUILTIN_DATASETS
from backend.data.loading import load_training_dataset
from backend.hub.trl_cli import trl_cli_config, trl_cli_yaml
from backend.models.demo import ARITH_MODEL_DIR, ARITH_MODEL_ID
from backend.training.callbacks import StoreReportingCallback
from backend.worker import build_trainer
from tests.helpers import ROOT, job_data, tiny_spec
from tests.unit.hub.test_trl_cli import parse_like_trl_cli

# The random demo model learns from the arithmetic model: the same tokenizer, a different network.
DISTILL = {
    "method": "distillation",
    "dataset": {"source": "builtin", "name": "math-demo"},
    # beta 0 (forward KL): the student spreads toward all of the teacher's likely tokens, which moves a random model
    # within a few steps (reverse KL, TRL's default, settles on a mode and moves it less at first).
    "distillation": {"teacher": ARITH_MODEL_ID, "max_completion_length": 12, "beta": 0.0},
    "training": {"max_steps": 4, "batch_size": 4, "learning_rate": 1e-2, "max_length": 128, "save_steps": 100},
    "eval": {"holdout_rows": 8},
}


def test_the_prompt_sets_are_distillation_data():
    assert {"grpo", "rloo", "distillation"} <= set(BUILTIN_DATASETS["arith-prompts"].methods())
    assert "distillation" in BUILTIN_DATASETS["math-demo"].methods()
    ds, fmt = load_training_dataset(DatasetSpec(source="builtin", name="arith-prompts"), Method.distillation)
    assert fmt == "prompt-only" and ds.column_names == ["prompt", "solution"]  # the solution scores the verdict


def test_the_trl_cli_export_parses_into_the_trainers_distillation_settings(tmp_path):
    from backend.methods.distillation import to_distillation_config

    spec = parse_spec(tiny_spec(**{**DISTILL, "distillation": {"teacher": "Qwen/Qwen3-1.7B", "beta": 0.5}}))
    text = trl_cli_yaml(spec)
    assert text.splitlines()[1] == "#   trl distillation --config training_config.yaml"
    config = trl_cli_config(spec)
    assert yaml.safe_load(text) == config and config["teacher_model_name_or_path"] == "Qwen/Qwen3-1.7B"
    _, args, _, _ = parse_like_trl_cli("distillation", text, tmp_path)
    app = to_distillation_config(spec, tmp_path / "out")
    for name in ("beta", "max_completion_length", "temperature", "max_steps", "learning_rate"):
        assert getattr(args, name) == getattr(app, name), name
    # A built-in teacher cannot be named to TRL's script: the export says so rather than writing it.
    builtin = parse_spec(tiny_spec(**DISTILL))
    assert "teacher_model_name_or_path" not in trl_cli_config(builtin)
    assert f"teacher: {ARITH_MODEL_ID} is not a Hub model" in trl_cli_yaml(builtin)


def _teacher_answers(prompts, tokenizer, teacher) -> list[list[int]]:
    """(prompt + the teacher's greedy answer) token ids, and where the answer starts, one prompt at a time."""
    out = []
    for prompt in prompts:
        ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        with torch.no_grad():
            full = teacher.generate(**ids, max_new_tokens=12, do_sample=False)
        out.append((full, ids["input_ids"].shape[1]))
    return out


def _answer_nll(model, sequences) -> float:
    """Mean negative log-likelihood per token of the teacher's answers under ``model``."""
    total, count = 0.0, 0
    for full, start in sequences:
        with torch.no_grad():
            logits = model(input_ids=full).logits[0, start - 1 : -1].float()
        total += float(torch.nn.functional.cross_entropy(logits, full[0, start:], reduction="sum"))
        count += full.shape[1] - start
    return total / count


def test_a_few_steps_move_the_student_toward_the_teacher_and_train_only_the_adapter(paths, store):
    from transformers import AutoModelForCausalLM

    from backend.methods.distillation import TEACHER, distillation_scores

    spec = parse_spec(tiny_spec(**DISTILL))
    job = store.add(spec)
    callback = StoreReportingCallback(store, job.id, threading.Event())
    trainer, held_out = build_trainer(spec, paths, job.id, [callback], None, job_data(spec, paths))
    assert type(trainer).__name__ == "DistillationTrainer" and len(held_out) == 8
    teacher = AutoModelForCausalLM.from_pretrained(ARITH_MODEL_DIR).eval()  # loaded here, apart from the trainer's
    tokenizer = trainer.processing_class
    sequences = _teacher_answers([row["prompt"] for row in held_out], tokenizer, teacher)
    student = trainer.model
    before = {n: p.detach().float().clone() for n, p in student.named_parameters()}
    with student.disable_adapter():
        start = _answer_nll(student, sequences)
    trainer.train()
    after = {n: p.detach().float().clone() for n, p in student.named_parameters()}
    student.eval()
    tuned = _answer_nll(student, sequences)
    # The teacher's held-out answers became likelier under the student: it moved toward the teacher.
    assert tuned < start - 0.5, (start, tuned)
    assert any("lora_" in n and not torch.equal(before[n], after[n]) for n in before)
    assert all(torch.equal(before[n], after[n]) for n in before if "lora_" not in n)
    logged = [m for m in store.metrics(job.id) if "loss" in m]
    assert len(logged) == 4 and all("completions/mean_length" in m for m in logged)
    # The method's own evaluation scores both sides and the teacher, on the same rows.
    scores = distillation_scores(trainer, spec, [held_out[i] for i in range(8)], ["default", "__base__"])
    assert set(scores) == {"default", "__base__", TEACHER}
    assert len(scores["default"]["per_row"]["accuracy"]) == 8 and 0 <= scores[TEACHER]["accuracy"] <= 1


def test_the_example_distills_the_arithmetic_model_from_a_job(paths):
    """The example names the teacher by a placeholder the CLI's --set replaces; its recipe is the form's."""
    from backend.core.spec import SpecError
    from backend.training.preflight import check_spec

    example = yaml.safe_load((ROOT / "examples" / "distillation-demo.yaml").read_text())
    spec = parse_spec(example)
    assert spec.method is Method.distillation and spec.model.name_or_path == ARITH_MODEL_ID
    assert spec.dataset.name == "arith-prompts" and spec.eval.holdout_rows == 256
    # As it stands (before --set names the teacher job), pre-flight says what to put there.
    with pytest.raises(SpecError) as refused:
        check_spec(spec, paths.models)
    assert str(refused.value).startswith(
        "distillation.teacher: '<id of your finished sft-demo job>' is neither a job id, a Hub id, a built-in model"
    )


# --- the teacher: a job of yours, or a model with the student's tokens; refused before anything is stored ---------
ARITH_DISTILL = {**DISTILL, "model": {"name_or_path": ARITH_MODEL_ID}, "distillation": {"max_completion_length": 12}}


def _refused(api, spec, user=None) -> str:
    from backend.api import SpecError

    with pytest.raises(SpecError) as refused:
        api.jobs.submit(spec, user=user)
    return str(refused.value)


def _save_adapter(folder, extra_token: bool = False):
    """A real LoRA adapter of the arithmetic model with its tokenizer, as a finished job saves them (``extra_token``:
    the tokenizer with a token more, so its ids no longer line up with the model's)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(ARITH_MODEL_DIR), LoraConfig(r=2, task_type="CAUSAL_LM")
    )
    model.save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(ARITH_MODEL_DIR)
    if extra_token:
        tokenizer.add_tokens(["<extra_token>"])
    tokenizer.save_pretrained(folder)
    return folder


def test_a_teacher_with_other_tokens_or_none_is_refused_naming_the_field_and_nothing_is_stored(paths, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from backend.api import StudioAPI

    other = tmp_path / "other-tokens"  # the arithmetic model with one token more: ids no longer line up
    tokenizer = AutoTokenizer.from_pretrained(ARITH_MODEL_DIR)
    tokenizer.add_tokens(["<extra_token>"])
    tokenizer.save_pretrained(other)
    AutoModelForCausalLM.from_pretrained(ARITH_MODEL_DIR).save_pretrained(other)
    api = StudioAPI(paths.root, scheduler="none")
    try:
        said = _refused(api, tiny_spec(**{**ARITH_DISTILL, "distillation": {"teacher": str(other)}}))
        assert (
            f"distillation.teacher: {other} cannot teach {ARITH_MODEL_ID}: its vocabulary (1025 tokens) is not " in said
        )
        assert "pick a teacher with the student's tokenizer" in said
        said = _refused(api, tiny_spec(**ARITH_DISTILL))
        assert "distillation.teacher: name the model to learn from" in said
        # Someone on a Space may not point the teacher at a folder on the server.
        said = _refused(api, tiny_spec(**{**ARITH_DISTILL, "distillation": {"teacher": str(other)}}), User("ann"))
        # (the path quoted as far as the sentence's limit on echoed input allows)
        assert said.startswith("distillation.teacher: '/") and "' is a path on the server; name a job of yours" in said
        assert api.jobs.list_jobs() == [], "nothing was stored"
    finally:
        api.close()


def test_a_job_id_teacher_must_be_your_own_finished_language_model(paths, tmp_path):
    """A job id names the job's tuned model (its adapter merged into its base): another user's job is not found, a
    job that has not succeeded or a reward model's score head cannot teach, each said with a sentence naming the field
    before anything is stored; your finished SFT job's adapter becomes the stored spec's teacher."""
    from backend.api import StudioAPI
    from backend.jobs.records import JobStatus

    api = StudioAPI(paths.root, scheduler="none")
    store = api.core.store
    finished = {}
    try:
        for name, spec in (
            ("sft", tiny_spec(owner="ann")),
            ("reward", tiny_spec(method="reward", owner="ann")),
            ("bob's", tiny_spec(owner="bob")),
            ("other tokens", tiny_spec(owner="ann")),
        ):
            job = store.add(parse_spec(spec))
            assert store.claim_next().id == job.id
            adapter = _save_adapter(paths.job_adapter(job.id), extra_token=name == "other tokens")
            assert store.finish(job.id, JobStatus.succeeded, artifacts={"adapter_dir": str(adapter)})
            finished[name] = job
        queued = store.add(parse_spec(tiny_spec(owner="ann")))
        ann, bobs, reward = User("ann"), finished["bob's"].id, finished["reward"].id
        refused = {
            bobs: f"distillation.teacher: there is no job '{bobs}'",
            queued.id: f"distillation.teacher: job {queued.id} is queued; only a job that succeeded can be named here",
            reward: f"job {reward} trained a reward model, which scores answers and writes none: it cannot teach "
            "(distillation.teacher)",
        }
        for job_id, sentence in refused.items():
            said = _refused(api, tiny_spec(**{**ARITH_DISTILL, "distillation": {"teacher": job_id}}), ann)
            assert sentence in said, said
        assert len(api.jobs.list_jobs()) == 5, "nothing more was stored"
        # A job of yours whose tokens are not the student's is named by its id, not by its folder on the server.
        other = finished["other tokens"]
        said = _refused(api, tiny_spec(**{**ARITH_DISTILL, "distillation": {"teacher": other.id}}), ann)
        assert f"distillation.teacher: job {other.id} cannot teach {ARITH_MODEL_ID}: its vocabulary" in said, said
        assert str(paths.root) not in said
        # Your own finished SFT job teaches. The stored spec keeps its id (not a folder on the server, which ann may
        # not name), so the job cloned and submitted again is accepted.
        sft = finished["sft"]
        job = api.jobs.submit(tiny_spec(**{**ARITH_DISTILL, "distillation": {"teacher": sft.id}}), user=ann).job
        stored = store.get(job.id).spec
        assert stored.distillation.teacher == sft.id
        cloned = stored.model_dump(mode="json")
        cloned["training"]["seed"] += 1  # the very same spec again would be answered with the job queued (issue 47)
        again = api.jobs.submit(cloned, user=ann).job
        assert again.id != job.id and store.get(again.id).spec.distillation.teacher == sft.id
    finally:
        api.close()


def test_a_job_named_as_teacher_is_read_as_its_adapter_when_the_job_trains(paths):
    """The worker turns the stored job id into that job's adapter folder, merged into its base: the distillation
    trains and succeeds, and its model card names the teacher job, not a folder on the server."""
    from backend.api import StudioAPI
    from backend.hub.model_card import build_model_card
    from backend.jobs.records import JobStatus
    from backend.worker import run_job

    api = StudioAPI(paths.root, scheduler="none")
    store = api.core.store
    try:
        teacher = store.add(parse_spec(tiny_spec(owner="ann")))
        assert store.claim_next().id == teacher.id
        adapter = _save_adapter(paths.job_adapter(teacher.id))
        assert store.finish(teacher.id, JobStatus.succeeded, artifacts={"adapter_dir": str(adapter)})
        spec = {**ARITH_DISTILL, "distillation": {"teacher": teacher.id, "max_completion_length": 8}}
        spec["training"] = {**DISTILL["training"], "max_steps": 2, "batch_size": 2}
        spec["eval"] = {"holdout_rows": 4}
        job = api.jobs.submit(tiny_spec(**spec), user=User("ann")).job
        assert store.claim_next().id == job.id
        assert run_job(job.id, paths, threading.Event()) == 0, store.get(job.id).error
        done = store.get(job.id)
        assert done.status is JobStatus.succeeded and done.spec.distillation.teacher == teacher.id
        card = build_model_card(done, store.metrics(job.id), repo_id="ann/distilled").text
        assert f"| teacher | {teacher.id} |" in card and str(paths.root) not in card
    finally:
        api.close()


def test_the_verdict_says_the_teachers_own_score_on_the_same_rows():
    from backend.training.evaluation import REFERENCES, learning_verdict

    spec = parse_spec(tiny_spec(**DISTILL))
    before, after = [0.0] * 60 + [1.0] * 40, [0.0] * 45 + [1.0] * 55
    evaluation = {
        "rows": 100,
        "per_row": {"base": {"accuracy": before}, "tuned": {"accuracy": after}},
        REFERENCES: {"teacher": {"accuracy": 0.59}},
    }
    learning = learning_verdict(spec, evaluation, None)
    assert learning.metric == "accuracy" and learning.verdict == "improved"
    assert "40% -> 55%" in learning.sentence and "; the teacher scores 59% on the same rows" in learning.sentence
