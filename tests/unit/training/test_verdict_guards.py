"""The guarded verdict: 'improved' only when the method's metric rose and nothing the user cares about fell.

The per-row scores here are what each method's evaluation stores (``per_row``), shaped like the runs that showed the
problem: KTO's gap widening while the right answers became e^12.7 times less likely (issue 35).
"""

from __future__ import annotations

import typing

import pytest

from backend.core.artifacts import VERDICT_WORDS, JobArtifacts, Verdict
from backend.core.learning import LearningMetric, guard, guarded, status_text, verdict
from backend.core.spec import parse_spec
from backend.models.scoring import PER_ROW
from backend.training.evaluation import learning_verdict
from components.jobs.views import VERDICT_MARKS
from tests.helpers import tiny_spec

GAP = LearningMetric("gap", "held-out log-prob gap")
ACCURACY = LearningMetric("exact_match", "held-out accuracy", rate=True)


def _side(**per_row):
    return per_row


def _kto_evaluation(good_after: float, right_after: list[float]):
    """128 KTO rows, half desirable: the gap widens on the tuned side; the desirable rows' log-prob and the greedy
    answers' accuracy are the guards."""
    labels = [1.0, 0.0] * 64
    base = [-1.8 if label else -1.9 for label in labels]
    tuned = [good_after if label else -20.0 for label in labels]
    return {
        "rows": 128,
        PER_ROW: {
            "base": _side(
                logprob=base, groups=labels, reference_logprob=[-1.8] * 64, exact_match=[1.0, 0.0, 1.0, 0.0] * 16
            ),
            "tuned": _side(logprob=tuned, groups=labels, reference_logprob=[good_after] * 64, exact_match=right_after),
        },
    }


def _kto_spec():
    return parse_spec(tiny_spec(method="kto", dataset={"source": "builtin", "name": "arith-feedback"}))


def test_a_kto_gap_won_by_making_the_right_answers_unlikely_is_called_worse():
    learning = learning_verdict(_kto_spec(), _kto_evaluation(-14.6, [0.0] * 64), None)
    assert learning.method_sentence.startswith("Held-out desirable - undesirable log-prob gap 0.1 -> 5.4")
    assert learning.verdict == "regressed" and learning.word == "got worse"
    assert {g.metric: g.fell for g in learning.guards} == {"exact_match": True, "reference_logprob": True}
    assert "But held-out accuracy fell 50% -> 0% (-50 points" in learning.sentence
    assert "log-likelihood of the reference answers fell -1.8 -> -14.6" in learning.sentence
    assert learning.sentence.endswith(": the model got worse.")
    assert status_text("succeeded", learning) == "succeeded - got worse"


def test_the_same_gap_with_the_right_answers_kept_is_improved_and_says_what_was_checked():
    learning = learning_verdict(_kto_spec(), _kto_evaluation(-1.7, [1.0, 0.0, 1.0, 0.0] * 16), None)
    assert learning.verdict == "improved", learning.sentence
    assert not any(g.fell for g in learning.guards) and len(learning.guards) == 2
    assert "Nothing it was checked on got worse: held-out accuracy 50% -> 50%" in learning.sentence


def test_a_likelihood_fall_within_its_tolerance_is_no_regression():
    """A chosen answer a third less likely (0.4 nats, under ln 2) is what DPO does by design, not a broken model."""
    learning = learning_verdict(_kto_spec(), _kto_evaluation(-2.2, [1.0, 0.0, 1.0, 0.0] * 16), None)
    likelihood = next(g for g in learning.guards if g.metric == "reference_logprob")
    assert likelihood.delta == pytest.approx(-0.4) and likelihood.ci95 == 0 and not likelihood.fell
    assert learning.verdict == "improved"


def test_dpo_preferences_learned_while_greedy_accuracy_fell_is_regressed():
    spec = parse_spec(tiny_spec(method="dpo", dataset={"source": "builtin", "name": "arith-preferences"}))
    evaluation = {
        PER_ROW: {
            "base": _side(preference_accuracy=[0.0, 1.0] * 32, exact_match=[1.0, 1.0, 0.0, 1.0] * 16),
            "tuned": _side(preference_accuracy=[1.0] * 64, exact_match=[0.0, 0.0, 0.0, 1.0] * 16),
        }
    }
    learning = learning_verdict(spec, evaluation, None)
    assert learning.metric == "preference_accuracy" and learning.delta == pytest.approx(0.5)
    assert learning.verdict == "regressed"
    assert "But held-out accuracy fell 75% -> 25%" in learning.sentence


def test_a_grpo_format_reward_gamed_without_the_answers_is_caught_by_the_accuracy_guard():
    spec = parse_spec(
        tiny_spec(
            method="grpo",
            dataset={"source": "builtin", "name": "arith-prompts"},
            rollout={"rewards": [{"name": "regex", "pattern": "boxed"}]},
            training={"batch_size": 4},
        )
    )
    evaluation = {
        PER_ROW: {
            "base": _side(**{"reward/total": [0.0, 1.0] * 32, "accuracy": [1.0, 0.0] * 32}),
            "tuned": _side(**{"reward/total": [1.0] * 64, "accuracy": [0.0] * 64}),
        }
    }
    learning = learning_verdict(spec, evaluation, None)
    assert learning.label == "held-out reward" and learning.verdict == "regressed"
    assert "held-out answer accuracy fell 50% -> 0%" in learning.sentence
    only_accuracy = parse_spec(
        tiny_spec(method="grpo", dataset={"source": "builtin", "name": "arith-prompts"}, training={"batch_size": 4})
    )
    assert learning_verdict(only_accuracy, evaluation, None).guards == [], "the accuracy reward guards nothing twice"


