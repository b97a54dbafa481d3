"""Conformance of the studio's OpenEnv adapter with real environments of the OpenEnv catalogue.

Eight environments of https://github.com/meta-pytorch/OpenEnv (``envs/``), taken from a local git repository of it at
test time (``OPENENV_REPO``, see tests/helpers/openenv_envs.py; without one the module skips), are served on 127.0.0.1
once per module, side by side, each with ``SESSIONS`` sessions. Everything goes through what a GRPO job uses:
``describe`` and ``environment_class`` (the class TRL instantiates), its tool methods, ``check_sessions``,
``probe_rewards`` and the observation text. For each environment: what the model is offered (kind, tools, arguments,
enum values), an invalid call refused with a sentence, a valid call read as text, the reward, the end of an episode, a
slow step, a killed server and the session capacity.

Only the servers of the selected tests start (``-k textarena`` starts one). The kill tests come last and kill every
server; a test that runs after one of them (in another order) gets its server started again.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from transformers.utils import get_json_schema

from backend.environments.adapter import OpenEnvEpisode, environment_class, tool_methods
from backend.environments.connection import EnvironmentActionError, EnvironmentUnavailable, probe_capacity
from backend.environments.discovery import EnvironmentInfo, check_sessions, describe
from backend.environments.launcher import EnvironmentStartError, RunningEnvironment
from backend.environments.observations import MAX_FIELD_CHARS
from backend.environments.probe import probe_rewards
from tests.helpers.openenv_envs import CATALOG_ENVS, CHECKOUT_MISSING, catalog_env, skip_reason, start_catalog_env

pytestmark = pytest.mark.slow

SESSIONS = 3


@dataclass(frozen=True)
class Expected:
    """What the studio must make of one environment."""

    kind: str
    tools: dict[str, tuple[str, ...]]  # tool -> its arguments, as the model is offered them
    refusal: str  # a regex the refusal of the environment's invalid call (CatalogEnv.invalid) must match
    reads: str  # a regex the text after its valid call (CatalogEnv.valid) must match
    rewards: bool  # whether its answers carry a reward


EXPECTED: dict[str, Expected] = {
    "echo_env": Expected(
        "mcp",
        {"echo_message": ("message",), "echo_with_length": ("message",)},
        r"invalid arguments for echo_message: message: 5 is not of type 'string'",
        r"^hi$",
        False,
    ),
    "connect4_env": Expected(
        "typed",
        {"column": ("column",)},
        r"invalid arguments for column: column: 'three' is not of type 'integer'",
        r"board:\n(0 0 0 0 0 0 0\n){5}0 0 0 1 0 0 0\n",
        True,
    ),
    "maze_env": Expected(
        "typed",
        {"maze": ("action",)},
        r"invalid arguments for maze: action: 'up' is not of type 'integer'",
        r"current_position: \[\d, \d\]",
        True,
    ),
    "grid_world_env": Expected(
        "typed",
        {"grid_world": ("action",)},
        r"invalid arguments for grid_world: action: 'NORTH' is not one of "
        r"\['UP', 'DOWN', 'LEFT', 'RIGHT'\]",
        r"message: ",
        True,
    ),
    "reasoning_gym_env": Expected(
        "typed",
        {"answer": ("answer",)},
        r"invalid arguments for answer: arguments: 'answer' is a required property",
        r"correct_answer: \S+",
        True,
    ),
    "textarena_env": Expected(
        "typed",
        {"message": ("message",)},
        r"invalid arguments for message: message: 3 is not of type 'string'",
        r"\[Player\] \[10\]",
        True,
    ),
    "coding_env": Expected(
        "typed",
        {"code": ("code",)},
        r"invalid arguments for code: code: 42 is not of type 'string'",
        r"stdout:\n42\n",
        True,
    ),
    "repl_env": Expected(
        "typed",
        {"repl": ("code", "is_final", "final_answer")},
        r"invalid arguments for repl: is_final: 'yes' is not of type 'boolean'",
        r'"stdout": "42',
        True,
    ),
}
NAMES = list(EXPECTED)


class Catalog:
    """The module's servers; one found dead (killed by a test) is started again when a test asks for it."""

    def __init__(self) -> None:
        self.servers: dict[str, RunningEnvironment] = {}
        self.failed: dict[str, str] = {}
        self._infos: dict[str, EnvironmentInfo] = {}

    def start_all(self, names: list[str]) -> None:
        for name in names:
            if skip_reason(name) is None:
                self.servers[name] = start_catalog_env(name, max_sessions=SESSIONS, wait=False)
        for name, server in list(self.servers.items()):
            try:
                server.wait_until_ready(timeout_s=240)
            except EnvironmentStartError as exc:  # that environment's tests fail with its log; the others run
                self.failed[name] = str(exc)
                del self.servers[name]

    def server(self, name: str) -> RunningEnvironment:
        reason = skip_reason(name)
        if reason:
            pytest.skip(reason)
        if name in self.failed:
            pytest.fail(self.failed[name])
        server = self.servers.get(name)
        if server is None or not server.is_running():  # not started with the others, or killed by a test
            if server is not None:
                server.stop()
            server = self.servers[name] = start_catalog_env(name, max_sessions=SESSIONS, timeout_s=240)
            self._infos.pop(name, None)
        return server

    def info(self, name: str) -> EnvironmentInfo:
        server = self.server(name)
        if name not in self._infos:
            self._infos[name] = describe(server.url)
        return self._infos[name]

    def stop_all(self) -> None:
        for server in self.servers.values():
            server.stop()


