"""Reward functions: each reward's scores, adversarial completions, specs to callables, and the test bench."""

import doctest
import pickle
import time

import pytest

from backend.core.spec import REWARD_NAMES, RewardSpec, SpecError, parse_spec
from backend.methods.rewards import accuracy_rewards, format_rewards, other_rewards, reading, registry
from backend.methods.rewards.accuracy_rewards import ExactMatch, TRLReward
from backend.methods.rewards.bench import score_completions
from backend.methods.rewards.format_rewards import RegexMatch, ValidJSON
from backend.methods.rewards.other_rewards import Keywords, LengthTarget
from backend.methods.rewards.reading import completion_text
from backend.methods.rewards.registry import build_reward, build_rewards, required_columns

MEGABYTE = "word " * 200_000


def chat(text):
    return [{"role": "assistant", "content": text}]


def one_spec_per_reward() -> list[RewardSpec]:
    """A valid spec for every reward name built from its spec alone, so tests over 'all rewards' really cover all of
    them; a reward model is loaded, not built (tests/unit/methods/test_reward_model_reward.py)."""
    params = {
        "exact_match": {"column": "answer"},
        "regex": {"pattern": r"\d+"},
        "valid_json": {"json_schema": {"type": "object"}},
        "length": {"target_length": 5},
        "keywords": {"include": ["paris"], "exclude": ["london"]},
    }
    return [RewardSpec(name=name, **params.get(name, {})) for name in REWARD_NAMES if name != "reward_model"]


def test_docstring_examples_hold():
    results = [doctest.testmod(m) for m in (reading, accuracy_rewards, format_rewards, other_rewards, registry)]
    assert sum(r.attempted for r in results) >= 10 and sum(r.failed for r in results) == 0


# --- completion_text -------------------------------------------------------------------------------


def test_completion_text_reads_plain_and_chat_completions():
    assert completion_text("plain") == "plain"
    assert completion_text(chat("hello")) == "hello"
    assert completion_text([{"content": "no role"}]) == "no role"


def test_completion_text_takes_the_last_assistant_message():
    turns = [
        {"role": "assistant", "content": "calling a tool"},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "The answer is 42"},
    ]
    assert completion_text(turns) == "The answer is 42"


def test_completion_text_survives_missing_content():
    assert completion_text(None) == ""
    assert completion_text(chat(None)) == ""
    assert completion_text([]) == ""
    assert completion_text([{"role": "tool", "content": "x"}]) == ""
    assert completion_text(chat([{"type": "text", "text": "a"}, {"type": "image"}])) == "a"


# --- TRL's rewards ---------------------------------------------------------------------------------


def test_accuracy_scores_latex_answers_against_the_solution():
    accuracy = build_reward(RewardSpec(name="accuracy"))
    completions = ["The answer is \\boxed{15}", "The answer is \\boxed{16}", "15", ""]
    assert accuracy(completions, solution=["$15$"] * 4) == [1.0, 0.0, 0.0, 0.0]


def test_accuracy_reads_chat_completions_and_numeric_solutions():
    accuracy = TRLReward("accuracy")
    completions = [chat("so \\boxed{\\frac{1}{3}}"), chat(None)]
    assert accuracy(completions, solution=["\\frac{1}{3}", "1/3"]) == [1.0, 0.0]
    assert accuracy(["\\boxed{15}"], solution=[15]) == [1.0]


def test_accuracy_is_none_when_the_solution_cannot_be_parsed():
    assert TRLReward("accuracy")(["\\boxed{15}", "\\boxed{15}"], solution=["not math at all", None]) == [None, None]


def test_accuracy_keeps_trainer_kwargs_flowing():
    logged = {}
    scores = TRLReward("accuracy")(
        ["\\boxed{2}"],
        solution=["$2$"],
        log_extra=lambda name, values: logged.setdefault(name, values),
        prompts=["1+1?"],
        completion_ids=[[1, 2]],
        trainer_state=None,
    )
    assert scores == [1.0] and logged["solution"] == ["$2$"]


def test_reasoning_accuracy_needs_finished_reasoning():
    reward = TRLReward("reasoning_accuracy")
    completions = [
        "<think>maybe \\boxed{14}</think> The answer is \\boxed{15}",
        "<think>The answer is \\boxed{15}",
        chat("<think>hm</think> \\boxed{16}"),
    ]
    assert reward(completions, solution=["$15$"] * 3) == [1.0, 0.0, 0.0]


