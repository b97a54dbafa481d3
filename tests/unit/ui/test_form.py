"""The Train form <-> spec mapping, problem routing, and the Jobs tab's views: plain functions, no browser."""

import pytest

from backend.api import StudioAPI
from backend.core.spec import parse_spec
from backend.jobs.records import JobStatus
from components.jobs import monitor as job_monitor
from components.jobs import views as job_views
from components.train.form import (
    FIELDS,
    FormError,
    bench_table,
    form_to_spec,
    parse_column_map,
    route_problems,
    spec_to_form,
)
from tests.helpers import tiny_spec

ONLINE = ("grpo", "rloo")  # the methods that generate: they show and send the rollout's fields


def test_the_default_form_is_a_valid_sft_spec_of_the_arith_model_with_its_recipe():
    spec = parse_spec(form_to_spec({}))
    assert spec.method.value == "sft" and spec.lora.enabled
    assert (spec.model.name_or_path, spec.dataset.name) == ("builtin:tiny-qwen3-arith", "arith-sft")
    training = spec.training
    assert (training.max_steps, training.learning_rate, training.batch_size, training.max_length) == (
        150,
        2e-3,
        16,
        128,
    ) and spec.eval.holdout_rows == 256


@pytest.mark.parametrize(
    "values",
    [
        {"method": "dpo", "builtin_dataset": "preferences-demo", "dpo_beta": 0.2, "quant_mode": "4bit"},
        {
            "method": "grpo",
            "builtin_dataset": "math-demo",
            "rollout_rewards": "- name: accuracy\n- name: think_format\n",
            "batch_size": 4,
        },  # the spec's default batch (2) holds half of its default group (4 generations)
        {
            "method": "grpo",
            "builtin_dataset": "wordle-demo",
            "env_name": "builtin:wordle",
            "rollout_rewards": "",
            "env_reward": "last",
            "env_eval_episodes": 4,
            "batch_size": 4,
        },
        {
            "dataset_source": "hub",
            "hub_dataset": "trl-lib/Capybara",
            "hub_split": "test",
            "column_map": "messages=conv",
            "max_rows": 100,
            "run_name": "x",
            "holdout_rows": 5,
        },
        {"dataset_source": "upload", "upload_id": "0123456789ab-chats.jsonl"},
    ],
)
def test_form_and_spec_round_trip(values):
    spec = parse_spec(form_to_spec(values))
    again = parse_spec(form_to_spec(spec_to_form(spec)))
    assert again == spec


def test_an_upload_is_named_by_its_id_and_a_cloned_local_file_by_its_path():
    assert form_to_spec({"dataset_source": "upload", "upload_id": "0123456789ab-chats.jsonl"})["dataset"] == {
        "source": "upload",
        "name": "0123456789ab-chats.jsonl",
    }
    # Only the local admin may use a file source; the backend refuses it for everyone else
    # (tests/unit/api/test_access.py).
    local = parse_spec(tiny_spec(dataset={"source": "file", "name": "/home/me/rows.jsonl"}))
    assert form_to_spec(spec_to_form(local))["dataset"] == {"source": "file", "name": "/home/me/rows.jsonl"}


def test_the_reward_bench_table_shows_each_score_and_the_total(paths):
    api = StudioAPI(paths.root, scheduler="none")
    scored = api.datasets.score_rewards(
        [
            {"name": "exact_match", "column": "answer", "weight": 2.0},
            {"name": "accuracy"},
            {"name": "regex", "pattern": "(a|aa)+$"},
        ],
        ["Paris", "a" * 40 + "b"],
        row={"answer": "paris", "solution": "no math here"},
    )
    table = bench_table(scored)
    assert table["headers"] == ["completion", "exact_match", "accuracy", "regex", "total", "notes"]
    assert table["data"][0] == ["Paris", "1.000", "-", "0.000", "2.000", ""]
    assert table["data"][1][:5] == ["a" * 40 + "b", "0.000", "-", "0.000", "0.000"]
    assert "regex: the pattern ran past 0.1 s" in table["data"][1][5]
    assert bench_table([]) == {"headers": ["completion", "total", "notes"], "data": []}


