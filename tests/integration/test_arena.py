"""The agent arena against a real OpenEnv server the studio did not write: OpenEnv's textarena_env
(GuessTheNumber-v0), served from the OpenEnv repository on 127.0.0.1 and reached by URL like a user's environment.

The tuned side is an adapter taught (tests/unit/chat/test_chat_tool_calls.py ``build_tool_adapter``) to answer the
episode's opening with a ``message`` tool call, so it really plays; the base model (adapter off) answers in text. Both
play on one model in memory, the same row and seed. A server killed mid-episode ends the play with a sentence, its
sessions closed and the facade still answering; a pair is its owner's alone.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from backend.api import StudioAPI
from backend.core.spec import parse_spec
from backend.core.users import hub_user
from backend.environments.adapter import tool_methods
from backend.environments.discovery import check_sessions
from backend.environments.episodes import EpisodeSettings, _render, opening_messages
from backend.environments.runtime import open_environment
from backend.jobs.store_errors import JobNotFound
from backend.models.demo import ARITH_MODEL_DIR
from backend.workflows.arena import ArenaError, episode_rows
from components.chat.arena_views import table_rows
from tests.helpers import tiny_spec
from tests.helpers.openenv_envs import served_catalog_env, start_catalog_env
from tests.unit.chat.test_chat_tool_calls import build_tool_adapter, finished_job

pytestmark = pytest.mark.slow

ENV = "textarena_env"
GUESS = '<tool_call>\n{"name": "message", "arguments": {"message": "[10]"}}\n</tool_call>'
# Two rows with the same prompt (textarena's reset ignores the row, so every opening is the one the adapter learned).
PROMPTS = ["Guess the number between 1 and 20. Use the message tool."] * 2


@pytest.fixture(scope="module")
def server():
    with served_catalog_env(ENV) as running:
        yield running


def _spec(url: str, data) -> dict:
    return tiny_spec(
        model={"name_or_path": "builtin:tiny-qwen3-arith"},
        method="grpo",
        dataset={"source": "file", "name": str(data)},
        environment={"name": url, "reward": "last", "max_tool_calling_iterations": 3, "eval_episodes": 0},
        grpo={"num_generations": 2, "max_completion_length": 160, "temperature": 0.7},
        training={"batch_size": 2},
    )


def textarena_job(api: StudioAPI, url: str, folder, owner: str = "alice") -> str:
    """A finished job of the textarena environment at ``url``, whose adapter opens every episode with a guess (taught
    on the episode's own opening, as the arena renders it: the row's prompt, the first observation, the tool)."""
    from transformers import AutoTokenizer

    data = folder / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    spec = parse_spec(_spec(url, data))
    tokenizer = AutoTokenizer.from_pretrained(ARITH_MODEL_DIR)
    with open_environment(spec, sessions=1) as environment:
        session = environment.factory()
        try:
            messages = opening_messages(session, episode_rows(spec, None)[0])
            ids = _render(tokenizer, messages, tool_methods(session), EpisodeSettings.from_spec(spec))
        finally:
            session._close()
    adapter = build_tool_adapter(folder / "adapter", steps=120, prompt=tokenizer.decode(ids), answer=GUESS)
    return finished_job(api, spec, adapter, owner=owner)


@pytest.fixture(scope="module")
def played_job(server, tmp_path_factory):
    folder = tmp_path_factory.mktemp("arena-textarena")
    api = StudioAPI(folder / "data", scheduler="none")
    try:
        yield api, textarena_job(api, server.url, folder)
    finally:
        api.close()


def _last(stream):
    states = list(stream)
    assert states and states[-1].over and all(not s.over for s in states[:-1])
    return states


def test_both_sides_play_the_real_server_by_url_and_the_pairs_are_kept(played_job, server):
    api, job_id = played_job
    alice = hub_user("alice")
    states = _last(api.arena.play(job_id, alice, episodes=2, row=0))
    final = states[-1]
    assert len(states) >= 3, "the play is streamed: the opening, then each round of model turns"
    assert final.note == "" and [p.episode for p in final.pairs] == [1, 2]
    for pair in final.pairs:
        assert (
            pair.base.seed == pair.tuned.seed
            and pair.base.messages[: pair.base.prompt_messages] == (pair.tuned.messages[: pair.tuned.prompt_messages])
        ), "both sides start from the same row, reset and seed"
        answers = [m for m in pair.tuned.turns if m["role"] == "tool"]
        assert pair.tuned.tool_calls >= 1 and answers and answers[0]["name"] == "message"
        assert "error" not in str(answers[0]["content"]).lower()[:20], answers[0]
        assert pair.tuned.steps and pair.tuned.steps[0]["message"] == pair.tuned.prompt_messages + 1
        assert pair.base.tool_calls == 0, "the base model answers in text"
    # Every session was closed: the server has all its sessions free again.
    check_sessions(server.url, 8, timeout_s=10)

    kept = api.arena.pair(job_id, 2, alice)
    assert kept["tools"][0]["function"]["name"] == "message" and kept["environment"] == server.url
    row = api.arena.prefer(job_id, 2, "tuned", alice)
    assert row["better"] == "tuned" and row["episode"] == 2 and json.loads(row["tools"])[0]["function"]["name"]
    exported = api.chat.export_preferences(alice, "episodes").read_text().splitlines()
    assert len(exported) == 1 and set(json.loads(exported[0])) == {"prompt", "chosen", "rejected", "tools"}

    # Sampled as in training: both sides of an episode draw the same random numbers, so the play repeats itself.
    again = [_last(api.arena.play(job_id, alice, row=1, sampling="training"))[-1] for _ in range(2)]
    first, second = (state.pairs[0] for state in again)
    # (the first moves: the server draws its secret number itself, so its answers, and the moves after, may differ)
    assert first.tuned.turns[0] == second.tuned.turns[0] and first.base.turns[0] == second.base.turns[0]


def test_another_user_can_neither_play_nor_open_alices_episodes(played_job):
    api, job_id = played_job
    bob = hub_user("bob")
    with pytest.raises(JobNotFound):
        api.arena.play(job_id, bob)
    with pytest.raises(JobNotFound):
        api.arena.pair(job_id, 1, bob)
    with pytest.raises(JobNotFound):
        api.arena.prefer(job_id, 1, "tuned", bob)
    with pytest.raises(ArenaError, match="episode 999 of job .* was not found"):
        api.arena.pair(job_id, 999, hub_user("alice"))
    for bad in ({"episodes": 0}, {"episodes": 33}, {"row": -1}, {"base": "other"}, {"sampling": "hot"}):
        with pytest.raises(ValueError):
            api.arena.play(job_id, hub_user("alice"), **bad)
    with pytest.raises(ArenaError, match="row 5 is past the 2 rows"):
        api.arena.play(job_id, hub_user("alice"), row=5)
    with pytest.raises(ArenaError, match="does not continue another job's adapter"):
        api.arena.play(job_id, hub_user("alice"), base="parent")


def test_a_server_killed_mid_episode_ends_the_play_with_a_sentence_and_closes_its_sessions(played_job, tmp_path):
    api, job_id = played_job
    doomed = start_catalog_env(ENV, max_sessions=4)
    try:
        job = api.jobs.get_job(job_id)
        environment = job.spec.environment.model_copy(update={"name": doomed.url})
        killed_job = finished_job(
            api, job.spec.model_copy(update={"environment": environment}), job.artifacts.adapter_dir, owner="alice"
        )
        alice = hub_user("alice")
        stream = api.arena.play(killed_job, alice, episodes=2)
        opening = next(stream)
        assert not opening.over and len(opening.pairs) == 2
        os.killpg(doomed.pid, signal.SIGKILL)  # mid-episode: both sides have reset, nobody has moved yet
        doomed.process.wait(10)
        started = time.monotonic()
        final = list(stream)[-1]
        assert time.monotonic() - started < 60, "a dead server ends the play, it does not hang it"
        assert final.over and "The environment stopped answering during 2 episode(s)" in final.note, final.note
        for pair in final.pairs:
            shown = table_rows([pair.to_dict()])[0][4]  # the episodes table's tuned column
            assert pair.tuned.error and not pair.tuned.success and shown == "environment lost"
        assert [p.episode for p in final.pairs] == [1, 2], "what was played is kept, with its end"
        assert api.arena.episodes(killed_job, alice) == [1, 2]
        # The facade still answers, at once: a listing, and a new play that says the server is gone.
        assert killed_job in [j.id for j in api.jobs.list_jobs(user=alice)]
        again = list(api.arena.play(killed_job, alice))[-1]
        assert again.over and again.note.startswith("The environment could not be reached"), again.note
    finally:
        doomed.stop()


def test_a_staged_job_plays_its_parents_environment_with_the_parents_adapter_on_the_left(played_job, tmp_path):
    """A job that continues an environment job (its own spec names no environment) plays the parent's environment;
    its left side may be the parent's adapter, which plays (calls the tool) where the base model does not."""
    api, parent_id = played_job
    parent = api.jobs.get_job(parent_id)
    child_spec = parse_spec(
        tiny_spec(
            model={"name_or_path": "builtin:tiny-qwen3-arith", "parent_job_id": parent_id},
            dataset={"source": "builtin", "name": "arith-sft"},
        )
    )
    child = finished_job(api, child_spec, parent.artifacts.adapter_dir, owner="alice")
    alice = hub_user("alice")
    setup = api.arena.setup(child, alice)
    assert setup.environment_job_id == parent_id and setup.parent_adapter is not None
    final = list(api.arena.play(child, base="parent"))[-1]  # the trusted caller: alice's plays are rate-limited
    pair = final.pairs[0]
    assert final.base_label.startswith(f"job {parent_id}'s adapter")
    # The same adapter on both sides makes the same first move (the game's secret number is the server's own draw,
    # so what follows may differ: textarena's reset ignores the seed).
    first = [episode.turns[0] for episode in (pair.base, pair.tuned)]
    assert pair.base.tool_calls >= 1 and first[0] == first[1], first
    lone = finished_job(api, parse_spec(tiny_spec()), parent.artifacts.adapter_dir, owner="alice")  # no environment
    with pytest.raises(ArenaError, match="did not play an environment"):
        api.arena.setup(lone, alice)


