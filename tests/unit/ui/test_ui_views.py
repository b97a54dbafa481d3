"""The tabs' pure views and the handler binding, without a browser or a Gradio app: what the Train tab says for the
facade's answers, the chat's history helpers, the Jobs tab's plot ids, and ``bind``'s signature for Gradio."""

from __future__ import annotations

import dataclasses
import doctest
import inspect
import typing
from types import SimpleNamespace

import pytest

from components.chat import arena_views
from components.chat import views as chat_views
from components.jobs import plots as job_plots
from components.jobs import views as job_views
from components.train import views as train_views
from components.train.fields import FORM_FIELDS, FormError
from components.train.recipes import FIELDS
from components.wiring import bind


def test_the_doctests_hold():
    for module in (train_views, chat_views, arena_views):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_form_values_follow_the_inputs_order():
    values = train_views.form_values(tuple(range(len(FIELDS))))
    assert list(values) == list(FIELDS) and values[next(iter(FIELDS))] == 0


def test_a_field_problem_names_its_spec_path():
    lines = train_views.field_lines("max_steps", ["must be at least 1", "too many"])
    path = FORM_FIELDS["max_steps"].path
    assert lines.splitlines() == [f"⚠️ must be at least 1 (`{path}`)", f"⚠️ too many (`{path}`)"]
    assert train_views.field_lines("max_steps", []) == ""


def test_the_bench_row_is_json_or_a_sentence_under_the_method():
    assert train_views.bench_row("  ") is None
    assert train_views.bench_row('{"solution": "4"}') == {"solution": "4"}
    with pytest.raises(FormError) as refused:
        train_views.bench_row("{solution")
    assert refused.value.section == "method" and "not valid JSON" in str(refused.value)


def test_a_refusal_points_at_the_fields_then_the_sections():
    said = train_views.refused_text("Not queued", ["max_steps"], ["dataset", "general"])
    assert said.startswith("⚠️ Not queued: see **Max steps** (4. Training settings)")
    assert said.endswith("the note under 2. Dataset, the note below.")


def test_preview_check_queue_and_warm_up_answers():
    row = SimpleNamespace(n_tokens=12, over_max_length=True, rendered="hi", rendered_rejected="no", n_tokens_rejected=3)
    preview = SimpleNamespace(
        total_rows=2,
        format="prompt-completion",
        columns=["prompt", "completion"],
        summary=SimpleNamespace(max_tokens=12, max_length=8),
        rows=[row],
    )
    shown = train_views.preview_markdown(preview)
    assert shown.startswith("**2 rows**, format `prompt-completion`, columns: prompt, completion")
    assert "Row 0 · 12 tokens — **longer than max_length: will be cut**" in shown and "Rejected · 3 tokens" in shown

    checked = train_views.check_markdown(["memory is tight"], "12 GB")
    assert checked.splitlines()[:2] == ["✅ Pre-flight passed.", "- ⚠️ memory is tight"] and "```\n12 GB\n```" in checked

    job = SimpleNamespace(id="20260101-abc")
    queued = train_views.queued_markdown(
        SimpleNamespace(job=job, queue_position=1, free_workers=1, warnings=["memory is tight"], repeated=False)
    )
    assert "20260101-abc" in queued and "(starting now)" in queued and queued.endswith("- ⚠️ memory is tight")

    warm = SimpleNamespace(
        demonstrations="8 demonstrations",
        sft=SimpleNamespace(job=SimpleNamespace(id="j-sft"), warnings=[]),
        grpo=SimpleNamespace(job=SimpleNamespace(id="j-grpo"), warnings=["slow"]),
    )
    text = train_views.warm_up_markdown(warm)
    assert text.startswith("Wrote 8 demonstrations.") and "j-sft" in text and text.endswith("\n- ⚠️ slow")


def test_the_bench_says_which_row_it_scored_cut_to_160_characters():
    assert train_views.first_row_note({"a": 1}) == 'the dataset\'s first row: `{"a": 1}`'
    long = train_views.first_row_note({"a": "x" * 300})
    assert long.endswith("…`") and len(long) < 200


def test_the_chats_history_helpers():
    history = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "1"},
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "2"},
    ]
    assert chat_views.last_user_message(history) == "two"
    assert chat_views.before_last_question(history) == history[:2]
    assert chat_views.last_user_message([]) is None and chat_views.before_last_question([]) == []
    settings = chat_views.generation_settings(None, None, None, None)
    assert (settings.system_prompt, settings.temperature, settings.max_new_tokens, settings.seed) == ("", 0.0, 128, 0)
    assert chat_views.SIDES == ("base", "tuned")


def test_the_jobs_plots_ids_and_the_state_they_were_drawn_for():
    assert job_plots.plot_id("loss") == "plot-main" and job_plots.plot_id("kl_div") == "plot-kl-div"
    assert job_views.heavy_state(None) == ""
    job = SimpleNamespace(id="j1", status=SimpleNamespace(value="running"))
    assert job_views.heavy_state(job) == "j1:running"


@dataclasses.dataclass
class Profile:
    name: str


def _handler(api, handles, text, profile: Profile | None = None) -> list[str]:
    """A handler."""
    return [api, handles, text, profile]


def _streaming(api, text, profile: Profile | None = None):
    yield api
    yield text


def test_bind_keeps_what_gradio_reads_less_the_bound_parameters():
    bound = bind(_handler, "api", "handles")
    assert list(inspect.signature(bound).parameters) == ["text", "profile"]
    hints = typing.get_type_hints(bound)
    assert hints["profile"] == Profile | None and hints["return"] == list[str] and "api" not in hints
    assert (bound.__name__, bound.__doc__) == ("_handler", "A handler.")
    assert bound("hi", profile=Profile("a")) == ["api", "handles", "hi", Profile("a")]
    streamed = bind(_streaming, "api")
    assert inspect.isgeneratorfunction(streamed) and list(streamed("hi")) == ["api", "hi"]