def test_an_environment_job_has_no_default_rewards_but_keeps_extra_ones():
    spec = parse_spec(
        form_to_spec(
            {
                "method": "grpo",
                "builtin_dataset": "echo-demo",
                "env_name": "builtin:echo",
                "rollout_rewards": "",
                "batch_size": 4,
            }
        )
    )
    assert spec.rollout.rewards == [] and spec.environment.name == "builtin:echo"


@pytest.mark.parametrize(
    "values, section, fragment",
    [
        ({"dataset_source": "hub", "hub_dataset": " "}, "dataset", "give a Hub dataset id"),
        ({"dataset_source": "upload"}, "dataset", "upload a .jsonl"),
        ({"column_map": "messages"}, "dataset", "must look like expected=your_column"),
        ({"method": "grpo", "rollout_rewards": "- name: [unclosed"}, "method", "not valid YAML"),
        ({"method": "grpo", "rollout_rewards": "accuracy"}, "method", "YAML list of mappings"),
    ],
)
def test_unreadable_form_values_name_their_section(values, section, fragment):
    with pytest.raises(FormError) as err:
        form_to_spec(values)
    assert err.value.section == section and fragment in str(err.value)


def test_problems_are_routed_next_to_their_field():
    routed = route_problems(
        [
            "dataset: SFT needs columns messages",
            "training.learning_rate: must be greater than 0",
            "environment.name: not reachable",
            "model.name_or_path: not found",
            "rollout.rewards: needs one",
            "spec: something global",
        ]
    )
    assert routed["dataset"] and routed["settings"] and routed["environment"] and routed["model"]
    assert routed["method"] == ["rollout.rewards: needs one"] and routed["general"] == ["spec: something global"]
    assert parse_column_map("a=b, c = d\ne=f") == {"a": "b", "c": "d", "e": "f"}
    assert list(FIELDS)[0] == "base_model"


def test_job_views_from_real_records(paths, store):
    api = StudioAPI(paths.root, scheduler="none")
    job = api.jobs.submit(
        tiny_spec(method="grpo", dataset={"source": "builtin", "name": "math-demo"}, grpo={"num_generations": 2})
    ).job
    rows = job_views.table_rows(api, api.jobs.list_jobs())
    assert rows[0][0] == job.id and rows[0][3] == "queued" and rows[0][7] == 1
    store.report(
        job.id,
        [
            (
                1,
                0.0,
                {"loss": 0.5, "reward": 0.25, "rewards/accuracy/mean": 0.25, "kl": 0.01, "tools/call_frequency": 0.5},
            )
        ],
        {"step": 1, "total_steps": 4, "eta_seconds": 75, "loss": 0.5},
        [
            (
                1,
                {
                    "prompt": [{"role": "user", "content": "2+2?"}],
                    "completion": [{"role": "assistant", "content": "4"}],
                    "rewards": {"accuracy": 1.0},
                    "advantage": 0.5,
                },
            )
        ],
    )
    views = job_monitor.plot_views("grpo", api.jobs.metrics(job.id))
    # One logged step: one point per metric, no faint raw copy under it; metrics named in words.
    assert set(views["loss"].frame["series"]) == {"loss"} and views["lr"] is None
    assert set(views["reward"].frame["series"]) == {"reward (mean)", "accuracy"}
    assert set(views["kl"].color_map) == {"KL"} and set(views["tools"].color_map) == {"calls"}
    assert views["length"] is None
    assert job_monitor.plot_views("sft", [])["loss"] is None
    samples = job_monitor.samples_table(api.jobs.samples(job.id))
    assert samples.values.tolist() == [[1, "2+2?", "assistant: 4", "1", "1", "0.5"]]
    assert list(samples.columns) == ["step", "prompt", "completion", "accuracy", "total", "advantage"]
    store.merge_artifacts(job.id, {"auto_tune": {"choices": ["gradient checkpointing: off (fits)", "packing: off"]}})
    assert "Auto-tune: gradient checkpointing: off (fits); packing: off" in job_views.summary_markdown(
        api, store.get(job.id)
    )
    html = job_views.progress_html(store.get(job.id))
    assert 'data-fraction="0.250"' in html
    assert job_views.eta_text(75) == "1m 15s"
    assert not job_views.job_actions(api, store.get(job.id)).download, "no adapter before the job succeeds"
    assert job.status is JobStatus.queued