def test_a_play_left_mid_episode_closes_its_sessions_and_frees_the_player(played_job, server):
    """A browser that goes away mid-episode drops the stream: its sessions close on the server and the player's
    in-flight hold is freed, so their next play starts."""
    api, job_id = played_job
    dana = hub_user("dana")
    dana_job = finished_job(
        api, api.jobs.get_job(job_id).spec, api.jobs.get_job(job_id).artifacts.adapter_dir, owner="dana"
    )
    stream = api.arena.play(dana_job, dana, episodes=4)
    assert not next(stream).over  # the opening: 8 sessions open on the server
    with pytest.raises(Exception, match="at most|capacity|sessions"):
        check_sessions(server.url, 8, timeout_s=5)
    stream.close()  # what Gradio does with a stream whose page is gone
    check_sessions(server.url, 8, timeout_s=10)  # every session was closed
    final = list(api.arena.play(dana_job, dana))[-1]  # not "you already have 1 running"
    assert final.over and final.pairs[0].episode == 1, "a play left before its end keeps nothing"


def test_pairs_that_cannot_be_kept_on_a_full_disk_are_shown_with_a_sentence_and_leave_nothing(played_job, tmp_path):
    from backend.core.paths import DataPaths
    from backend.environments.episodes import Episode
    from backend.workflows.arena import ArenaPair, ArenaPlay, arena_folder, keep_pairs
    from tests.helpers.faults import fill, tmpfs

    episode = Episode([{"role": "user", "content": "hi"}], 1, 0.0, False, True, 0, 0, 3, "done", 1)
    played = ArenaPlay("job-1", "builtin:echo", "the base model", "greedy", [ArenaPair(0, 0, 1, episode, episode)])
    paths = DataPaths(tmp_path / "data")
    folder = arena_folder(paths, "alice", "job-1")
    with tmpfs(folder, size="1m"):
        filler = fill(folder)
        kept = keep_pairs(paths, "alice", played)
        assert "These episodes were not kept (no link)" in kept.note and "full" in kept.note, kept.note
        assert kept.pairs[0].episode is None
        assert sorted(p.name for p in folder.iterdir()) == ["filler"], "no half-written pair is left"
        filler.unlink()
        assert keep_pairs(paths, "alice", played).pairs[0].episode == 1
