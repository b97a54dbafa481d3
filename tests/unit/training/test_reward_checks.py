"""Reward models a spec names, checked without loading them into the app: the cap on how many, the Hub's metadata
read before anything is downloaded (a missing id, an unreachable Hub, weights too large for the machine), and the
checks that need the models run in a child with limits whose failures are sentences."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.core.spec import RewardSpec, SpecError, parse_spec
from backend.core.users import User
from backend.platform import hub_status
from backend.training.named_jobs import reward_model_sources
from backend.training.reward_checks import flat_group_warnings, reward_model_hub_problems
from backend.training.reward_models import RewardModelSource
from tests.helpers import tiny_spec
from tests.helpers.hub_server import FakeCommit, FakeHub

GB = 2**30
ALICE = User("alice")


def _grpo(*rewards: dict, **parts) -> dict:
    return tiny_spec(
        method="grpo",
        dataset={"source": "builtin", "name": "math-demo"},
        rollout={"num_generations": 2, "max_completion_length": 8, "rewards": list(rewards)},
        training={"max_steps": 1, "batch_size": 2, "max_length": 64},
        **parts,
    )


def _rewards(*names: str) -> list[RewardSpec]:
    return [RewardSpec(model=name) for name in names]


# --- the cap, where the spec is validated -------------------------------------------------------------------------


def test_at_most_four_different_reward_models_per_spec():
    with pytest.raises(SpecError) as said:
        parse_spec(_grpo(*({"model": f"owner/rm-{i}"} for i in range(5))))
    assert said.value.problems == [
        "rollout.rewards: at most 4 different reward models per job (you named 5): each is loaded beside the model "
        "being trained; keep the ones that matter, or give one model a larger weight"
    ]
    four_named_twice = [{"model": f"owner/rm-{i % 4}", "weight": 0.5} for i in range(8)]
    assert len(parse_spec(_grpo(*four_named_twice)).rollout.rewards) == 8
    with pytest.raises(SpecError, match=r"rollout.rewards: at most 32 rewards per job \(you gave 33\)"):
        parse_spec(_grpo(*({"name": "length", "target_length": i + 1} for i in range(33))))


def test_the_bench_loads_at_most_four_reward_models_too():
    from backend.methods.rewards.bench import bench_input_problems

    problems = bench_input_problems([{"model": f"owner/rm-{i}"} for i in range(5)], ["a"], None)
    assert problems == ["rewards: the bench loads at most 4 different reward models at once; you named 5, remove some"]


# --- the Hub's metadata, before anything is downloaded --------------------------------------------------------------


@pytest.fixture()
def hub(monkeypatch):
    from huggingface_hub import constants

    with FakeHub("hf_alices_token", user="alice") as server:
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # read at import; conftest set it for this process
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setitem(hub_status._state, "probed_at", 0.0)  # ask this endpoint afresh
        yield server


def _sized(*files: tuple[str, int]) -> dict:
    return {"siblings": [{"rfilename": name, "size": size} for name, size in files]}


def test_a_reward_models_size_is_read_from_the_hub_and_checked_against_the_machine(hub):
    hub.models.update(
        {
            "big/rm": _sized(
                ("config.json", 700), ("model-00001.safetensors", 30 * GB), ("model-00002.safetensors", GB)
            ),
            "mid/rm": _sized(("config.json", 700), ("model.safetensors", 5 * GB), ("pytorch_model.bin", 10 * GB)),
            "also-mid/rm": _sized(("pytorch_model.bin", 5 * GB)),
            "no/weights": _sized(("config.json", 700), ("README.md", 10)),
        }
    )
    said = reward_model_hub_problems(_rewards("mid/rm", "big/rm", "no/weights", "nobody/rm"), False, 8 * GB)
    assert said == [
        "rollout.rewards[1].model: 'big/rm' has 31.0 GB of weights, more than the 8.0 GB a job may use on this "
        "machine; pick a smaller reward model",
        "rollout.rewards[2].model: 'no/weights' has no model weights on the Hub (no .safetensors or .bin files); give "
        "the id of a sequence-classification model",
        "rollout.rewards[3].model: 'nobody/rm' could not be found on the Hub; check the id (a private or gated model "
        "needs a sign-in with access to it)",
    ]
    # Each fits alone (safetensors counted, not the .bin beside them), not together.
    assert reward_model_hub_problems(_rewards("mid/rm", "also-mid/rm", "mid/rm"), False, 8 * GB) == [
        "rollout.rewards: the reward models' weights come to 10.0 GB together, more than the 8.0 GB a job may use on "
        "this machine; name fewer or smaller ones"
    ]
    assert reward_model_hub_problems(_rewards("mid/rm"), "hf_alices_token", 8 * GB) == []
    assert hub.requests_to("resolve") == [], "nothing was downloaded"
    assert all("blobs=true" in r.query.lower() for r in hub.requests_to("model_info")), "sizes come from files_metadata"


def test_a_repos_own_file_sizes_come_from_the_hub(hub):
    repo = hub.add_repo("alice/rm")
    weights = {"config.json": b"{}", "model.safetensors": b"x" * (3 * 2**20)}
    repo.commits.append(FakeCommit("1" * 40, "rm", "", weights))
    assert reward_model_hub_problems(_rewards("alice/rm"), False, 2 * 2**20) == [
        "rollout.rewards[0].model: 'alice/rm' has 3 MB of weights, more than the 2 MB a job may use on this machine; "
        "pick a smaller reward model"
    ]
    assert reward_model_hub_problems(_rewards("alice/rm"), False, 4 * 2**20) == []


def test_a_hub_that_cannot_be_reached_or_fails_is_a_sentence_not_an_error(hub):
    hub.fail(500, on="model_info")
    assert reward_model_hub_problems(_rewards("some/rm"), False, 8 * GB) == [
        "rollout.rewards[0].model: 'some/rm': the Hub could not be asked about it (HTTP 500); try again in a moment"
    ]
    hub.stop()
    hub_status._state["probed_at"] = 0.0
    assert reward_model_hub_problems(_rewards("some/rm", "job-less/rm"), False, 8 * GB) == [
        f"rollout.rewards[{i}].model: '{name}' is not in the local cache and the Hub is not reachable from this "
        "machine; try again once the Hub can be reached, or use one of your finished reward jobs (its id)"
        for i, name in enumerate(("some/rm", "job-less/rm"))
    ]


def test_a_submit_naming_a_missing_hub_reward_model_gets_the_sentence_and_stores_nothing(hub, paths, store):
    from backend.api import StudioAPI

    api = StudioAPI(paths.root, scheduler="none")
    try:
        with pytest.raises(SpecError) as said:
            api.jobs.submit(_grpo({"name": "accuracy"}, {"model": "nobody/rm"}), user=ALICE)
    finally:
        api.close()
    assert said.value.problems == [
        "rollout.rewards[1].model: 'nobody/rm' could not be found on the Hub; check the id (a private or gated model "
        "needs a sign-in with access to it)"
    ]
    assert store.list() == []


# --- what needs the models: a child with limits ----------------------------------------------------------------------


@pytest.mark.slow
def test_a_reward_model_that_cannot_be_loaded_is_refused_from_the_child(hub, paths):
    repo = hub.add_repo("alice/not-a-model")
    repo.commits.append(FakeCommit("2" * 40, "junk", "", {"config.json": b"{}", "model.safetensors": b"\0" * 64}))
    spec = parse_spec(_grpo({"model": "alice/not-a-model"}))
    with pytest.raises(SpecError) as said:
        flat_group_warnings(spec, reward_model_sources(None, spec), paths.models, None, False)
    (problem,) = said.value.problems
    assert problem.startswith("rollout.rewards[0].model: 'alice/not-a-model' could not be loaded as a reward model (")
    assert str(paths.root) not in problem and "/hub/models--" not in problem, problem


@pytest.mark.slow
def test_a_check_over_its_memory_is_a_warning_and_this_process_never_loads_a_model(paths, tmp_path, monkeypatch):
    from backend.methods.rewards import model_reward
    from backend.models import inference
    from tests.integration.test_reward_model_checks import _build_reward_model

    def never_here(*args, **kwargs):
        raise AssertionError("a model was loaded in the app's process")

    monkeypatch.setattr(model_reward, "load_model_rewards", never_here)
    monkeypatch.setattr(inference, "load_for_inference", never_here)
    folder = tmp_path / "wide-rm"
    _build_reward_model(folder, paths.models)  # about 190 MB of weights
    monkeypatch.setenv("STUDIO_MODEL_CHECK_MEMORY_MB", "256")
    spec = parse_spec(_grpo({"model": str(folder)}))  # a folder: a trusted caller's (no Hub lookup, no size)
    said = flat_group_warnings(spec, reward_model_sources(None, spec), paths.models, None)
    assert said == [
        "rollout.rewards: pre-flight could not check whether the reward models score a group of completions "
        "differently (it needs more than 256 MB of memory); the job can run without that check, and its reward "
        "curves will tell"
    ]


@pytest.mark.slow
def test_models_too_large_for_the_check_are_not_downloaded_for_it(hub, paths, monkeypatch):
    hub.models["big/rm"] = _sized(("model.safetensors", 40 * GB))
    monkeypatch.setenv("STUDIO_MODEL_CHECK_MEMORY_MB", "1024")
    spec = parse_spec(_grpo({"model": "big/rm"}))
    said = flat_group_warnings(spec, reward_model_sources(None, spec), paths.models, None, False)
    assert said == [
        "rollout.rewards: pre-flight could not check whether the reward models score a group of completions "
        "differently (the models need about 80.0 GB to load, more than the 1.0 GB this check may use "
        "(STUDIO_MODEL_CHECK_MEMORY_MB)); the job can run without that check, and its reward curves will tell"
    ]
    assert hub.requests_to("resolve") == [], "nothing was downloaded"


def test_a_users_second_model_check_at_once_is_refused_with_a_sentence(paths):
    from backend.api import StudioAPI
    from backend.platform.limits import Busy

    api = StudioAPI(paths.root, scheduler="none")
    try:
        release = api.core.model_checks.hold("alice")
        with pytest.raises(Busy) as said, api.core.model_check(ALICE):
            pass
        release()
        with api.core.model_check(ALICE), api.core.model_check(User("bob")):
            assert api.core.model_checks.in_flight() == 2
    finally:
        api.close()
    assert said.value.problems == [
        "reward model checks: you already have 1 running, the most one person may; wait for one to finish, then try "
        "again"
    ]


def test_nothing_crosses_but_json(monkeypatch, paths):
    """The child gets the request on stdin and answers one JSON line; what it prints around it is ignored."""
    import subprocess

    from backend.training import reward_checks

    seen = {}

    def fake_run(argv, **kwargs):
        seen.update(argv=argv, **kwargs)
        return subprocess.CompletedProcess(argv, 0, 'Loading...\n["ok", ["a warning"]]\n', "")

    monkeypatch.setattr(reward_checks.subprocess, "run", fake_run)
    spec = parse_spec(_grpo({"model": "owner/rm"}))
    source = RewardModelSource(spec.model.model_copy(update={"name_or_path": "owner/rm"}), Path("/x/adapter"), 64)
    assert flat_group_warnings(spec, {"owner/rm": source}, paths.models, None, "hf_users_token") == ["a warning"]
    assert seen["argv"][1:] == ["-m", "backend.training.reward_checks"]
    import json

    request = json.loads(seen["input"])
    assert request["sources"]["owner/rm"] == {
        "model": source.model.model_dump(mode="json"),
        "adapter": "/x/adapter",
        "max_length": 64,
    }
    assert seen["env"]["HF_TOKEN"] == "hf_users_token" and seen["env"]["CUDA_VISIBLE_DEVICES"] == ""