# --- issue 13: the Train and Chat tabs in the UI's words ------------------------------------------------------------
SPEC_PATH = (
    r"\b(model|dataset|columns|sft|dpo|grpo|kto|rloo|rollout|environment|training|lora|quantization|eval|output)"
    r"\.[a-z_]+"
)


def test_the_forms_help_names_no_spec_path_and_each_builtin_dataset_is_described():
    import re

    from backend.data.builtin import BUILTIN_DATASETS
    from components.train.fields import BASE_MODEL_HELP, FORM_FIELDS, builtin_dataset_help

    texts = [BASE_MODEL_HELP, *(f.info for f in FORM_FIELDS.values())]  # every field's help, the spec's or the form's
    texts += [builtin_dataset_help(name) for name in BUILTIN_DATASETS]
    assert not [t for t in texts if re.search(SPEC_PATH, t)]
    assert FORM_FIELDS["lora_r"].info.startswith("LoRA rank")
    assert "Or:" not in FORM_FIELDS["holdout_rows"].info
    for name, dataset in BUILTIN_DATASETS.items():
        assert builtin_dataset_help(name).startswith(f"{name}: {dataset.description}")


def test_the_demo_model_notice_says_what_it_can_and_cannot_show():
    from components.train.form import model_notice, queued_link

    notice = model_notice("builtin:tiny-qwen3")
    assert "random tiny model" in notice and "loss curves" in notice and "cannot give sensible answers" in notice
    assert "measured to make it learn" not in notice  # no recipe: nothing was filled in for it
    arith = model_notice("builtin:tiny-qwen3-arith")
    assert "pre-trained on this project's synthetic arithmetic" in arith and "measured to make it learn" in arith
    assert model_notice("Qwen/Qwen3-0.6B") == ""
    assert queued_link("abc123") == "[**abc123**](?job=abc123)"


def _qa_csv(tmp_path, name="qa.csv"):
    path = tmp_path / "gradio" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("question,answer\n" + "".join(f"q{i},a{i}\n" for i in range(6)))
    return path


def test_an_upload_with_other_column_names_is_kept_and_a_mapping_makes_it_usable(paths, tmp_path):
    from backend.data.uploads import UnmappedUpload

    api = StudioAPI(paths.root, scheduler="none")
    with pytest.raises(UnmappedUpload) as kept:
        api.datasets.upload_dataset(_qa_csv(tmp_path), "qa.csv", "sft")
    problem = "\n".join(kept.value.problems)
    assert "“Column mapping”" in problem and "e.g. prompt=question, completion=answer" in problem
    assert "dataset.columns" not in problem and "qa.csv: kept" in kept.value.summary
    assert (paths.uploads("local") / kept.value.upload_id).is_file()
    # Filling the mapping afterwards: the kept file checks again, no second upload.
    mapping = {"prompt": "question", "completion": "answer"}
    assert api.datasets.check_upload(kept.value.upload_id, "sft", mapping).startswith(
        "qa.csv: 6 rows, prompt-completion"
    )
    with pytest.raises(Exception, match="“Column mapping”: column 'q' is not in the dataset"):
        api.datasets.check_upload(kept.value.upload_id, "sft", {"prompt": "q", "completion": "answer"})
    # The mapping first: kept at once.
    upload_id, summary = api.datasets.upload_dataset(_qa_csv(tmp_path), "qa.csv", "sft", columns=mapping)
    assert summary.startswith("qa.csv: 6 rows, prompt-completion") and upload_id != kept.value.upload_id
    spec = form_to_spec(
        {
            "dataset_source": "upload",
            "upload_id": upload_id,
            "column_map": "prompt=question, completion=answer",
            "max_steps": 1,
            "holdout_rows": 0,
        }
    )  # (the arith recipe's 256 held-out rows would leave none of the 6)
    api.jobs.check(spec)  # the pre-flight reads it with the mapping