def test_reasoning_accuracy_finds_the_answer_after_a_very_long_think():
    completion = "<think>" + MEGABYTE + "</think> so \\boxed{7}"
    assert TRLReward("reasoning_accuracy")([completion], solution=["7"]) == [1.0]


def test_think_format_rewards_one_think_block_first():
    reward = TRLReward("think_format")
    completions = ["<think>\nreasoning\n</think>\nanswer", "answer", chat("<think>a</think><think>b</think>"), ""]
    assert reward(completions) == [1.0, 0.0, 0.0, 0.0]


def test_math_rewards_stay_fast_on_adversarial_latex():
    # Unclosed \boxed{ runs make math_verify quadratic; the rewards only read the completion's tail.
    adversarial = "\\boxed{" * 150_000
    started = time.monotonic()
    assert TRLReward("accuracy")([adversarial, MEGABYTE + "\\boxed{3}"], solution=["3", "3"]) == [0.0, 1.0]
    assert time.monotonic() - started < 5


def test_accuracy_refuses_a_batch_without_solutions():
    with pytest.raises(ValueError, match="solution"):
        TRLReward("accuracy")(["\\boxed{1}"])


def test_unknown_trl_reward_is_refused():
    with pytest.raises(ValueError, match="not one of TRL's rewards"):
        TRLReward("cosine")


# --- exact_match -----------------------------------------------------------------------------------


def test_exact_match_normalises_case_space_punctuation_and_quotes():
    reward = ExactMatch("answer")
    completions = ["Paris", "  paris.  ", '"PARIS"', "Paris, France", "New   York", "«Paris»!"]
    answers = ["paris", "Paris", "Paris", "Paris", "new york", "Paris"]
    assert reward(completions, answer=answers) == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0]


def test_exact_match_reads_the_last_boxed_answer():
    reward = ExactMatch("answer")
    completions = ["I think \\boxed{Paris}", "\\boxed{Lyon} no, \\boxed{Paris}", "\\boxed{Paris} no, \\boxed{Lyon}"]
    assert reward(completions, answer=["paris"] * 3) == [1.0, 1.0, 0.0]
    assert reward(["\\boxed{\\frac{1}{2}}", "\\boxed{unclosed"], answer=["\\frac{1}{2}", "unclosed"]) == [1.0, 0.0]


def test_exact_match_applies_nfkc_to_fullwidth_text():
    assert ExactMatch("answer")(["Ｐａｒｉｓ", "ﬁne"], answer=["Paris", "fine"]) == [1.0, 1.0]


def test_exact_match_handles_emoji_and_non_latin_text():
    reward = ExactMatch("answer")
    assert reward(["🇫🇷 Paris 🗼", "東京。", "Straße"], answer=["🇫🇷 paris 🗼", "東京", "STRASSE"]) == [1.0, 1.0, 1.0]


def test_exact_match_case_sensitive_keeps_case():
    reward = ExactMatch("answer", case_sensitive=True)
    assert reward(["Paris", "paris"], answer=["Paris", "Paris"]) == [1.0, 0.0]


def test_exact_match_accepts_numbers_and_lists_of_aliases():
    reward = ExactMatch("answer")
    assert reward(["42", "NYC", "Boston"], answer=[42, ["New York", "NYC"], ["New York", "NYC"]]) == [1.0, 1.0, 0.0]


def test_exact_match_skips_rows_without_an_answer_and_survives_empty_input():
    reward = ExactMatch("answer")
    assert reward(["Paris", "", chat(None), MEGABYTE], answer=[None, "", "x", "word"]) == [None, 1.0, 0.0, 0.0]


def test_exact_match_explains_a_missing_column():
    with pytest.raises(ValueError, match="'answer'"):
        ExactMatch("answer")(["Paris"], solution=["Paris"])


# --- regex -----------------------------------------------------------------------------------------


def test_regex_searches_anywhere_ignoring_case():
    reward = RegexMatch(r"answer:\s*\d+")
    assert reward(["Final ANSWER: 42", chat("answer:7"), "no answer", "", chat(None)]) == [1.0, 1.0, 0.0, 0.0, 0.0]


