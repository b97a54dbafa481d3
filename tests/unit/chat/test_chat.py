"""The side-by-side chat: adapter switched per side on one model, streams in step, seeds, preferences, refusals."""

import gc
import json
import threading
import time
import weakref
from pathlib import Path

import pytest
import torch

from backend.chat.feedback import PreferenceLog
from backend.chat.side_by_side import (
    ChatModels,
    ChatTarget,
    ComparisonChat,
    GenerationSettings,
    build_prompt,
    chat_target,
)
from backend.core.spec import DatasetSpec, Method, ModelSpec, QuantizationSpec, parse_spec
from backend.data.loading import load_training_dataset
from backend.jobs.records import JobStatus
from backend.models.demo import DEMO_MODEL_ID
from tests.helpers import tiny_spec

MODEL = ModelSpec(name_or_path=DEMO_MODEL_ID)
QUANT = QuantizationSpec()
SYSTEM = "You are a helpful assistant."
# The two sides have different pasts, so their prompts differ in length and the batch is left-padded.
BASE_HISTORY = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
TUNED_HISTORY = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello! How can I help you today? Ask me anything."},
]
QUESTION = "What is the capital of France?"


def _build_adapter(models_dir: Path, target: Path, seed: int) -> Path:
    """A LoRA adapter on the demo model whose B matrices are random, so it clearly changes the answers."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_path = models_dir / "tiny-qwen3"
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base_path), LoraConfig(r=8, lora_alpha=16, target_modules="all-linear")
    )
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.copy_(torch.randn(weight.shape, generator=generator) * 0.5)
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(base_path).save_pretrained(target)  # as a job's adapter folder has it
    return target


@pytest.fixture(scope="module")
def adapters(models_dir, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return _build_adapter(models_dir, root / "a", seed=1), _build_adapter(models_dir, root / "b", seed=2)


@pytest.fixture()
def chat(models_dir, adapters) -> ComparisonChat:
    return ComparisonChat.load(MODEL, QUANT, models_dir, adapters[0])


def _reference_answer(model, tokenizer, history, max_new_tokens: int) -> str:
    """The model's greedy answer to QUESTION after ``history``, generated alone (no batch, no padding)."""
    messages = [{"role": "system", "content": SYSTEM}, *history, {"role": "user", "content": QUESTION}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, enable_thinking=False)
    enc = tokenizer(text, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(out[0, enc.input_ids.shape[1] :], skip_special_tokens=True)


def test_greedy_sides_match_the_plain_base_model_and_the_adapter_model(chat, models_dir, adapters):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    settings = GenerationSettings(system_prompt=SYSTEM, temperature=0, max_new_tokens=24)
    *_, (base_text, tuned_text) = chat.stream_pair(BASE_HISTORY, TUNED_HISTORY, QUESTION, settings)

    base_path = models_dir / "tiny-qwen3"
    plain = AutoModelForCausalLM.from_pretrained(base_path).eval()
    with_adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), str(adapters[0])).eval()
    assert base_text == _reference_answer(plain, chat.tokenizer, BASE_HISTORY, 24)
    assert tuned_text == _reference_answer(with_adapter, chat.tokenizer, TUNED_HISTORY, 24)
    assert base_text and tuned_text and base_text != tuned_text


def test_both_answers_stream_together_from_one_batched_model(chat):
    batch_sizes: list[int] = []
    hook = chat.base_model.lm_head.register_forward_hook(lambda module, args, out: batch_sizes.append(out.shape[0]))
    try:
        settings = GenerationSettings(system_prompt=SYSTEM, temperature=0, max_new_tokens=20)
        updates = list(chat.stream_pair(BASE_HISTORY, TUNED_HISTORY, QUESTION, settings))
    finally:
        hook.remove()

    assert len(updates) > 1
    final_base, final_tuned = updates[-1]
    for (earlier_base, earlier_tuned), (later_base, later_tuned) in zip(updates, updates[1:]):
        assert later_base.startswith(earlier_base) and later_tuned.startswith(earlier_tuned)
    assert any(b and t and (b != final_base or t != final_tuned) for b, t in updates), "both sides were in flight"
    # Every forward pass ran both rows: one model, one batch, the adapter switched per row.
    assert batch_sizes and set(batch_sizes) == {2}


def test_leaving_a_stream_early_stops_its_generation(chat):
    settings = GenerationSettings(temperature=0, max_new_tokens=400)
    stream = chat.stream_pair([], [], QUESTION, settings)
    next(stream)
    stream.close()
    started = time.monotonic()
    *_, last = chat.stream_pair([], [], QUESTION, GenerationSettings(temperature=0, max_new_tokens=2))
    assert time.monotonic() - started < 10, "the abandoned generation kept the model busy"
    assert all(isinstance(text, str) for text in last)


def test_same_seed_gives_the_same_sampled_pair(chat):
    def pair(seed: int) -> tuple[str, str]:
        settings = GenerationSettings(temperature=0.7, top_p=0.95, max_new_tokens=16, seed=seed)
        *_, last = chat.stream_pair([], [], QUESTION, settings)
        return last

    first = pair(3)
    assert pair(3) == first
    assert first[0] != first[1], "the same seed still gives the two sides different answers"
    assert any(pair(seed) != first for seed in (4, 5)), "other seeds sample other answers"