@pytest.fixture(scope="module")
def catalog(request) -> Iterator[Catalog]:
    """The servers of every environment a selected test of this module names (its ``name`` parameter)."""
    if skip_reason(NAMES[0]) == CHECKOUT_MISSING:
        pytest.skip(CHECKOUT_MISSING)
    wanted = {
        item.callspec.params["name"]
        for item in request.session.items
        if item.module is request.module and "name" in getattr(getattr(item, "callspec", None), "params", {})
    }
    servers = Catalog()
    try:
        servers.start_all([name for name in NAMES if name in wanted])
        yield servers
    finally:
        servers.stop_all()


OpenEpisode = Callable[..., OpenEnvEpisode]


@pytest.fixture()
def open_episode(catalog) -> Iterator[OpenEpisode]:
    """``open_episode(name, timeout_s=...)`` -> a fresh instance, as TRL builds one; all closed after the test."""
    opened: list[OpenEnvEpisode] = []

    def make(name: str, timeout_s: float = 30.0) -> OpenEnvEpisode:
        environment = environment_class(catalog.info(name), timeout_s=timeout_s)()
        opened.append(environment)
        return environment

    yield make
    for environment in opened:
        environment._close()


def _call(environment: OpenEnvEpisode, call: tuple[str | None, dict]) -> str:
    tool, arguments = call
    return getattr(environment, tool or environment.info.tools[0].name)(**arguments)


def _readable(text: str) -> None:
    """Text a model can read: not empty, not the wire's JSON, and short (within two fields' cap)."""
    assert text.strip(), "empty observation"
    with pytest.raises(ValueError):
        json.loads(text)
    assert not re.search(r'"(observation|done|reward)":', text), f"the wire's JSON shows through:\n{text}"
    assert len(text) <= 2 * MAX_FIELD_CHARS, f"{len(text)} characters:\n{text}"


def test_the_table_covers_the_catalogue():
    assert set(EXPECTED) == set(CATALOG_ENVS)
    for name, env in CATALOG_ENVS.items():
        for tool, _ in (env.valid, env.invalid):
            assert tool is None or tool in EXPECTED[name].tools