def test_regex_case_sensitive_and_unicode():
    assert RegexMatch("Paris", case_sensitive=True)(["Paris", "paris"]) == [1.0, 0.0]
    assert RegexMatch("🗼")(["a 🗼 b", "a b"]) == [1.0, 0.0]


def test_regex_on_a_megabyte_completion():
    assert RegexMatch(r"\bneedle\b")([MEGABYTE + "needle", MEGABYTE]) == [1.0, 0.0]


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        ("(a+)+$", "a" * 30 + "b"),  # ~19 s with Python's re
        ("(a|aa)+$", "a" * 40 + "b"),  # exponential for the regex package too, so its timeout is what ends it
        ("^(\\w+\\s?)*$", "an input that is long enough to hurt " * 3 + "!"),
    ],
)
def test_a_catastrophic_pattern_gives_up_after_its_time_limit_and_scores_zero(pattern, text):
    reward = RegexMatch(pattern)
    start = time.monotonic()
    assert reward([text, "a"]) == [0.0, 1.0]
    assert time.monotonic() - start < 1.0


def test_a_pattern_that_runs_out_of_time_is_logged_and_remembered():
    reward = RegexMatch("(a|aa)+$")
    assert reward(["a", "a" * 40 + "b"]) == [1.0, 0.0]
    assert reward.timed_out == [1]
    assert reward(["a"]) == [1.0] and reward.timed_out == []


def test_a_schema_pattern_is_time_limited_too():
    schema = {
        "type": "object",
        "properties": {"id": {"type": "string", "pattern": "(a|aa)+$"}},
        "patternProperties": {"(x|xx)+$": {"type": "integer"}},
        "additionalProperties": False,
    }
    reward = ValidJSON(schema)
    start = time.monotonic()
    scores = reward(
        [
            '{"id": "%s"}' % ("a" * 40 + "b"),
            '{"id": "aaa"}',
            '{"%s": 1}' % ("x" * 40 + "y"),
            '{"xx": 1}',
            '{"xx": "no"}',
            '{"other": 1}',
        ]
    )
    assert time.monotonic() - start < 2.0
    assert scores == [0.0, 1.0, 0.0, 1.0, 0.0, 0.0]


# --- valid_json ------------------------------------------------------------------------------------


def test_valid_json_parses_plain_and_fenced_json():
    reward = ValidJSON()
    completions = ['{"a": 1}', " [1, 2] ", '```json\n{"a": 1}\n```', "```\n[]\n```", "```[1]```", 'Here: {"a": 1}']
    assert reward(completions) == [1.0, 1.0, 1.0, 1.0, 1.0, 0.0]


def test_valid_json_refuses_garbage_and_non_standard_constants():
    reward = ValidJSON()
    assert reward(["", chat(None), "{", "NaN", '{"x": Infinity}', "```", "``````", "null"]) == [
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        1.0,
    ]


def test_valid_json_checks_the_schema():
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
        "required": ["name"],
        "additionalProperties": False,
    }
    reward = ValidJSON(schema)
    completions = ['{"name": "Zoë 🐱"}', '{"name": "a", "age": -1}', '{"age": 3}', '{"name": "a", "x": 1}', "[]"]
    assert reward(completions) == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_valid_json_survives_deep_nesting_and_a_megabyte():
    assert ValidJSON()(["[" * 100_000 + "]" * 100_000]) == [0.0]
    big = '{"text": "' + "x" * 1_000_000 + '"}'
    assert ValidJSON({"type": "object"})([big, MEGABYTE]) == [1.0, 0.0]


def test_valid_json_fails_a_completion_whose_schema_ref_leads_nowhere():
    assert ValidJSON({"$ref": "#/$defs/missing"})(["1"]) == [0.0]


# --- length ----------------------------------------------------------------------------------------


def test_length_is_flat_within_tolerance_then_linear():
    reward = LengthTarget(10, tolerance=2)
    lengths = [10, 8, 12, 17, 3, 22, 40, 0]
    assert reward(["w " * n for n in lengths]) == [1.0, 1.0, 1.0, 0.5, 0.5, 0.0, 0.0, 0.2]


def test_length_in_characters_counts_unicode_code_points():
    reward = LengthTarget(4, unit="chars")
    assert reward(["🇫🇷ab", "  abcd  ", "ab", "", chat(None)]) == [1.0, 1.0, 0.5, 0.0, 0.0]