def test_sft_accuracy_up_with_the_loss_up_too_is_regressed_and_a_tiny_loss_rise_is_not():
    spec = parse_spec(tiny_spec(dataset={"source": "builtin", "name": "arith-sft"}))

    def evaluation(loss_after):
        return {
            PER_ROW: {
                "base": _side(exact_match=[0.0, 1.0] * 32, token_nll=[1.0, 1.2] * 32),
                "tuned": _side(exact_match=[1.0] * 64, token_nll=[loss_after, loss_after + 0.2] * 32),
            }
        }

    assert learning_verdict(spec, evaluation(2.0), None).verdict == "regressed"
    assert learning_verdict(spec, evaluation(1.01), None).verdict == "improved", "0.01 nats is under the tolerance"


def test_a_run_with_no_signal_says_so_even_when_no_rows_were_scored():
    spec = parse_spec(
        tiny_spec(method="grpo", dataset={"source": "builtin", "name": "math-demo"}, training={"batch_size": 4})
    )
    learning = learning_verdict(spec, None, None, no_signal="every group scored the same on all 6 logged steps.")
    assert learning.verdict == "no_signal" and learning.rows == 0
    assert learning.sentence == "The run learned nothing: every group scored the same on all 6 logged steps."
    assert status_text("succeeded", learning) == "succeeded - learned nothing"
    assert learning_verdict(spec, None, None) is None, "with a signal and no rows there is nothing to say"


def test_guards_added_later_fold_in_once_and_a_verdict_can_go_back():
    """Benchmarks arrive after the held-out evaluation: their guards join the verdict, replacing their own earlier
    values, never stacking sentences."""
    base = verdict(GAP, [0.0, 0.2] * 32, [2.0, 2.2] * 32)
    assert base.verdict == "improved" and base.guards == []
    fell = guard(LearningMetric("bench:arith", "arithmetic benchmark", rate=True), [1.0] * 64, [0.0, 1.0] * 32)
    once = guarded(base, [fell])
    twice = guarded(once, [fell])
    assert once.verdict == twice.verdict == "regressed" and twice.sentence == once.sentence
    assert twice.sentence.count("arithmetic benchmark fell") == 1
    kept = guard(LearningMetric("bench:arith", "arithmetic benchmark", rate=True), [1.0] * 64, [1.0] * 64)
    back = guarded(twice, [kept])
    assert back.verdict == "improved" and len(back.guards) == 1 and not back.guards[0].fell


def test_a_method_that_made_its_own_metric_worse_stays_worse_and_names_the_guards_that_fell_too():
    learning = verdict(GAP, [2.0, 2.2] * 32, [0.0, 0.2] * 32, guards=[guard(ACCURACY, [1.0] * 64, [0.0] * 64)])
    assert learning.verdict == "worse" and "Training made it worse. Also held-out accuracy fell" in learning.sentence


def test_every_verdict_has_a_word_a_mark_and_survives_a_store_round_trip():
    for outcome in typing.get_args(Verdict):
        assert outcome in VERDICT_WORDS and outcome in VERDICT_MARKS
    learning = learning_verdict(_kto_spec(), _kto_evaluation(-14.6, [0.0] * 64), None)
    stored = JobArtifacts.from_stored({"learning": learning.model_dump(mode="json")})
    assert stored.learning == learning


def test_the_model_card_lists_what_the_verdict_checked():
    from backend.hub.verdict_card import learning_lines

    learning = learning_verdict(_kto_spec(), _kto_evaluation(-14.6, [0.0] * 64), None)
    lines = learning_lines(JobArtifacts(learning=learning))
    assert lines[0].startswith("**Verdict: got worse.** Held-out desirable")
    assert "| held-out accuracy | 50% | 0% | -50 points, ±12 | fell |" in "\n".join(lines)
    assert any(line.startswith("| log-likelihood of the reference answers | -1.8 | -14.6 |") for line in lines)
    assert sum(line.endswith("| fell |") for line in lines) == 2


def test_a_benchmark_skill_lost_is_a_guard_that_fell_even_without_held_out_rows():
    from backend.core.artifacts import BenchmarkReport
    from backend.training.evaluation import benchmark_guards

    report = BenchmarkReport.model_validate(
        {
            "tasks": {
                "studio_arith": {
                    "metric": "accuracy",
                    "skill": "arithmetic",
                    "n": 60,
                    "base": 0.47,
                    "tuned": 0.0,
                    "delta": -0.47,
                    "ci95": 0.13,
                    "dropped": True,
                },
                "studio_choice": {
                    "metric": "acc",
                    "skill": "picking the right result",
                    "n": 60,
                    "base": 0.49,
                    "tuned": 0.47,
                    "delta": -0.02,
                    "ci95": 0.1,
                },
            }
        }
    )
    checks = benchmark_guards(report)
    assert [(g.metric, g.fell) for g in checks] == [("bench:studio_arith", True), ("bench:studio_choice", False)]
    spec = parse_spec(tiny_spec())
    learning = learning_verdict(spec, None, None, extra_guards=checks)
    assert learning.verdict == "regressed" and learning.rows == 0
    assert learning.sentence == (
        "No held-out rows were scored by the method's own metric. But benchmark studio_arith (arithmetic) fell "
        "47% -> 0% (-47 points, ±13): the model got worse."
    )
    kept = learning_verdict(spec, None, None, extra_guards=checks[1:])
    assert kept is None, "kept skills alone make no verdict: the report says them"
    improved = learning_verdict(
        _kto_spec(), _kto_evaluation(-1.7, [1.0, 0.0, 1.0, 0.0] * 16), None, extra_guards=checks
    )
    assert improved.verdict == "regressed" and "benchmark studio_arith (arithmetic) fell" in improved.sentence
