"""Tool calls in the side-by-side chat: read with TRL's parser (an answer without one stays as it is), kept apart from
what the judging buttons record, and run in the job's environment (the built-in arithmetic server here): its real
answer, a killed server as a sentence, one environment per user and job, closed when asked or idle."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from backend.api import StudioAPI
from backend.chat.feedback import PreferenceLog, ThumbLog
from backend.chat.feedback_log import last_turn
from backend.chat.side_by_side import build_prompt
from backend.chat.tool_calls import ChatAnswer, ToolCall, can_parse, read_text
from backend.core.spec import SpecError, load_spec_text, parse_spec
from backend.core.users import User
from backend.jobs.records import JobStatus
from backend.jobs.store_errors import JobNotFound
from backend.models.demo import ARITH_MODEL_DIR
from backend.models.mixed_batch import GenerationSettings
from backend.workflows.chat_tools import ChatToolSessions, ToolResult, ToolRun
from tests.helpers import ROOT, wait_for

# The question the tool adapter was taught to answer with a submit_answer call; the arithmetic environment poses the
# same sum from the first row of arith-env (a=25, b=25, op=+).
QUESTION = "What is 25 + 25? Submit the answer with the submit_answer tool."
SAID = "25 + 25 = \\boxed{50}"
TOOL_ANSWER = f'{SAID}\n<tool_call>\n{{"name": "submit_answer", "arguments": {{"answer": 50}}}}\n</tool_call>'
GREEDY = GenerationSettings(temperature=0, max_new_tokens=64)
ENV_EXAMPLE = ROOT / "examples" / "grpo-env-demo.yaml"


def build_tool_adapter(target: Path, steps: int = 40, prompt: str | None = None, answer: str = TOOL_ANSWER) -> Path:
    """A LoRA adapter on builtin:tiny-qwen3-arith taught (a few dozen plain PyTorch steps, about a second) to answer
    QUESTION (or ``prompt``, a rendered prompt) with TOOL_ANSWER (or ``answer``): a model that really writes a tool
    call, without a training job."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ARITH_MODEL_DIR)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(ARITH_MODEL_DIR),
        LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0),
    )
    if prompt is None:
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": QUESTION}], add_generation_prompt=True, tokenize=False, enable_thinking=False
        )
    asked = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answered = tokenizer(answer + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([asked + answered])
    labels = torch.tensor([[-100] * len(asked) + answered])
    torch.manual_seed(0)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for step in range(4 * steps):
        output = model(input_ids=ids, labels=labels)
        if step >= steps and _answers_greedily(output.logits, ids, len(asked)):
            break
        optimizer.zero_grad()
        output.loss.backward()
        optimizer.step()
    else:
        raise AssertionError(f"the tool adapter did not learn to answer {answer!r} in {4 * steps} steps")
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)  # as a job's adapter folder has it
    return target


def _answers_greedily(logits, ids, asked: int, margin: float = 1.0) -> bool:
    """Whether greedy decoding reproduces the answer token by token, each by a logit margin wide enough that another
    CPU's float rounding cannot flip it (a CI machine once decoded a near-miss of the taught call). The tiny model's
    rare tokens ('message', '[') have fixed logits, so the margin plateaus near 1.3: wider is out of reach."""
    import torch

    predicted = logits[0, asked - 1 : -1]
    wanted = ids[0, asked:]
    chosen = predicted.gather(1, wanted[:, None])[:, 0]
    rivals = predicted.scatter(1, wanted[:, None], float("-inf")).max(dim=1).values
    return bool(torch.all(chosen - rivals > margin))


def finished_job(api: StudioAPI, spec, adapter: Path, owner: str = "local") -> str:
    """A job stored as succeeded with ``adapter``, without running it."""
    job = api.core.store.add(spec.model_copy(update={"owner": owner}))
    assert api.core.store.claim_next().id == job.id
    api.core.store.merge_artifacts(job.id, adapter_dir=str(adapter))
    api.core.store.finish(job.id, JobStatus.succeeded)
    return job.id