def test_a_one_row_upload_and_its_preview_say_1_row(paths, tmp_path):
    """Issue 24's polish: "1 rows"."""
    path = tmp_path / "one.jsonl"
    path.write_text('{"prompt": "q", "completion": "a"}\n')
    api = StudioAPI(paths.root, scheduler="none")
    _, summary = api.datasets.upload_dataset(path, "one.jsonl", "sft")
    assert summary.startswith("one.jsonl: 1 row, prompt-completion"), summary


def test_the_bench_scores_against_the_datasets_first_row(paths):
    api = StudioAPI(paths.root, scheduler="none")
    # As the bench asks (components/train_tab.py): batch size "auto", which any group size divides.
    row = api.datasets.first_row(form_to_spec({"method": "grpo", "builtin_dataset": "math-demo", "batch_size": None}))
    assert row["solution"] == "$15$"
    scored = api.datasets.score_rewards([{"name": "accuracy"}], ["The answer is $15$", "no idea"], row)
    assert bench_table(scored)["data"][0][1:3] == ["1.000", "1.000"]


def test_one_preference_per_turn_the_last_pick_wins_and_exports_go_to_downloads(paths):
    from components.chat.views import rows_text

    api = StudioAPI(paths.root, scheduler="none")
    log = api.chat.preference_log(None)
    prompt = [{"role": "user", "content": "Hi"}]
    assert log.record(prompt, "base answer", "tuned answer", "job-1")["replaced"] is False
    assert log.record(prompt, "tuned answer", "base answer", "job-1")["replaced"] is True
    assert [r["chosen"][0]["content"] for r in log.rows()] == ["tuned answer"]
    assert log.record(prompt, "another", "tuned answer", "job-1")["replaced"] is False  # a regenerated turn
    assert len(log.rows()) == 2
    first = api.chat.export_preferences(None)
    second = api.chat.export_preferences(None)
    assert second.parent.parent == paths.downloads and second.name == "local-dpo.jsonl"
    assert not first.exists() and len(second.read_text().splitlines()) == 2
    assert (rows_text(1), rows_text(2)) == ("1 preference row", "2 preference rows")


# --- issue 14: one declaration bound to spec paths ------------------------------------------------------------------
def test_the_forms_defaults_are_the_specs_defaults():
    from backend.api import JobSpec
    from components.train.fields import DEFAULTS, FORM_FIELDS, get_path
    from components.train.form import spec_to_form
    from components.train.recipes import FIELDS, recipe_values

    default = JobSpec()
    # Where the old widgets disagreed with the spec, the spec won.
    assert (DEFAULTS["max_length"], DEFAULTS["rollout_max_completion_length"]) == (
        default.training.max_length,
        default.rollout.max_completion_length,
    )
    as_form = spec_to_form(default)
    # The plain defaults (any model's) differ from the spec's on purpose in three fields only: the step count (a quick
    # first try; the spec trains an epoch), the model (the arithmetic model runs anywhere; the spec's default
    # depends on the network: the random demo model offline, as in tests) and the batch (empty, auto: the spec's 2
    # is no multiple of GRPO's group of 4).
    plain_differ = {name for name in FORM_FIELDS if DEFAULTS[name] != as_form[name]}
    assert plain_differ == {"base_model", "max_steps", "batch_size"} and DEFAULTS["batch_size"] is None
    assert DEFAULTS["base_model"] == "builtin:tiny-qwen3-arith" and as_form["base_model"] == "builtin:tiny-qwen3"
    assert DEFAULTS["max_steps"] == 30 and get_path(default, "training.max_steps") is None
    # The form starts on those, under the arithmetic model's SFT recipe: the dataset and the settings measured to
    # make it learn (the spec's learning rate 2e-4 and 30 steps teach it nothing).
    start = recipe_values("builtin:tiny-qwen3-arith", "sft")
    assert set(start) == {"builtin_dataset", "max_steps", "learning_rate", "batch_size", "max_length", "holdout_rows"}
    assert FIELDS == {**DEFAULTS, **start}
    assert {name for name in FORM_FIELDS if FIELDS[name] != as_form[name]} == plain_differ | set(start)