# --- what the model is offered ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_discovery_offers_the_tools_and_arguments(catalog, open_episode, name):
    expected = EXPECTED[name]
    info = catalog.info(name)
    assert info.kind == expected.kind
    assert {tool.name: tuple(tool.parameters) for tool in info.tools} == expected.tools
    environment = open_episode(name)
    methods = tool_methods(environment)
    assert sorted(method.__name__ for method in methods) == sorted(expected.tools)  # never reset/get_reward/step
    for method in methods:
        function = get_json_schema(method)["function"]  # what TRL puts in the chat template
        assert function["description"].strip()
        assert set(function["parameters"]["properties"]) == set(expected.tools[method.__name__])
        assert set(inspect.signature(method).parameters) == set(expected.tools[method.__name__])


@pytest.mark.parametrize("name", ["grid_world_env"])
def test_a_str_enum_action_shows_its_values_to_the_model(open_episode, name):
    """grid_world_env's action is a ``str`` Enum (``MoveAction``): Pydantic writes it as a ``$ref`` into ``$defs``."""
    environment = open_episode(name)
    function = get_json_schema(environment.grid_world)["function"]
    action = function["parameters"]["properties"]["action"]
    assert action["type"] == "string" and action["enum"] == ["UP", "DOWN", "LEFT", "RIGHT"]
    assert "One of: UP, DOWN, LEFT, RIGHT." in environment.grid_world.__doc__
    assert function["parameters"]["required"] == ["action"]


# --- one call of each kind --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_an_invalid_call_is_refused_with_a_sentence_naming_the_problem(open_episode, name):
    environment = open_episode(name)
    environment.reset()
    with pytest.raises(EnvironmentActionError, match=EXPECTED[name].refusal):
        _call(environment, catalog_env(name).invalid)
    # Refused before the server saw it: the episode goes on, and a valid call is answered.
    assert not environment.done and environment.actions == 0
    assert re.search(EXPECTED[name].reads, _call(environment, catalog_env(name).valid))


@pytest.mark.parametrize("name", NAMES)
def test_a_valid_call_reads_as_text_with_its_reward(open_episode, name):
    environment = open_episode(name)
    opening = environment.reset()
    assert opening and opening.startswith("\n\n") and opening.strip()
    with pytest.raises(ValueError):
        json.loads(opening)
    text = _call(environment, catalog_env(name).valid)
    _readable(text)
    assert re.search(EXPECTED[name].reads, text), text
    assert environment.actions == 1
    if EXPECTED[name].rewards:
        assert len(environment.rewards) == 1 and isinstance(environment.rewards[0], float)
        assert f"reward: {environment.rewards[0]:g}" in text
    else:
        assert environment.rewards == [] and "reward" not in text
    assert isinstance(environment.get_reward(), float)


@pytest.mark.parametrize("name", NAMES)
def test_the_reward_probe_tells_rewarding_environments_from_silent_ones(catalog, name):
    probe = probe_rewards(catalog.info(name))  # as the pre-flight runs it
    assert probe.actions > 0
    if EXPECTED[name].rewards:
        assert probe.rewarded > 0 and probe.warning(name) is None
    else:
        assert probe.rewarded == 0
        assert f"{name} gave no reward for any of {probe.actions} random valid actions" in probe.warning(name)


@pytest.mark.parametrize("name", ["coding_env"])
def test_a_huge_output_is_capped(open_episode, name):
    environment = open_episode(name)
    environment.reset()
    text = environment.code(code="print('x' * 50000)")
    assert "more characters)" in text and len(text) < MAX_FIELD_CHARS + 300, len(text)


# --- the end of an episode --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["reasoning_gym_env"])
def test_a_one_step_reasoning_gym_episode_ends_and_a_row_replays_its_question(open_episode, name):
    """One answer ends the episode. A dataset row's columns reach the server's reset: the same row gives the same
    question, which the answer shown after a wrong try then solves."""
    environment = open_episode(name)
    row = {
        "prompt": [{"role": "user", "content": "Answer."}],
        "dataset_name": "leg_counting",
        "dataset_config": {},
        "seed": 7,
        "size": 5,
    }
    question = environment.reset(**row)
    assert "legs" in question
    text = environment.answer(answer="-1")
    assert environment.done and environment.rewards == [0.0] and "The episode is over." in text
    assert environment.get_reward() == 0.0
    with pytest.raises(EnvironmentActionError, match="The episode is over; no more actions are accepted."):
        environment.answer(answer="2")
    correct = re.search(r"correct_answer: (\S+)", text).group(1)
    assert environment.reset(**row) == question
    environment.answer(answer=correct)
    assert environment.done and environment.rewards == [1.0] and environment.get_reward() == 1.0