def test_length_on_a_megabyte_completion_is_zero():
    assert LengthTarget(100, tolerance=10)([MEGABYTE]) == [0.0]


def test_length_refuses_impossible_targets():
    with pytest.raises(ValueError):
        LengthTarget(0)
    with pytest.raises(ValueError):
        LengthTarget(5, unit="tokens")


# --- keywords --------------------------------------------------------------------------------------


def test_keywords_fraction_of_included_words():
    reward = Keywords(include=["paris", "france", "eiffel tower"])
    completions = ["Paris is in France near the Eiffel\n  Tower", "PARIS!", "nothing", ""]
    assert reward(completions) == [1.0, 1 / 3, 0.0, 0.0]


def test_keywords_match_whole_words_only():
    assert Keywords(include=["cat"])(["category", "a cat.", "cat's"]) == [0.0, 1.0, 1.0]
    assert Keywords(include=["C++"], case_sensitive=True)(["I write C++ daily", "I write c++"]) == [1.0, 0.0]


def test_keywords_any_excluded_word_zeroes_the_score():
    reward = Keywords(include=["paris"], exclude=["london"])
    assert reward(["Paris", "Paris and London", "London"]) == [1.0, 0.0, 0.0]


def test_keywords_with_only_exclusions():
    reward = Keywords(exclude=["sorry", "as an ai"])
    assert reward(["Sure, here it is", "Sorry, no", "As an   AI model", "", chat(None)]) == [1.0, 0.0, 0.0, 1.0, 1.0]


def test_keywords_unicode_and_megabyte():
    assert Keywords(include=["Ｐａｒｉｓ", "🗼"])(["paris 🗼", "parisian"]) == [1.0, 0.0]
    assert Keywords(include=["needle"], exclude=["thorn"])([MEGABYTE + "needle", MEGABYTE]) == [1.0, 0.0]


def test_keywords_ignore_blank_words():
    assert Keywords(include=["paris", "  "])(["Paris", "x"]) == [1.0, 0.0]
    with pytest.raises(ValueError, match="non-blank"):
        Keywords(include=[" "])


# --- from specs ------------------------------------------------------------------------------------


def test_build_reward_names_every_reward_after_its_spec():
    for spec in one_spec_per_reward():
        assert build_reward(spec).__name__ == spec.name


def test_build_reward_passes_spec_parameters():
    reward = build_reward(RewardSpec(name="keywords", include=["Paris"], case_sensitive=True))
    assert reward(["Paris", "paris"]) == [1.0, 0.0]
    length = build_reward(RewardSpec(name="length", target_length=4, tolerance=1, unit="chars"))
    assert length(["abc", "abcdefgh"]) == [1.0, 0.25]


def test_build_rewards_returns_weights_and_distinct_names():
    specs = [
        RewardSpec(name="keywords", include=["a"], weight=0.5),
        RewardSpec(name="regex", pattern="x"),
        RewardSpec(name="keywords", exclude=["b"], weight=2.0),
        RewardSpec(name="keywords", include=["c"]),
    ]
    functions, weights = build_rewards(specs)
    assert [f.__name__ for f in functions] == ["keywords", "regex", "keywords_2", "keywords_3"]
    assert weights == [0.5, 1.0, 2.0, 1.0]


def test_every_built_reward_survives_pickling():
    functions, _ = build_rewards(one_spec_per_reward() + [RewardSpec(name="regex", pattern="x")])
    completions = ['{"a": "Paris 12"}', "<think>x</think> \\boxed{12}"]
    columns = {"solution": ["12", "12"], "answer": ["paris", "12"]}
    for function in functions:
        copy = pickle.loads(pickle.dumps(function))
        assert copy.__name__ == function.__name__
        assert copy(completions, **columns) == function(completions, **columns)
    assert functions[-1].__name__ == "regex_2"


def test_valid_json_pickles_after_use():
    reward = ValidJSON({"type": "object"})
    assert reward(["{}"]) == [1.0]  # builds the (unpicklable) validator
    assert pickle.loads(pickle.dumps(reward))(["{}", "[]"]) == [1.0, 0.0]