def environment_spec():
    """The GRPO example's spec: builtin:tiny-qwen3-arith in builtin:arithmetic, on the arith-env rows."""
    return parse_spec(load_spec_text(ENV_EXAMPLE.read_text(), ENV_EXAMPLE.name))


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(ARITH_MODEL_DIR)


@pytest.fixture(scope="module")
def tool_adapter(tmp_path_factory) -> Path:
    return build_tool_adapter(tmp_path_factory.mktemp("tool-adapter") / "adapter")


def _server_pid(api: StudioAPI, owner: str, job_id: str) -> int:
    session = api.chat._tools.sessions._sessions[(owner, job_id)]
    assert session.environment is not None and session.environment.server_pid
    return session.environment.server_pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is as good as gone
        return fh.read().split(") ")[1][0] != "Z"


# --- reading answers ----------------------------------------------------------------------------------------------


def test_a_qwen3_tool_call_is_read_with_trls_parser(tokenizer):
    assert can_parse(tokenizer)
    answer = read_text(tokenizer, TOOL_ANSWER)
    assert answer == ChatAnswer(TOOL_ANSWER, SAID, (ToolCall("submit_answer", {"answer": 50}),))
    assert answer.tool_calls[0].arguments_json() == '{\n  "answer": 50\n}'

    two = read_text(
        tokenizer,
        '<tool_call>\n{"name": "submit_answer", "arguments": {"answer": 7}}\n</tool_call>\n'
        '<tool_call>\n{"name": "look", "arguments": {}}\n</tool_call>',
    )
    assert two.content == "" and [c.name for c in two.tool_calls] == ["submit_answer", "look"]
    assert two.tool_calls[1].as_message_call() == {"type": "function", "function": {"name": "look", "arguments": {}}}


def test_an_answer_without_a_tool_call_stays_as_it_is(tokenizer):
    for text in (SAID, "", '<tool_call>\n{"name": broken\n</tool_call>'):
        assert read_text(tokenizer, text) == ChatAnswer.plain(text)
    # A chat template TRL has no parser for: the text stays, markup and all.
    from transformers import AutoTokenizer

    other = AutoTokenizer.from_pretrained(ARITH_MODEL_DIR)
    other.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    assert not can_parse(other)
    assert read_text(other, TOOL_ANSWER) == ChatAnswer.plain(TOOL_ANSWER)


def test_a_side_sees_its_own_calls_and_their_answers_on_the_next_turn(tokenizer):
    call = ToolCall("submit_answer", {"answer": 50}).as_message_call()
    history = [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": SAID, "tool_calls": [call]},
        {"role": "tool", "name": "submit_answer", "content": "feedback: Correct!"},
    ]
    messages = build_prompt(history, "Thanks!")
    assert messages[1] == {"role": "assistant", "content": SAID, "tool_calls": [call]}
    assert messages[2] == {"role": "tool", "name": "submit_answer", "content": "feedback: Correct!"}
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, enable_thinking=False)
    assert '<tool_call>\n{"name": "submit_answer", "arguments": {"answer": 50}}\n</tool_call>' in text
    assert "<tool_response>\nfeedback: Correct!\n</tool_response>" in text


def test_the_chat_reads_the_tuned_sides_tool_call(api, tool_adapter):
    job_id = finished_job(api, environment_spec(), tool_adapter)
    *streamed, last = api.chat.chat_turn(job_id, [], [], QUESTION, GREEDY)
    assert last.final and not any(update.final for update in streamed)
    base, tuned = last.answers
    assert tuned.tool_calls == (ToolCall("submit_answer", {"answer": 50}),) and tuned.content == SAID
    # The text is what streamed (the demo tokenizer's <tool_call> is a special token, left out of the text): the
    # calls were read from the tokens.
    assert tuned.text == last.tuned and "<tool_call>" not in tuned.text and '"submit_answer"' in tuned.text
    assert base.tool_calls == () and base.text == base.content == last.base
    # The plain stream is the same answers as text.
    *_, pair = api.chat.chat_pair(job_id, [], [], QUESTION, GREEDY)
    assert pair == (last.base, last.tuned)


