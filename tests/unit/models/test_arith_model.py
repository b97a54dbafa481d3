"""builtin:tiny-qwen3-arith: the built-in model that knows a little, its datasets, and a learning verdict that says
whether a job made it better (against where the job started)."""

from __future__ import annotations

import importlib.util
import json
import threading
import time

import pytest

from backend.data import arith as arith_data
from backend.data.builtin import BUILTIN_DATASETS_DIR
from backend.models.demo import ARITH_MODEL_DIR, ARITH_MODEL_RECIPE, _build_tokenizer
from tests.helpers import ROOT, tiny_spec


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_it_shares_the_demo_models_tokenizer_and_chat_template():
    from transformers import AutoTokenizer

    shipped = AutoTokenizer.from_pretrained(ARITH_MODEL_DIR)
    built = _build_tokenizer()
    assert shipped.get_vocab() == built.get_vocab()
    assert shipped.chat_template == built.chat_template
    assert [shipped.decode([t]) for t in shipped("12 + 30")["input_ids"]] == ["1", "2", " +", " ", "3", "0"]


def test_the_shipped_build_is_recorded_small_and_loads_fast():
    record = json.loads((ARITH_MODEL_DIR / "studio_demo.json").read_text())
    assert record["recipe"] == ARITH_MODEL_RECIPE and record["seed"] == 0
    assert 0.2 <= record["heldout_accuracy"] <= 0.5, "a partial skill, with room to improve"
    assert 0.2 <= record["heldout_tool_accuracy"] <= 0.5, "in an environment episode too"
    # Greedily it seldom or never submits with the tool; sampled, it sometimes does (test_env_training.py).
    assert record["heldout_call_rate"] <= 0.5, "a tool it uses only sometimes, so GRPO in the environment can teach it"
    card = (ARITH_MODEL_DIR / "README.md").read_text()
    assert card == _load_script("build_arith_model").model_card(record), "the card is the build's own"
    assert "**What it is.**" in card and "**What it is not.**" in card
    size = sum(p.stat().st_size for p in ARITH_MODEL_DIR.iterdir())
    assert size < 10 * 2**20
    from transformers import AutoModelForCausalLM

    started = time.monotonic()
    AutoModelForCausalLM.from_pretrained(ARITH_MODEL_DIR)
    assert time.monotonic() - started < 2.0


def test_its_greedy_accuracy_on_problems_it_never_saw_is_partial():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    build = _load_script("build_arith_model")
    model = AutoModelForCausalLM.from_pretrained(ARITH_MODEL_DIR)
    tokenizer = AutoTokenizer.from_pretrained(ARITH_MODEL_DIR)
    accuracy = build.greedy_accuracy(model, tokenizer, arith_data.sample("studio", 200, seed=7))
    assert 0.15 <= accuracy <= 0.55, accuracy


def test_pretraining_and_the_shipped_datasets_never_share_a_problem():
    pretrain, studio = set(arith_data.problems("pretrain")), set(arith_data.problems("studio"))
    assert not pretrain & studio and len(pretrain) + len(studio) == 5000
    questions = {p.question for p in arith_data.sample("studio", 2000, 0)}
    for name in ("arith-sft", "arith-prompts"):
        for line in (BUILTIN_DATASETS_DIR / f"{name}.jsonl").read_text().splitlines():
            row = json.loads(line)
            user = (row.get("messages") or row.get("prompt"))[0]["content"]
            assert user in questions or arith_data.partition(*_operands(user)) == "studio"


def _operands(question: str) -> tuple[int, str, int]:
    import re

    a, op, b = re.search(r"(\d+) (\+|-|plus|minus) (\d+)", question).groups()
    return int(a), {"plus": "+", "minus": "-"}.get(op, op), int(b)


def test_the_shipped_datasets_are_what_the_recipe_writes():
    script = _load_script("build_arith_datasets")
    for name in arith_data.DATASETS:
        if name not in script.ON_POLICY:
            assert (BUILTIN_DATASETS_DIR / f"{name}.jsonl").read_text() == script.render(name), f"rerun for {name}"
    # The preference and feedback sets reject the model's own mistakes (found by generation): right answers are
    # right, rejected ones wrong, and the problems are the recipe's.
    for name, answers in (("arith-preferences", ("chosen", "rejected")), ("arith-feedback", ("completion",))):
        build, count, seed = arith_data.DATASETS[name]
        rows = [json.loads(line) for line in (BUILTIN_DATASETS_DIR / f"{name}.jsonl").read_text().splitlines()]
        expected = list(build(count, seed))
        assert [r["prompt"] for r in rows] == [r["prompt"] for r in expected]
        for row in rows:
            a, op, b = _operands(row["prompt"][0]["content"])
            right = a + b if op == "+" else a - b
            for column in answers:
                good = column == "chosen" or (column == "completion" and row["label"])
                got = arith_data.parse_answer(row[column][0]["content"])
                assert (got == right) == good, (name, row)


def _run(api, spec: dict):
    from backend.worker import run_job

    job = api.jobs.submit(spec).job
    assert api.core.store.claim_next().id == job.id
    assert run_job(job.id, api.core.paths, threading.Event()) == 0
    return api.jobs.get_job(job.id)


def test_a_staged_jobs_verdict_compares_against_its_parent(api):
    """The child's 'before' is the parent's adapter, not the base; base, start and tuned are all scored."""
    parent = _run(api, tiny_spec(eval={"holdout_rows": 4}))
    assert parent.artifacts.learning.start == "base"
    child = _run(
        api,
        tiny_spec(
            model={"parent_job_id": parent.id},
            eval={"holdout_rows": 4},
            training={"max_steps": 4, "learning_rate": 5e-2},
        ),
    )
    evaluation = child.artifacts.evaluation
    assert {"base", "start", "tuned"} <= set(evaluation)
    learning = child.artifacts.learning
    assert learning.start == "parent" and "parent job's adapter" in learning.sentence
    # The start is the parent's adapter as the parent left it: the parent's own 'after'.
    assert learning.before == pytest.approx(parent.artifacts.learning.after, rel=1e-4, abs=1e-4)
    assert learning.base == pytest.approx(parent.artifacts.learning.before, rel=1e-4, abs=1e-4)