@pytest.mark.parametrize("name", ["textarena_env"])
def test_guess_the_number_played_to_the_end_from_what_the_model_reads(open_episode, name):
    """textarena_env (GuessTheNumber-v0, 1..20): a binary search on the hints in the observation text wins, and each
    turn shows the new hint, not the game's log again."""
    environment = open_episode(name)
    assert "You are playing Guess The Number" in environment.reset()
    low, high = 1, 20
    for _ in range(6):
        guess = (low + high) // 2
        text = environment.message(message=f"[{guess}]")
        _readable(text)
        assert "You are playing Guess The Number" not in text, text  # the log is not repeated
        if environment.done:
            break
        hint = re.search(rf"\[{guess}\]\\n\[GAME\] The target number is (higher|lower)", text)
        assert hint, text
        low, high = (guess + 1, high) if hint.group(1) == "higher" else (low, guess - 1)
    assert environment.done and environment.rewards[-1] == 1.0 and "The episode is over." in text
    assert environment.get_reward() == 1.0
    with pytest.raises(EnvironmentActionError, match="The episode is over; no more actions are accepted."):
        environment.message(message="[1]")


@pytest.mark.parametrize("name", ["connect4_env"])
def test_connect4_played_to_a_win_and_an_off_board_column_ends_the_game(open_episode, name):
    """The agent plays both colours (the server has no opponent): four in column 0 wins for the first. A column off
    the board passes the schema (it has no bounds) and the server ends the game with -1."""
    environment = open_episode(name)
    environment.reset()
    for column in (0, 1, 0, 1, 0, 1, 0):
        text = environment.column(column=column)
    assert environment.done and environment.rewards[-1] == 1.0 and environment.get_reward() == 1.0
    assert "1 -1 0 0 0 0 0" in text and "The episode is over." in text
    with pytest.raises(EnvironmentActionError, match="The episode is over"):
        environment.column(column=2)
    environment.reset()
    text = environment.column(column=9)
    assert environment.done and environment.rewards == [-1.0] and environment.get_reward() == 0.0
    assert "reward: -1" in text


@pytest.mark.parametrize("name", ["repl_env"])
def test_a_repl_episode_is_scored_against_the_rows_expected_answer(open_episode, name):
    """repl_env takes the task and the expected answer from reset (dataset columns) and scores the final answer."""
    environment = open_episode(name)
    row = {"context": "six and seven", "task_prompt": "What is 6*7?", "expected_answer": "42"}
    assert "Task: What is 6*7?" in environment.reset(**row)
    assert "41" in environment.repl(code="x = 6 * 7 - 1\nprint(x)") and not environment.done
    text = environment.repl(code="print('FINAL(41)')")
    assert environment.done and environment.rewards[-1] == 0.0 and environment.get_reward() == 0.0, text
    environment.reset(**row)
    text = environment.repl(is_final=True, final_answer="42")
    assert environment.done and environment.rewards == [1.0] and environment.get_reward() == 1.0, text
    with pytest.raises(EnvironmentActionError, match="The episode is over; no more actions are accepted."):
        environment.repl(code="print(1)")