def test_the_judging_buttons_record_the_answer_not_its_display_blocks(tmp_path, tokenizer):
    """What the Chat tab shows of an answer with a call (its text, one block per call, the tool's answer) is not what
    the preference and thumb logs record: they get the answer as it streamed (backend/chat/feedback.py last_turn)."""
    from components.chat import views as chat_tab

    answer = ChatAnswer(
        SAID + '\n\n{"name": "submit_answer", ...}\n', SAID, (ToolCall("submit_answer", {"answer": 50}),)
    )
    asked = {"role": "user", "content": QUESTION}
    shown = [asked, *chat_tab.answer_messages(answer)]
    assert [m.get("metadata", {}).get("title") for m in shown[1:]] == [None, "🛠 Tool call: submit_answer"]
    assert shown[1]["content"] == SAID and '"answer": 50' in shown[2]["content"]
    kept = [asked, chat_tab.kept_answer(answer)]
    # The tool's answer shows as the next turn, on display and in what the side keeps.
    run = ToolRun(
        "tuned",
        (ToolResult("submit_answer", {"answer": 50}, "feedback: Correct!"),),
        started="question: What is 25 + 25?",
        done=True,
        reward=1.0,
    )
    assert chat_tab.pending_calls(shown, kept) == [answer.tool_calls[0].as_message_call()]
    results = chat_tab.tool_results_shown(run)
    assert [m["metadata"]["title"] for m in results] == [
        "🌱 New episode (from the job's first dataset row)",
        "🔧 submit_answer answered",
    ]
    assert results[1]["content"] == "```\nfeedback: Correct!\n```" and results[1]["metadata"]["log"] == (
        "episode over, reward 1"
    )
    shown += results
    kept += chat_tab.tool_results_kept(run)
    assert chat_tab.pending_calls(shown, kept) == [], "the calls ran"

    judged = chat_tab.judged_history(shown, kept)
    prompt, recorded = last_turn(judged)
    assert recorded == answer.text and prompt == [{"role": "user", "content": QUESTION}]
    thumbs = ThumbLog(tmp_path / "thumbs.jsonl")
    row = thumbs.record_turn(judged, "", True, "tuned", "job-1")
    assert row["completion"] == [{"role": "assistant", "content": answer.text}]
    prefs = PreferenceLog(tmp_path / "prefs.jsonl")
    other = [asked, {"role": "assistant", "content": "25 + 2 = \\boxed{28}"}]
    row = prefs.record_turn(other, judged, "", "tuned", "job-1")
    assert row["chosen"] == [{"role": "assistant", "content": answer.text}]

    # The model's own next prompt carries its call and the tool's answer, not the display blocks.
    seen = chat_tab.model_history(shown, kept)
    assert [m["role"] for m in seen] == ["user", "assistant", "tool"] and seen[1]["tool_calls"]
    # A history that is not the one kept (a script's own) is read without its blocks, as before.
    assert chat_tab.model_history(shown, []) == [asked, {"role": "assistant", "content": SAID}]


# --- running calls in the job's environment ------------------------------------------------------------------------