def test_labels_help_and_choices_come_from_the_declaration_and_the_spec():
    from backend.api import methods, spec_field
    from components.train.form import FORM_FIELDS

    assert FORM_FIELDS["max_length"].label == "Max length"
    assert FORM_FIELDS["max_length"].info == spec_field("training.max_length").help
    assert FORM_FIELDS["method"].spec.choices == tuple(methods())  # a new Method value is a new choice
    loss_types = FORM_FIELDS["dpo_loss_type"].spec.choices
    assert loss_types[0] == "sigmoid" and "ipo" in loss_types
    assert FORM_FIELDS["sft_packing"].spec.kind == "bool" and FORM_FIELDS["sft_packing"].spec.optional
    shown_for = [f.methods for f in map(FORM_FIELDS.get, ("dpo_beta", "rollout_temperature", "env_name", "max_steps"))]
    assert shown_for == [("dpo",), ONLINE, ("grpo",), None]


def test_only_the_picked_methods_settings_are_sent():
    spec = form_to_spec(
        {"method": "dpo", "dpo_beta": 0.3, "rollout_temperature": "not read for DPO", "sft_completion_only": False}
    )
    assert spec["dpo"] == {"beta": 0.3, "loss_type": "sigmoid"} and not {"sft", "grpo", "rollout"} & set(spec)


def test_a_method_without_declared_fields_gets_them_from_its_spec_part():
    from components.train.fields import generated_fields

    generated = {f.name: f for f in generated_fields({"sft", "grpo", None})}  # as if DPO had no declaration
    assert {"dpo_beta", "dpo_loss_type"} <= set(generated) and not any(n.startswith("grpo") for n in generated)
    assert generated["dpo_beta"].methods == ("dpo",) and generated["dpo_beta"].label == "Beta"
    assert generated["dpo_loss_type"].spec.choices[0] == "sigmoid"
    # Text settings too: distillation's teacher (a job id or a model name) is typed in a box.
    teacher = {f.name: f for f in generated_fields({None})}["distillation_teacher"]
    assert teacher.methods == ("distillation",) and teacher.spec.kind == "text"
    sent = form_to_spec({"method": "distillation", "distillation_teacher": " 20261205-154336-934a11 "})
    assert sent["distillation"]["teacher"] == "20261205-154336-934a11"


def test_values_are_set_and_read_by_dotted_path():
    from components.train.form import get_path, set_path

    spec: dict = {}
    set_path(spec, "training.max_steps", 3)
    set_path(spec, "training.learning_rate", 0.1)
    assert spec == {"training": {"max_steps": 3, "learning_rate": 0.1}}
    assert get_path(parse_spec(tiny_spec(training={"max_steps": 3})), "training.max_steps") == 3
    assert form_to_spec({"batch_size": None})["training"]["batch_size"] == "auto"
    assert form_to_spec({"holdout_rows": 0}).get("eval") is None and form_to_spec({"max_rows": 0})["dataset"] == {
        "source": "builtin",
        "name": "arith-sft",
    }
    with pytest.raises(FormError, match="training.max_length: must be a whole number"):
        form_to_spec({"max_length": 1.5})


