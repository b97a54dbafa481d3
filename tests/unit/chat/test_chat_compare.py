"""The chat compares what the verdict compares (issue 37): "compare" mode asks each question on its own and greedy on
both sides, the Chat tab's header names the verdict's metric rather than the training loss, and a finished job that
learned no longer shows the pre-flight's warning that no group may earn a reward."""

from __future__ import annotations

import inspect

import pytest

from backend.api.chat import ChatOperations
from backend.chat.side_by_side import PairUpdate, mode_turn
from backend.core.artifacts import LearningVerdict
from backend.core.run_warnings import NO_REWARD_WARNING_MARK, judge_warnings
from backend.core.spec import parse_spec
from backend.environments.probe import RewardProbe
from backend.models.mixed_batch import GenerationSettings
from components.chat import views as chat_tab
from components.jobs import views as job_views
from tests.helpers import tiny_spec

EARLIER = [{"role": "user", "content": "What is 17 + 25?"}, {"role": "assistant", "content": "42"}]
SAMPLED = GenerationSettings(system_prompt="Be brief.", temperature=0.7, max_new_tokens=24, seed=3)


class _Recorder:
    """A chat model stand-in: records what each turn was asked with."""

    def __init__(self) -> None:
        self.asked: list[tuple] = []

    def stream_turn(self, base_history, tuned_history, message, settings):
        self.asked.append((list(base_history), list(tuned_history), message, settings))
        yield PairUpdate("a", "b")

    def stream_pair(self, base_history, tuned_history, message, settings):
        self.asked.append((list(base_history), list(tuned_history), message, settings))
        yield "a", "b"


class _Chat(ChatOperations):
    def __init__(self) -> None:
        self.model = _Recorder()

    def for_job(self, job_id, user):
        return self.model

    def _held_stream(self, stream, user):
        return stream


@pytest.mark.parametrize("call", ["chat_turn", "chat_pair"])
def test_compare_mode_asks_without_history_and_greedy(call):
    chat = _Chat()
    list(getattr(chat, call)("j1", EARLIER, EARLIER, "What is 2 + 3?", SAMPLED, mode="compare"))
    base, tuned, message, settings = chat.model.asked[-1]
    assert (base, tuned, message) == ([], [], "What is 2 + 3?")
    assert settings.greedy and settings.temperature == 0.0
    # What the verdict's evaluation does not change stays as set: the system prompt and the answer's length.
    assert (settings.system_prompt, settings.max_new_tokens) == ("Be brief.", 24)
    assert SAMPLED.temperature == 0.7, "the caller's settings are not changed"


def test_conversation_mode_keeps_history_and_sampling():
    chat = _Chat()
    list(chat.chat_turn("j1", EARLIER, EARLIER[:1], "And 2 + 3?", SAMPLED, mode="conversation"))
    base, tuned, _, settings = chat.model.asked[-1]
    assert (base, tuned) == (EARLIER, EARLIER[:1]) and settings.temperature == 0.7 and settings.seed == 3


def test_an_unknown_mode_is_a_sentence():
    with pytest.raises(ValueError, match="'compare' or 'conversation', not 'debate'"):
        mode_turn("debate", [], [], GenerationSettings())


GRPO_VERDICT = LearningVerdict(
    metric="accuracy",
    label="held-out answer accuracy",
    verdict="improved",
    sentence="Held-out answer accuracy 12% -> 31% (+19 points, ±7) on 128 rows.",
    before=0.12,
    after=0.31,
    delta=0.19,
    ci95=0.07,
    rows=128,
    rate=True,
)


def _grpo_job(api, learning: LearningVerdict | None, warnings=()):
    job = api.core.store.add(
        parse_spec(
            tiny_spec(method="grpo", dataset={"source": "builtin", "name": "math-demo"}, training={"batch_size": 4})
        )
    )
    # GRPO's loss is near zero and rises as the policy moves: it is not what the run learns by.
    api.core.store.report(job.id, [(1, 1.0, {"loss": 0.0}), (30, 2.0, {"loss": 0.004})], None)
    api.core.store.merge_artifacts(job.id, learning=learning, preflight_warnings=list(warnings))
    return api.jobs.get_job(job.id)


def test_the_grpo_chat_header_names_the_verdicts_metric_not_the_training_loss(api):
    job = _grpo_job(api, GRPO_VERDICT)
    header = chat_tab.job_info_markdown(api, f"{job.id} · grpo", None)
    assert "Training loss" not in header and "0.004" not in header, header
    assert "The verdict's metric: **held-out answer accuracy**, 12% -> 31% (+19 points, ±7) on 128 held-out rows." in (
        header
    )
    bare = chat_tab.job_info_markdown(api, f"{_grpo_job(api, None).id} · grpo", None)
    assert "Training loss" not in bare and "No learning verdict for this job" in bare, bare


REWARD_WARNING = RewardProbe(actions=12, episodes=2, rewarded=0).warning("arith-env")


def test_a_job_that_learned_drops_the_no_reward_warning(api):
    assert REWARD_WARNING and NO_REWARD_WARNING_MARK in REWARD_WARNING
    from backend.training.preflight import episode_budget_warnings

    assert NO_REWARD_WARNING_MARK in inspect.getsource(episode_budget_warnings), "the other such warning says it too"
    other = "The dataset has 12 rows."
    learned = _grpo_job(api, GRPO_VERDICT, [REWARD_WARNING, other])
    summary = job_views.summary_markdown(api, learned)
    assert "gave no reward" not in summary and other in summary, summary
    stuck = GRPO_VERDICT.model_copy(update={"verdict": "no_change"})
    for learning in (stuck, None):
        job = _grpo_job(api, learning, [REWARD_WARNING])
        assert "gave no reward" in job_views.summary_markdown(api, job)
    assert judge_warnings([REWARD_WARNING], GRPO_VERDICT).standing == []


def test_compare_mode_turns_off_the_temperature_and_seed_its_note_says_are_not_used():
    """Issue 47: in Compare the temperature slider stayed live while its note said it was not used."""
    import gradio as gr

    from components.chat.handlers import on_mode
    from components.chat.layout import lay_out

    with gr.Blocks():
        h = lay_out()
    assert h.mode.value == "compare" and "not used" in h.mode_info.value
    assert h.temperature.interactive is False and h.seed.interactive is False
    assert h.max_tokens.interactive is not False, "Compare keeps the answer's length"
    conversation = on_mode(h, "conversation")
    assert conversation[h.temperature]["interactive"] is True and conversation[h.seed]["interactive"] is True
    compare = on_mode(h, "compare")
    assert compare[h.temperature]["interactive"] is False and "not used" in compare[h.mode_info]