def test_tool_calls_run_in_the_jobs_environment_for_its_owner_only(api, tool_adapter):
    alices = finished_job(api, environment_spec(), tool_adapter, owner="alice")
    plain = finished_job(
        api,
        parse_spec({"method": "sft", "model": {"name_or_path": "builtin:tiny-qwen3-arith"}}),
        tool_adapter,
        owner="alice",
    )
    alice, bob = User("alice"), User("bob")
    right = [ToolCall("submit_answer", {"answer": 50})]
    with pytest.raises(JobNotFound):
        api.chat.run_tool_calls(alices, right, user=bob)
    with pytest.raises(JobNotFound):
        api.chat.chat_environment(alices, user=bob)
    with pytest.raises(SpecError, match="plays no environment"):
        api.chat.run_tool_calls(plain, right, user=alice)
    with pytest.raises(ValueError, match="no tool calls"):
        api.chat.run_tool_calls(alices, [], user=alice)
    with pytest.raises(ValueError, match="side is 'base' or 'tuned'"):
        api.chat.run_tool_calls(alices, right, side="left", user=alice)
    assert api.chat._tools.sessions.open_sessions() == [], "nothing was opened for a refused run"

    assert api.chat.chat_environment(alices, user=alice) == "builtin:arithmetic"
    run = api.chat.run_tool_calls(alices, right, side="tuned", user=alice)  # off the request thread, within the limits
    assert "What is 25 + 25?" in run.started  # the episode started from the job's first row
    (result,) = run.results
    assert result.name == "submit_answer" and not result.failed
    assert "Correct! 25 + 25 = 50." in result.content  # the environment's own answer
    assert run.done and run.reward == 1.0

    # The base side plays its own episode; a call as parse_response gives it works the same.
    call = {"type": "function", "function": {"name": "submit_answer", "arguments": {"answer": 40}}}
    low = api.chat.run_tool_calls(alices, [call], side="base", user=alice)
    assert "Too low. 2 tries left." in low.results[0].content and not low.done
    again = api.chat.run_tool_calls(alices, [call, ToolCall("no_such_tool", {})], side="base", user=alice)
    assert again.started is None, "the episode goes on"
    assert "Too low. 1 tries left." in again.results[0].content
    assert again.results[1].failed and "no_such_tool not found" in again.results[1].content
    # A finished episode: the next run starts a new one.
    assert "What is 25 + 25?" in api.chat.run_tool_calls(alices, [call], side="tuned", user=alice).started

    assert api.chat._tools.sessions.open_sessions() == [("alice", alices)]
    pid = _server_pid(api, "alice", alices)
    assert api.chat.close_chat_tools(bob) == 0, "bob closes only his own"
    assert api.chat.close_chat_tools(alice, alices) == 1 and api.chat._tools.sessions.open_sessions() == []
    wait_for(lambda: not _alive(pid), 10, what="the built-in server to stop when the chat is cleared")


def test_a_killed_server_is_a_sentence_and_the_next_run_starts_it_again(api, tool_adapter):
    job_id = finished_job(api, environment_spec(), tool_adapter)
    call = ToolCall("submit_answer", {"answer": 10})
    api.chat.run_tool_calls(job_id, [call], side="tuned")
    os.kill(_server_pid(api, "local", job_id), signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(SpecError, match="stopped answering") as gone:
        api.chat.run_tool_calls(job_id, [call], side="tuned")
    assert time.monotonic() - started < 15 and "Traceback" not in str(gone.value)
    assert "running the calls again starts it again with a new episode" in str(gone.value)
    assert api.chat._tools.sessions.open_sessions() == []
    fresh = api.chat.run_tool_calls(job_id, [call], side="tuned")
    assert fresh.started and "Too low" in fresh.results[0].content

    # Left idle, it is closed and its server stops.
    sessions, pid = api.chat._tools.sessions, _server_pid(api, "local", job_id)
    sessions.idle_s = 0.0
    assert sessions.close_idle() == 1 and sessions.open_sessions() == []
    wait_for(lambda: not _alive(pid), 10, what="the idle environment's server to stop")


def test_the_idle_sweep_closes_environments_nobody_uses():
    sessions = ChatToolSessions(idle_s=0.2)
    try:
        sessions._session("local", "job-1", environment_spec(), None)
        sessions._session("alice", "job-2", environment_spec(), None)
        assert sessions.open_sessions() == [("alice", "job-2"), ("local", "job-1")]
        wait_for(lambda: not sessions.open_sessions(), 5, what="the sweep to close the idle environments")
        wait_for(lambda: sessions._sweeper is None, 5, what="the sweep to stop once none is open")
    finally:
        sessions.close_all()