def test_required_columns():
    expected = {"accuracy": {"solution"}, "reasoning_accuracy": {"solution"}, "exact_match": {"answer"}}
    for spec in one_spec_per_reward():
        assert required_columns(spec) == expected.get(spec.name, set())


# --- the test bench --------------------------------------------------------------------------------


def test_score_completions_totals_weighted_scores():
    specs = [
        RewardSpec(name="exact_match", column="answer", weight=2.0),
        RewardSpec(name="keywords", include=["paris", "france"], weight=0.5),
    ]
    row = {"prompt": "Capital of France?", "answer": "Paris"}
    results = score_completions(specs, ["Paris", "Paris, France", "Lyon"], row=row)
    assert results == [
        {"completion": "Paris", "scores": {"exact_match": 1.0, "keywords": 0.5}, "total": 2.25, "notes": []},
        {"completion": "Paris, France", "scores": {"exact_match": 0.0, "keywords": 1.0}, "total": 0.5, "notes": []},
        {"completion": "Lyon", "scores": {"exact_match": 0.0, "keywords": 0.0}, "total": 0.0, "notes": []},
    ]


def test_score_completions_counts_none_as_zero():
    specs = [RewardSpec(name="accuracy", weight=3.0), RewardSpec(name="regex", pattern="boxed")]
    results = score_completions(specs, ["\\boxed{1}"], row={"solution": "no math here"})
    assert results[0]["scores"] == {"accuracy": None, "regex": 1.0} and results[0]["total"] == 1.0


def test_score_completions_on_latex_and_duplicate_names():
    specs = [RewardSpec(name="accuracy"), RewardSpec(name="accuracy", weight=-1.0), RewardSpec(name="think_format")]
    results = score_completions(specs, ["<think>ok</think> \\boxed{15}", "\\boxed{16}"], row={"solution": "$15$"})
    assert [r["scores"] for r in results] == [
        {"accuracy": 1.0, "accuracy_2": 1.0, "think_format": 1.0},
        {"accuracy": 0.0, "accuracy_2": 0.0, "think_format": 0.0},
    ]
    assert [r["total"] for r in results] == [1.0, 0.0]


def test_score_completions_accepts_chat_completions_and_no_row():
    results = score_completions([RewardSpec(name="valid_json")], [chat("{}"), chat(None)])
    assert [(r["completion"], r["total"]) for r in results] == [("{}", 1.0), ("", 0.0)]


def test_score_completions_names_the_missing_column_and_its_reward():
    specs = [RewardSpec(name="exact_match", column="answer"), RewardSpec(name="accuracy")]
    with pytest.raises(SpecError) as refused:
        score_completions(specs, ["Paris"], row={"question": "Capital?"})
    assert len(refused.value.problems) == 2
    assert "'answer'" in refused.value.problems[0] and "exact_match" in refused.value.problems[0]
    assert "'solution'" in refused.value.problems[1] and "accuracy" in refused.value.problems[1]


def test_score_completions_ignores_row_columns_that_clash_with_trainer_arguments():
    results = score_completions(
        [RewardSpec(name="regex", pattern="ok")], ["ok"], row={"completions": "x", "log_extra": 1, "completion": "y"}
    )
    assert results[0]["total"] == 1.0


# --- invalid specs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reward", "message"),
    [
        ({"name": "regex", "pattern": "(unclosed"}, "not a valid regular expression"),
        ({"name": "regex"}, "regex needs pattern"),
        ({"name": "valid_json", "json_schema": {"type": "nonsense"}}, "not a valid JSON schema"),
        ({"name": "exact_match"}, "exact_match needs column"),
        ({"name": "length"}, "length needs target_length"),
        ({"name": "length", "target_length": 0}, "target_length"),
        ({"name": "keywords"}, "keywords needs include or exclude"),
        ({"name": "bleu"}, "rollout.rewards.0.name"),
        ({"name": "regex", "pattern": "x", "patern": "y"}, "unknown setting"),
    ],
)
def test_invalid_reward_specs_are_refused(reward, message):
    with pytest.raises(SpecError) as refused:
        parse_spec({"method": "grpo", "grpo": {"rewards": [reward]}})
    assert any(message in problem for problem in refused.value.problems), refused.value.problems
    assert all(problem.startswith("rollout.rewards.0") for problem in refused.value.problems)