# --- issue 19: the arithmetic model's demo recipes fill the form ---------------------------------------------------
ARITH, TINY, QWEN = "builtin:tiny-qwen3-arith", "builtin:tiny-qwen3", "Qwen/Qwen2.5-0.5B-Instruct"


def _moved(values: dict, before: tuple[str, str], after: tuple[str, str]) -> dict:
    """The form after going from ``before`` to ``after`` by components/train_form.py's rule (the handlers' rule)."""
    from components.train.recipes import recipe_updates

    return {**values, **recipe_updates(values, before, after)}


def test_a_method_change_on_the_arith_model_takes_that_methods_recipe():
    from components.train.fields import DEFAULTS

    dpo = _moved(FIELDS, (ARITH, "sft"), (ARITH, "dpo"))
    assert (dpo["builtin_dataset"], dpo["max_steps"], dpo["learning_rate"], dpo["batch_size"]) == (
        "arith-preferences",
        60,
        5e-4,
        8,
    )
    grpo = _moved(dpo, (ARITH, "dpo"), (ARITH, "grpo"))
    assert (
        grpo["builtin_dataset"],
        grpo["rollout_num_generations"],
        grpo["rollout_max_completion_length"],
        grpo["rollout_temperature"],
        grpo["max_steps"],
        grpo["batch_size"],
        grpo["lora_dropout"],
    ) == ("arith-prompts", 8, 24, 0.7, 300, 16, 0.0)
    parse_spec(form_to_spec(grpo))  # a valid job: 16 per step holds two groups of 8
    kto = _moved(grpo, (ARITH, "grpo"), (ARITH, "kto"))
    assert (kto["builtin_dataset"], kto["max_steps"], kto["holdout_rows"]) == ("arith-feedback", 150, 256)
    assert (kto["kto_beta"], kto["kto_desirable_weight"]) == (0.5, 2.0)  # the recipe that raises accuracy
    # GRPO's sampling is back to its plain defaults once the method has no use for the recipe's.
    assert (kto["rollout_num_generations"], kto["rollout_temperature"]) == (DEFAULTS["rollout_num_generations"], 1.0)
    assert kto["lora_dropout"] == DEFAULTS["lora_dropout"] == 0.05
    # And back to SFT: the very form a fresh page shows.
    assert _moved(kto, (ARITH, "kto"), (ARITH, "sft")) == FIELDS


@pytest.mark.parametrize("other", [QWEN, TINY])
def test_another_model_puts_the_recipe_fields_back_to_the_plain_defaults_and_back_again(other):
    from components.train.fields import DEFAULTS

    plain = _moved(FIELDS, (ARITH, "sft"), (other, "sft"))
    assert plain == {**DEFAULTS, "base_model": FIELDS["base_model"]}  # (the model is the picker's own value)
    assert plain["builtin_dataset"] == "chat-demo" and plain["learning_rate"] == 2e-4 and plain["max_steps"] == 30
    # Methods on another model: today's behaviour, the method's first built-in dataset and the plain settings.
    dpo = _moved(plain, (other, "sft"), (other, "dpo"))
    assert dpo["builtin_dataset"] == "preferences-demo" and dpo["batch_size"] is None  # empty: auto
    # Picking the arith model again fills its recipe for the method in hand.
    again = _moved(dpo, (other, "dpo"), (ARITH, "dpo"))
    assert (again["builtin_dataset"], again["learning_rate"], again["holdout_rows"]) == ("arith-preferences", 5e-4, 128)


