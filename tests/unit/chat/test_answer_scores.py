"""A finished reward job scores the chat's two answers: each the score its model gives that conversation alone,
computed here with plain transformers + peft (not the studio's batching), and every wrong pick is a sentence."""

from __future__ import annotations

import pytest
import torch

from backend.api import JobNotFound, SpecError, StudioAPI
from backend.core.spec import parse_spec
from backend.core.users import User, local_user
from backend.jobs.records import JobStatus
from backend.worker import build_trainer
from tests.helpers import job_data, tiny_spec
from tests.unit.methods.test_reward import REWARD

QUESTION = {"role": "user", "content": "What is 2 + 3?"}
ANSWERS = ("2 + 3 = \\boxed{5}", "It is 6, I think, or maybe 7.")


@pytest.fixture(scope="module")
def scored_api(tmp_path_factory, models_dir):
    """An app's facade holding finished tiny reward jobs (trained a few steps; one with LoRA, one of all weights) and
    one finished SFT job."""
    from tests.helpers.apps import data_dir_with_models

    root = data_dir_with_models(tmp_path_factory.mktemp("scores") / "data", models_dir)
    api = StudioAPI(root, scheduler="none")
    ids = {}
    specs = {
        "reward": tiny_spec(**REWARD),
        "full": tiny_spec(**REWARD, lora={"enabled": False}),
        "sft": tiny_spec(),
    }
    for name, spec in specs.items():
        job = api.core.store.add(parse_spec(spec).model_copy(update={"owner": "local"}))
        api.core.store.claim_next()
        adapter = api.core.paths.job_dir(job.id) / "adapter"
        if name != "sft":
            trainer, _ = build_trainer(job.spec, api.core.paths, job.id, [], None, job_data(job.spec, api.core.paths))
            trainer.train()
            trainer.save_model(str(adapter))
            trainer.processing_class.save_pretrained(adapter)
        else:
            adapter.mkdir(parents=True)
        api.core.store.finish(job.id, JobStatus.succeeded, artifacts={"adapter_dir": str(adapter)})
        ids[name] = job.id
    try:
        yield api, ids
    finally:
        api.close()


def _alone(adapter, base_path, turns) -> float:
    """The reward model's score of one conversation, unbatched: transformers + peft as a model card says (the saved
    folder alone when ``base_path`` is None: a job that trained all weights)."""
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if base_path is None:
        tokenizer = AutoTokenizer.from_pretrained(adapter)
        model = AutoModelForSequenceClassification.from_pretrained(adapter, num_labels=1)
        inputs = tokenizer.apply_chat_template(turns, return_tensors="pt", return_dict=True)
        with torch.inference_mode():
            return float(model.eval()(**inputs).logits[0, 0])

    tokenizer = AutoTokenizer.from_pretrained(adapter)
    model = PeftModel.from_pretrained(
        AutoModelForSequenceClassification.from_pretrained(base_path, num_labels=1), adapter
    )
    inputs = tokenizer.apply_chat_template(turns, return_tensors="pt", return_dict=True)
    with torch.inference_mode():
        return float(model.eval()(**inputs).logits[0, 0])


def test_a_reward_job_scores_each_sides_last_answer_as_its_model_does_alone(scored_api, models_dir):
    api, ids = scored_api
    sides = [[QUESTION, {"role": "assistant", "content": answer}] for answer in ANSWERS]
    # A longer side pads the shorter one in the batch: the score is still read at each side's own last token.
    sides[1] = [{"role": "system", "content": "Answer briefly."}, *sides[1]]
    scores = api.chat.score_answers(ids["reward"], sides, local_user())
    job = api.jobs.get_job(ids["reward"])
    expected = [_alone(job.artifacts.adapter_dir, models_dir / "tiny-qwen3", turns) for turns in sides]
    assert scores == pytest.approx(expected, abs=1e-4)
    assert scores[0] != scores[1]


def test_a_reward_job_that_trained_all_weights_scores_with_its_saved_model_alone(scored_api):
    api, ids = scored_api
    sides = [[QUESTION, {"role": "assistant", "content": answer}] for answer in ANSWERS]
    scores = api.chat.score_answers(ids["full"], sides, local_user())
    folder = api.jobs.get_job(ids["full"]).artifacts.adapter_dir
    assert scores == pytest.approx([_alone(folder, None, turns) for turns in sides], abs=1e-4)


def test_every_wrong_pick_is_a_sentence_and_loads_nothing(scored_api):
    api, ids = scored_api
    answered = [[QUESTION, {"role": "assistant", "content": "5"}]] * 2
    cases = {
        "not a reward model; pick a job of method reward": (ids["sft"], answered),
        "each side needs an answer to score": (ids["reward"], [[QUESTION], [QUESTION]]),
        "at most 8 conversations": (ids["reward"], answered * 5),
    }
    for said, (job_id, conversations) in cases.items():
        with pytest.raises(SpecError, match=said):
            api.chat.score_answers(job_id, conversations, local_user())
    with pytest.raises(JobNotFound):
        api.chat.score_answers(ids["reward"], answered, User("someone-else"))


def test_the_chat_tab_scores_both_answers_with_the_picked_reward_job(scored_api):
    from components.chat import handlers
    from components.job_pickers import finished_job_choices

    api, ids = scored_api
    user = local_user()
    choices = finished_job_choices(api, user, generates=False)
    assert sorted(c.split()[0] for c in choices if c) == sorted([ids["reward"], ids["full"]])
    shown = {
        side: [QUESTION, {"role": "assistant", "content": answer}] for side, answer in zip(("base", "tuned"), ANSWERS)
    }
    said = handlers.score_answers(api, user, f"{ids['reward']} · reward · x", shown["base"], shown["tuned"], {})
    assert said.startswith(f"Reward model of job {ids['reward']}: base **") and "it prefers the" in said
    assert handlers.score_answers(api, user, "", shown["base"], shown["tuned"], {}).startswith("Pick a finished reward")
    refused = handlers.score_answers(api, user, f"{ids['sft']} · sft · x", shown["base"], shown["tuned"], {})
    assert refused.startswith(f"Job {ids['sft']} trained a sft model") and refused.endswith(".")