# --- a slow step ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["coding_env"])
def test_a_slow_step_in_coding_env_ends_the_episode_not_the_job(catalog, open_episode, name):
    """Model-written code slower than the environment timeout (1 s): the call fails with a sentence the model reads,
    the episode is over, its reward is read (not raised: the job goes on), the next episode starts at once, and the
    session the slow step held is given back when the step ends."""
    url = catalog.server(name).url
    environment = open_episode(name, timeout_s=1.0)
    environment.reset()
    started = time.monotonic()
    with pytest.raises(EnvironmentActionError, match="did not answer within 1 s; the episode is over"):
        environment.code(code="import time\ntime.sleep(6)\nprint('late')")
    assert time.monotonic() - started < 4.5  # the timeout plus the socket's 2 s close, not the step's 6 s
    assert environment.done and environment.failed
    assert environment.get_reward() == 0.0
    with pytest.raises(EnvironmentActionError, match=r"The episode is over \(no answer within 1 s\)"):
        environment.code(code="print(1)")
    assert environment.reset() is not None
    assert "42" in environment.code(code="print(6 * 7)") and not environment.done
    environment._close()
    deadline = time.monotonic() + 15
    while probe_capacity(url, SESSIONS) < SESSIONS:
        assert time.monotonic() < deadline, "the slow step's session was never given back"
        time.sleep(0.5)


# --- capacity ---------------------------------------------------------------------------------------------------


def _capacity(url: str, needed: int, within_s: float = 5.0) -> int:
    """Sessions the server accepts of ``needed``, given a moment to free the ones earlier tests closed."""
    deadline = time.monotonic() + within_s
    while True:
        accepted = probe_capacity(url, needed)
        if accepted >= min(needed, SESSIONS) or time.monotonic() >= deadline:
            return accepted
        time.sleep(0.25)


@pytest.mark.parametrize("name", NAMES)
def test_each_environment_serves_the_sessions_asked_for_and_no_more(catalog, name):
    """Several of them hard-code one session (or leave openenv's default of 1); the harness raises it as a user
    would on their own copy. The studio sees exactly that many, and refuses a job that needs more, with advice."""
    url = catalog.server(name).url
    assert _capacity(url, SESSIONS + 2) == SESSIONS
    check_sessions(url, SESSIONS)
    with pytest.raises(EnvironmentUnavailable) as caught:
        check_sessions(url, SESSIONS + 1)
    message = str(caught.value)
    assert f"accepted only {SESSIONS} concurrent session(s), but this job runs {SESSIONS + 1} episodes" in message
    assert (
        "max_concurrent_envs" in message
        and f"lower the batch size x gradient accumulation to at most {SESSIONS}" in message
    )
    # Raising the number alone does not start connect4_env, grid_world_env or coding_env: openenv refuses more than
    # one session for a class that does not declare it supports them. echo, textarena and repl read a variable.
    assert "SUPPORTS_CONCURRENT_SESSIONS = True" in message and "MAX_CONCURRENT_ENVS" in message


# --- a killed server (last: these kill every server) ------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_a_killed_server_fails_the_job_with_a_sentence_without_hanging(catalog, open_episode, name):
    server = catalog.server(name)
    playing, idle = open_episode(name, timeout_s=10.0), open_episode(name, timeout_s=10.0)
    playing.reset()
    idle.reset()
    started = time.monotonic()
    os.kill(server.pid, signal.SIGKILL)
    server.process.wait(timeout=10)
    # The tool call fails as a tool call (TRL shows the model the error); the episode is over.
    with pytest.raises(EnvironmentActionError, match=r"connection to the environment .* was lost.*cannot continue"):
        _call(playing, catalog_env(name).valid)
    assert playing.done
    # What the trainer calls next stops the job with the reason, for the playing instance and an idle one alike.
    with pytest.raises(EnvironmentUnavailable, match=rf"{server.url} is unreachable"):
        playing.get_reward()
    with pytest.raises(EnvironmentUnavailable, match="stopped answering and a reconnect failed"):
        idle.reset()
    with pytest.raises(EnvironmentUnavailable, match="cannot open a session"):
        environment_class(playing.info)()
    with pytest.raises(EnvironmentUnavailable, match="cannot open a session"):
        check_sessions(server.url, 1)
    assert time.monotonic() - started < 10