def test_a_value_the_user_typed_is_kept_across_models_and_methods():
    typed = {**FIELDS, "learning_rate": 1e-3, "max_steps": 7, "builtin_dataset": "echo-tools-sft"}
    qwen = _moved(typed, (ARITH, "sft"), (QWEN, "sft"))
    assert (qwen["learning_rate"], qwen["max_steps"], qwen["builtin_dataset"]) == (1e-3, 7, "echo-tools-sft")
    assert (qwen["batch_size"], qwen["max_length"], qwen["holdout_rows"]) == (None, 1024, 0)  # untouched: plain again
    dpo = _moved(qwen, (QWEN, "sft"), (ARITH, "dpo"))
    # A picked dataset that does not suit the new method gives way to the first choice: the recipe's.
    assert (dpo["learning_rate"], dpo["max_steps"], dpo["builtin_dataset"], dpo["batch_size"]) == (
        1e-3,
        7,
        "arith-preferences",
        8,
    )
    # A field the user set to the plain default counts as untouched (nothing tells the two apart).
    assert _moved({**FIELDS, "max_steps": 30}, (ARITH, "sft"), (ARITH, "kto"))["max_steps"] == 150


def test_the_arith_models_dataset_comes_first_for_each_method():
    from backend.api import builtin_dataset_choices, demo_recipe, methods
    from components.train.recipes import dataset_choices, pick_dataset

    for method in methods():
        choices = dataset_choices(ARITH, method)
        assert choices[0] == demo_recipe(ARITH, method)["dataset.name"]
        assert sorted(choices) == sorted(builtin_dataset_choices(method))
        assert dataset_choices(QWEN, method) == builtin_dataset_choices(method)
        # The method's change event (pick_dataset) and the rule above agree on the dataset.
        for before in methods():
            values = {**FIELDS, **_moved(FIELDS, (ARITH, "sft"), (ARITH, before))}
            rule = _moved(values, (ARITH, before), (ARITH, method))["builtin_dataset"]
            assert rule == pick_dataset(ARITH, method, values["builtin_dataset"])
    assert pick_dataset(ARITH, "grpo", "wordle-demo") == "wordle-demo"


def test_every_method_gets_its_own_settings_and_the_parts_it_reads_on_the_form():
    """The form needs no list of fields per method: each field's spec part says which methods it is for, and a method's
    own plain settings appear whether declared or generated."""
    from backend.api import JobSpec, methods, spec_field
    from backend.core.spec import field_docs
    from components.train.form import FORM_FIELDS

    paths = {path for path, _, _ in field_docs()}
    for method in methods():
        shown = {f.path for f in FORM_FIELDS.values() if f.methods is not None and method in f.methods}
        assert shown and shown <= paths, (method, shown - paths)
        own = {
            f"{method}.{name}"
            for name in JobSpec.model_fields[method].annotation.model_fields
            if spec_field(f"{method}.{name}").kind in ("bool", "int", "float") or spec_field(f"{method}.{name}").choices
        }
        assert own <= shown, (method, own - shown)
        assert any(p.startswith("rollout.") for p in shown) == (method in ONLINE)


def test_the_forms_defaults_make_a_valid_job_for_every_method_model_and_environment():
    """Issue 24: GRPO on a model without a recipe kept the form's batch of 2, which no group of 4 divides, and Queue
    refused the form's own defaults. The batch starts empty (auto: one generation group for an online method)."""
    from backend.api import methods
    from components.train.form import FIELDS

    assert FIELDS["batch_size"] == 16  # the arithmetic model's SFT recipe, as the page opens
    for model in (ARITH, TINY, QWEN):
        for method in methods():
            values = _moved(FIELDS, (ARITH, "sft"), (model, method))
            spec = parse_spec(form_to_spec({**values, "base_model": model, "method": method}))
            if model != ARITH:
                assert spec.training.batch_size == "auto", (model, method)
            if method == "grpo":  # and with an environment picked
                parse_spec(form_to_spec({**values, "base_model": model, "method": method, "env_name": "builtin:echo"}))