def test_one_model_in_memory_and_picking_another_adapter_frees_the_first(models_dir, adapters, store):
    chats = ChatModels(models_dir)
    job = store.add(parse_spec(tiny_spec()))
    store.claim_next()
    store.merge_artifacts(job.id, {"adapter_dir": str(adapters[0])})
    store.finish(job.id, JobStatus.succeeded)

    first = chats.for_job(store.get(job.id))
    assert first.job_id == job.id
    assert first.base_model is first.model.get_base_model()
    modules = list(first.model.modules())
    assert sum(type(m) is type(first.base_model) for m in modules) == 1, "one causal LM under the adapter"
    assert sum(isinstance(m, torch.nn.Embedding) for m in modules) == 1, "one copy of the weights"
    del modules
    assert chats.for_job(store.get(job.id)) is first, "picking the same job again reuses the loaded model"

    old_model = weakref.ref(first.base_model)
    second = chats.get(ChatTarget(MODEL, QUANT, adapters[1]))
    gc.collect()
    assert second is not first and chats.current is second
    assert old_model() is None, "the previous job's model was freed"
    with pytest.raises(ValueError, match="pick the job again"):
        list(first.stream_pair([], [], QUESTION, GenerationSettings(temperature=0, max_new_tokens=2)))
    chats.clear()
    assert chats.current is None


def test_preferences_are_logged_from_threads_and_export_as_a_dpo_dataset(tmp_path):
    log = PreferenceLog(tmp_path / "prefs" / "log.jsonl")
    prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    log.record(prompt, "Paris.", "Lyon, probably.", "job-1")

    def record_many(worker: int) -> None:
        for i in range(10):
            log.record(prompt, f"Paris ({worker}.{i})", "I do not know " * 200, "job-2")

    threads = [threading.Thread(target=record_many, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    rows = log.rows()
    assert len(rows) == 41 and len((tmp_path / "prefs" / "log.jsonl").read_text().splitlines()) == 41
    assert rows[0]["prompt"] == prompt and rows[0]["job_id"] == "job-1" and rows[0]["created_at"] > 0
    assert rows[0]["chosen"] == [{"role": "assistant", "content": "Paris."}]
    assert rows[0]["rejected"] == [{"role": "assistant", "content": "Lyon, probably."}]

    exported = log.export(tmp_path / "export" / "dpo.jsonl")
    assert set(json.loads(exported.read_text().splitlines()[0])) == {"prompt", "chosen", "rejected"}
    ds, fmt = load_training_dataset(DatasetSpec(source="file", name=str(exported)), Method.dpo)
    assert fmt == "preference" and len(ds) == 41
    assert ds[0]["chosen"][0]["content"] == "Paris."


def test_preference_log_refuses_rows_that_teach_nothing(tmp_path):
    log = PreferenceLog(tmp_path / "log.jsonl")
    user = [{"role": "user", "content": "Hi"}]
    with pytest.raises(ValueError, match="same"):
        log.record(user, "Hello", "Hello", "job")
    with pytest.raises(ValueError, match="empty"):
        log.record(user, "Hello", " ", "job")
    with pytest.raises(ValueError, match="end with the user"):
        log.record([{"role": "assistant", "content": "Hi"}], "a", "b", "job")
    with pytest.raises(ValueError, match="no preferences"):
        log.export(tmp_path / "out.jsonl")


def test_chatting_needs_a_succeeded_job_with_an_adapter(store, models_dir):
    chats = ChatModels(models_dir)
    queued = store.add(parse_spec(tiny_spec()))
    with pytest.raises(ValueError, match=f"job {queued.id} is queued; only a job that succeeded"):
        chats.for_job(store.get(queued.id))

    store.claim_next()
    store.finish(queued.id, JobStatus.failed, "boom")
    with pytest.raises(ValueError, match="is failed"):
        chat_target(store.get(queued.id))

    no_adapter = store.add(parse_spec(tiny_spec()))
    store.claim_next()
    store.finish(no_adapter.id, JobStatus.succeeded)
    with pytest.raises(ValueError, match="has no saved adapter"):
        chats.for_job(store.get(no_adapter.id))
    assert chats.current is None


def test_prompts_carry_the_system_prompt_and_only_chat_turns():
    widget_history = [
        {"role": "user", "content": "Hi", "metadata": None},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
    ]
    assert build_prompt(widget_history, "Bye", "Be brief.") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Bye"},
    ]
    assert build_prompt([], "Bye") == [{"role": "user", "content": "Bye"}]


def test_generation_settings_refuse_meaningless_values():
    assert GenerationSettings(max_new_tokens=64.0, temperature=0).greedy
    with pytest.raises(ValueError, match="max_new_tokens"):
        GenerationSettings(max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        GenerationSettings(temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        GenerationSettings(top_p=0)
    with pytest.raises(ValueError, match="empty"):
        build_prompt([], "  ")


def test_the_chat_tab_says_which_side_is_which():
    import doctest

    import components.chat.views as chat_tab

    assert doctest.testmod(chat_tab).failed == 0
    staged = chat_tab.sides_text("j2", "builtin:tiny-qwen3-arith", parent_job_id="j1")
    assert staged.startswith("**Left:** builtin:tiny-qwen3-arith as it is, no adapter.")
    assert "job j2's adapter, which continues job j1's (the left side has neither)" in staged
