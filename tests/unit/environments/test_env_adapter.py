"""The OpenEnv adapter (backend.environments.adapter) against real servers: the built-in ones and two foreign ones.

The adapter learns everything from the server, so these tests start the servers as separate processes (once per
module, side by side), build the TRL environment class from their URLs and play whole episodes through it: tool
schemas as TRL sees them (``transformers.utils.get_json_schema``), resets fed by dataset columns, rewards, errors,
a killed or stalled server, and session capacity.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from transformers.utils import get_json_schema

from backend.core.spec import parse_spec
from backend.core.wording import progress_text
from backend.environments.adapter import OpenEnvEpisode, environment_class, tool_methods
from backend.environments.connection import (
    CapacityError,
    EnvironmentActionError,
    EnvironmentUnavailable,
    resolve_url,
    space_url,
)
from backend.environments.discovery import EnvironmentInfo, ToolSpec, check_sessions, describe
from backend.environments.launcher import (
    PROJECT_ROOT,
    RunningEnvironment,
    free_port,
    start_builtin,
    start_server_process,
)
from backend.environments.runtime import open_environment
from tests.helpers import ROOT, tiny_spec

pytestmark = pytest.mark.slow

SERVERS_DIR = ROOT / "tests" / "helpers" / "env_servers"
PROMPT = [{"role": "user", "content": "Play the game with the tools you have."}]  # TRL passes it; never sent
OpenEpisode = Callable[..., OpenEnvEpisode]


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, RunningEnvironment]]:
    """Every server the module needs, started in parallel (each spends seconds importing openenv), stopped at the end.

    ``notes_single`` allows one session (capacity tests); ``doomed`` is killed by the resilience test.
    """
    started: dict[str, RunningEnvironment] = {}
    try:
        for name in ("echo", "wordle", "arithmetic"):
            started[name] = start_builtin(name, max_sessions=8, wait=False)
        started["counter"] = start_server_process(
            [sys.executable, str(SERVERS_DIR / "counter_server.py")], name="counter", wait=False
        )
        started["counter_quirky"] = start_server_process(  # as some real environments: see the quirk tests
            [sys.executable, str(SERVERS_DIR / "counter_server.py"), "--strict-state", "--no-reward"],
            name="counter_quirky",
            wait=False,
        )
        started["notes"] = start_server_process(
            [sys.executable, str(SERVERS_DIR / "notes_mcp_server.py")], name="notes", wait=False
        )
        started["notes_single"] = start_server_process(
            [sys.executable, str(SERVERS_DIR / "notes_mcp_server.py"), "--max-sessions", "1"],
            name="notes_single",
            wait=False,
        )
        started["doomed"] = start_builtin("arithmetic", max_sessions=2, wait=False)
        for server in started.values():
            server.wait_until_ready(timeout_s=120)
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture(scope="module")
def infos(servers) -> dict[str, EnvironmentInfo]:
    return {name: describe(server.url) for name, server in servers.items()}


@pytest.fixture()
def open_episode(infos) -> Iterator[OpenEpisode]:
    """``open_episode(server, **environment_class kwargs)`` -> a fresh instance, as TRL builds one; all closed after."""
    opened: list[OpenEnvEpisode] = []

    def make(name: str, **kwargs: Any) -> OpenEnvEpisode:
        environment = environment_class(infos[name], timeout_s=kwargs.pop("timeout_s", 10.0), **kwargs)()
        opened.append(environment)
        return environment

    yield make
    for environment in opened:
        environment._close()


# --- what the model is shown ------------------------------------------------------------------------------------


def _param(json_type: str, description: str, **extra: Any) -> dict[str, Any]:
    return {"type": json_type, **extra, "description": description}


# server -> (kind, class name, {tool: (description, properties, required)}) as get_json_schema must report them
EXPECTED_TOOLS: dict[str, tuple[str, str, dict[str, tuple[str, dict[str, Any], list[str] | None]]]] = {
    "echo": (
        "mcp",
        "EchoEnv",
        {
            "echo_message": (
                "Echo a message back unchanged. The episode is won when the message equals the target text exactly.",
                {"message": _param("string", "The text to echo back, character for character.")},
                ["message"],
            ),
        },
    ),
    "wordle": (
        "typed",
        "WordleEnv",
        {
            "guess": (
                "Guess the secret word: one five-letter English word. Returns one code per letter (G/Y/X).",
                {"guess": _param("string", "Your guess: exactly five letters, e.g. 'crane'")},
                ["guess"],
            ),
        },
    ),
    "arithmetic": (
        "typed",
        "ArithmeticEnv",
        {
            "submit_answer": (
                "Submit your answer to the question: one whole number (it may be negative).",
                {"answer": _param("integer", "The result of the calculation, as a whole number")},
                ["answer"],
            ),
        },
    ),
    "counter": (
        "typed",
        "CounterEnv",
        {  # no x-tool-name and two fields: named after CounterAction
            "counter": (
                "Move the counter by step_by in the given direction.",
                {
                    "step_by": _param("integer", "How far to move the counter, 1 to 10"),
                    "direction": _param(
                        "string", "Which way to move: up or down. One of: up, down.", enum=["up", "down"]
                    ),
                },
                ["step_by"],
            ),
        },
    ),
    "notes": (
        "mcp",
        "NotesEnv",
        {
            "add_note": (
                "Save a note under a new title.",
                {
                    "title": _param("string", "A short title, different from every earlier note's."),
                    "body": _param("string", "The note's text."),
                },
                ["title", "body"],
            ),
            "count_notes": ("How many notes have been saved in this episode.", {}, None),
        },
    ),
}


@pytest.mark.parametrize("name", list(EXPECTED_TOOLS))
def test_describe_and_the_tool_schemas_trl_builds(infos, open_episode, name):
    kind, expected_class, expected_tools = EXPECTED_TOOLS[name]
    info = infos[name]
    assert info.kind == kind and info.name == name and info.description
    assert [tool.name for tool in info.tools] == list(expected_tools)

    environment = open_episode(name)
    assert type(environment).__name__ == expected_class
    methods = tool_methods(environment)
    assert sorted(m.__name__ for m in methods) == sorted(expected_tools)  # no reset / get_reward / step among them
    for method in methods:
        description, properties, required = expected_tools[method.__name__]
        function = get_json_schema(method)["function"]
        assert function["name"] == method.__name__
        assert function["description"] == description
        parameters = {"type": "object", "properties": properties}
        if required is not None:
            parameters["required"] = required
        assert function["parameters"] == parameters
        if properties:
            args = method.__doc__.split("\nArgs:\n", 1)[1]
            assert [line.split(":")[0].strip() for line in args.splitlines() if line.strip()] == list(properties)
        signature = inspect.signature(method)
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in signature.parameters.values())
        assert [p for p, v in signature.parameters.items() if v.default is inspect.Parameter.empty] == (required or [])
    if name == "counter":
        assert inspect.signature(environment.counter).parameters["direction"].default == "up"


def test_the_adapter_never_imports_the_servers_code(servers):
    """A fresh interpreter that only knows the URLs plays an episode on each foreign server (this process imports
    the built-in environments elsewhere, so the check has to happen in a clean one)."""
    script = """
import json, sys
from backend.environments.adapter import environment_class
from backend.environments.discovery import describe
counter = environment_class(describe(sys.argv[1]))()
counter.reset(target=3, start=0, prompt=[{"role": "user", "content": "go"}])
counter.counter(step_by=3)
notes = environment_class(describe(sys.argv[2]))()
notes.reset(goal=1)
notes.add_note(title="only", body="one")
rewards = [counter.get_reward(), notes.get_reward()]
counter._close(); notes._close()
servers = {"backend.environments.builtin." + name for name in ("echo", "wordle", "arithmetic")}
loaded = sorted(m for m in sys.modules if m == "tests" or m.startswith("tests.") or m in servers)
print(json.dumps({"rewards": rewards, "loaded": loaded}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script, servers["counter"].url, servers["notes"].url],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"rewards": [1.0, 1.0], "loaded": []}


# --- whole episodes ---------------------------------------------------------------------------------------------

Move = tuple[str, dict[str, Any]]
# server -> (reset row, text the reset must show, winning moves, text of the winning move's answer,
#            reset row, losing moves) -- the losing moves use up the episode
EPISODES: dict[str, tuple[dict[str, Any], list[str], list[Move], str, dict[str, Any], list[Move]]] = {
    "echo": (
        {"target": "paper boat"},
        ["Echo this text exactly: paper boat", "attempts_left: 3"],
        [("echo_message", {"message": "Paper boat"}), ("echo_message", {"message": "paper boat"})],
        "paper boat",
        {"target": "blue sky"},
        [("echo_message", {"message": "nope"})] * 3,
    ),
    "wordle": (
        {"word": "crane"},
        ["guesses_left: 6", "G = right letter in the right place"],
        [("guess", {"guess": "slate"}), ("guess", {"guess": "CRANE"})],
        "GGGGG",
        {"word": "there"},
        [("guess", {"guess": "blimp"})] * 6,
    ),
    "arithmetic": (
        {"a": 17, "b": 25, "op": "+"},
        ["What is 17 + 25?", "tries_left: 3"],
        [("submit_answer", {"answer": 50}), ("submit_answer", {"answer": 42})],
        "Correct! 17 + 25 = 42.",
        {"a": 6, "b": 7, "op": "*"},
        [("submit_answer", {"answer": 41})] * 3,
    ),
    "counter": (
        {"target": 7, "start": 2},
        ["count: 2", "target: 7", "moves_left: 5"],
        [("counter", {"step_by": 10}), ("counter", {"step_by": 5, "direction": "down"})],
        "Target reached!",
        {"target": 30, "start": 0},
        [("counter", {"step_by": 1})] * 5,
    ),
    "notes": (
        {"goal": 2},
        ["Add 2 notes with different titles using add_note."],
        [("add_note", {"title": "a", "body": "one"}), ("count_notes", {}), ("add_note", {"title": "b", "body": "two"})],
        "saved note 'b' (2 of 2)",
        {"goal": 3},
        [("add_note", {"title": "x", "body": "1"}), ("add_note", {"title": "y", "body": "2"})],
    ),
}


def _play(environment: OpenEnvEpisode, moves: list[Move]) -> list[str]:
    return [getattr(environment, tool)(**arguments) for tool, arguments in moves]


@pytest.mark.parametrize("name", list(EPISODES))
def test_a_won_then_a_lost_episode_on_one_instance(open_episode, name):
    win_row, shown, win_moves, win_answer, loss_row, loss_moves = EPISODES[name]
    environment = open_episode(name)

    text = environment.reset(**win_row, prompt=PROMPT)
    assert text is not None and text.startswith("\n\n") and not text.startswith("\n\n\n")
    for fragment in shown:  # the columns reached the server's reset
        assert fragment in text
    answers = _play(environment, win_moves)
    assert win_answer in answers[-1]
    assert environment.done and environment.get_reward() == 1.0
    with pytest.raises(EnvironmentActionError, match="episode is over"):
        _play(environment, win_moves[-1:])
    assert environment.get_reward() == 1.0  # the refused call changed nothing

    assert environment.reset(**loss_row, prompt=PROMPT)  # the same instance, a new episode from a clean slate
    assert (environment.done, environment.rewards, environment.get_reward()) == (False, [], 0.0)
    _play(environment, loss_moves)
    assert environment.get_reward() == 0.0
    if name == "notes":  # no move limit: the goal of 3 is simply not reached yet
        assert not environment.done
    else:
        assert environment.done
        with pytest.raises(EnvironmentActionError, match="episode is over"):
            _play(environment, loss_moves[-1:])


@pytest.mark.parametrize(
    "name, row, moves, rewards",
    [
        ("counter", {"target": 7, "start": 2}, EPISODES["counter"][2], [0.0, 1.0]),
        ("notes", {"goal": 2}, EPISODES["notes"][2], [0.0, 0.0, 1.0]),
    ],
)
@pytest.mark.parametrize("mode", ["success", "last", "sum"])
def test_reward_modes_on_a_multi_step_episode(open_episode, name, row, moves, rewards, mode):
    environment = open_episode(name, reward_mode=mode)
    environment.reset(**row)
    _play(environment, moves[:-1])
    assert environment.rewards == rewards[:-1] and not environment.done
    assert environment.get_reward() == 0.0  # unfinished: nothing earned yet in any mode
    _play(environment, moves[-1:])
    assert environment.rewards == rewards and environment.done
    assert environment.get_reward() == 1.0


@pytest.fixture(scope="module")
def graded_url() -> Iterator[str]:
    """A minimal stand-in speaking the OpenEnv WebSocket protocol with graded rewards (points / 10, three steps).

    The real servers above only pay 0.0 or 1.0 on the last step, which cannot tell ``last`` from ``sum``.
    """
    from websockets.sync.server import serve

    def handler(connection) -> None:
        steps = 0
        for raw in connection:
            message = json.loads(raw)
            if message["type"] == "close":
                return
            if message["type"] == "reset":
                steps, data = 0, {"observation": {"message": "Climb three times."}, "reward": None, "done": False}
            elif message["type"] == "step":
                steps += 1
                points = message["data"]["points"]
                data = {"observation": {"message": f"climbed {points}"}, "reward": points / 10, "done": steps >= 3}
            else:
                data = {}
            kind = "state" if message["type"] == "state" else "observation"
            connection.send(json.dumps({"type": kind, "data": data}))

    with serve(handler, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.socket.getsockname()[1]}"
        server.shutdown()
    thread.join(timeout=5)


@pytest.mark.parametrize(
    "points, expected",
    [
        ([2, 5, 4], {"success": 1.0, "last": 0.4, "sum": 1.1}),
        ([3, 2, 0], {"success": 0.0, "last": 0.0, "sum": 0.5}),
    ],
)
def test_reward_modes_with_graded_rewards(graded_url, points, expected):
    points_arg = {"type": "integer", "description": "How far, 0 to 10."}
    climb = ToolSpec("climb", "Climb.", {"points": points_arg}, ("points",))
    info = EnvironmentInfo(url=graded_url, name="graded", description="", kind="typed", tools=(climb,))
    for mode, reward in expected.items():
        environment = environment_class(info, reward_mode=mode, timeout_s=5)()
        try:
            assert environment.reset() == "\n\nClimb three times."
            answers = [environment.climb(points=p) for p in points]
            # The model reads each step's reward after the step's own text, and when the episode is over.
            assert answers == [f"climbed {p}\nreward: {p / 10:g}" for p in points[:-1]] + [
                f"climbed {points[-1]}\nreward: {points[-1] / 10:g}\nThe episode is over."
            ]
            assert environment.get_reward() == pytest.approx(reward)
        finally:
            environment._close()


SUM = {"a": 17, "b": 25, "op": "+"}


@pytest.mark.parametrize(
    "name, row, tool, arguments, message",
    [
        ("arithmetic", SUM, "submit_answer", {"answer": "42"}, r"answer: '42' is not of type 'integer'"),
        ("arithmetic", SUM, "submit_answer", {"answer": 4.5}, r"answer: 4.5 is not of type 'integer'"),
        ("arithmetic", SUM, "submit_answer", {}, r"'answer' is a required property"),
        ("arithmetic", SUM, "submit_answer", {"answer": 42, "hint": 1}, r"'hint' was unexpected"),
        ("counter", {"target": 7}, "counter", {"step_by": 11}, r"step_by: 11 is greater than the maximum of 10"),
        ("counter", {"target": 7}, "counter", {"step_by": 3, "direction": "left"}, r"direction: 'left' is not one of"),
        ("notes", {"goal": 1}, "add_note", {"title": 7, "body": "x"}, r"title: 7 is not of type 'string'"),
        ("notes", {"goal": 1}, "add_note", {"title": "x"}, r"'body' is a required property"),
        ("notes", {"goal": 1}, "count_notes", {"verbose": True}, r"'verbose' was unexpected"),
    ],
)
def test_invalid_arguments_are_refused_before_reaching_the_server(open_episode, name, row, tool, arguments, message):
    environment = open_episode(name)
    environment.reset(**row)
    with pytest.raises(EnvironmentActionError, match=rf"invalid arguments for {tool}: .*{message}"):
        getattr(environment, tool)(**arguments)
    assert (environment.actions, environment.done, environment.rewards) == (0, False, [])
    if name == "arithmetic":  # no try was used up on the server either
        assert "2 tries left" in environment.submit_answer(answer=40)


def test_environment_side_errors_carry_the_servers_message(open_episode):
    wordle = open_episode("wordle")
    wordle.reset(word="crane")
    with pytest.raises(EnvironmentActionError, match=r"exactly 5 letters A-Z, got 'abcd'"):
        wordle.guess(guess="abcd")
    assert not wordle.done
    assert "guesses_left: 5" in wordle.guess(guess="slate")  # the refused guess cost nothing

    notes = open_episode("notes")
    notes.reset(goal=3)
    notes.add_note(title="a", body="one")
    with pytest.raises(EnvironmentActionError, match="a note titled 'a' already exists"):
        notes.add_note(title="a", body="again")
    assert not notes.done and notes.count_notes().splitlines()[0] == "1"


# --- a server that dies or stalls -------------------------------------------------------------------------------


def test_a_killed_server_fails_the_episode_and_the_job_without_hanging(servers, open_episode):
    doomed = servers["doomed"]
    playing, idle = open_episode("doomed"), open_episode("doomed")
    assert "What is 6 * 7?" in playing.reset(a=6, b=7, op="*")
    assert "Too low." in playing.submit_answer(answer=40)

    started = time.monotonic()
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.process.wait(timeout=10)
    with pytest.raises(EnvironmentActionError, match=r"connection to the environment .* was lost.*cannot continue"):
        playing.submit_answer(answer=42)
    with pytest.raises(EnvironmentUnavailable, match=rf"{doomed.url} is unreachable"):
        playing.get_reward()  # the trainer must stop, not score a broken episode 0.0 and go on
    with pytest.raises(EnvironmentUnavailable, match="stopped answering and a reconnect failed"):
        playing.reset(a=1, b=2, op="+")
    with pytest.raises(EnvironmentUnavailable, match="stopped answering and a reconnect failed"):
        idle.reset(a=1, b=2, op="+")  # an instance that was between episodes when the server died
    with pytest.raises(EnvironmentUnavailable, match="cannot open a session"):
        environment_class(playing.info)()
    assert time.monotonic() - started < 5


def test_a_stalled_server_times_out_instead_of_hanging(servers, open_episode):
    counter = servers["counter"]
    environment = open_episode("counter", timeout_s=1.0)
    environment.reset(target=7)
    started = time.monotonic()
    os.kill(counter.pid, signal.SIGSTOP)
    try:
        # The step's timeout ends the episode; the next episode's new session is what finds the server gone.
        with pytest.raises(EnvironmentActionError, match=r"did not answer within 1 s"):
            environment.counter(step_by=1)
        with pytest.raises(EnvironmentUnavailable, match="stopped answering and a reconnect failed"):
            environment.reset(target=8)
        with pytest.raises(EnvironmentUnavailable, match="unreachable"):
            environment.get_reward()
    finally:
        os.kill(counter.pid, signal.SIGCONT)
    assert time.monotonic() - started < 8  # the timeout plus a short close, not websockets' default 10 s close wait
    assert "count: 0" in environment.reset(target=9)  # the server is back: a new episode starts on a new session


# --- capacity ---------------------------------------------------------------------------------------------------


def test_check_sessions_passes_when_the_server_allows_enough(servers):
    check_sessions(servers["echo"].url, 4)
    check_sessions(servers["notes_single"].url, 1)


def test_check_sessions_says_how_many_were_accepted_and_what_to_do(servers):
    url = servers["notes_single"].url
    with pytest.raises(EnvironmentUnavailable) as caught:
        check_sessions(url, 4)
    message = str(caught.value)
    assert f"the environment at {url} accepted only 1 concurrent session(s)" in message
    assert "this job runs 4 episodes at once" in message
    # GRPO plays at least num_generations (>= 2) episodes at once: a smaller batch can never fit one session.
    assert "duplicate the Space" in message and "max_concurrent_envs" in message and "no batch size fits" in message
    assert "lower the batch" not in message
    with pytest.raises(EnvironmentUnavailable) as caught:
        check_sessions(url, 4, least=1)
    assert "lower the batch size x gradient accumulation to at most 1" in str(caught.value)


def test_a_server_that_has_no_state_before_reset_still_opens_episodes(open_episode):
    """One code environment answered "Environment not initialized. Call reset() first." to the adapter's first
    message (a state request that checks the session was accepted), so no episode could start."""
    environment = open_episode("counter_quirky")
    assert "count: 0" in environment.reset(target=3)
    assert "Target reached!" in environment.counter(step_by=3) and environment.done


def test_an_environment_that_never_rewards_is_reported_before_training(infos):
    from backend.environments.probe import probe_rewards

    silent = probe_rewards(infos["counter_quirky"])
    assert silent.actions >= 2 and silent.rewarded == 0
    assert "gave no reward for any of" in silent.warning("counter")
    rewarding = probe_rewards(infos["counter"])  # random moves rarely win, but every answer carries a reward
    assert rewarding.rewarded == rewarding.actions > 0 and rewarding.warning("counter") is None


def test_a_slow_step_ends_the_episode_not_the_job(open_episode):
    """A step slower than the timeout on a healthy server (slow model-written code, say) is a failed tool call the
    model is told about and an episode that is over; the reward is read, the next episode starts."""
    environment = open_episode("counter", timeout_s=1.0)
    environment.reset(target=7, slow_s=3)
    started = time.monotonic()
    with pytest.raises(EnvironmentActionError, match="did not answer within 1 s; the episode is over"):
        environment.counter(step_by=1)
    assert time.monotonic() - started < 5
    assert environment.get_reward() == 0.0  # read, not raised: the server is fine
    with pytest.raises(EnvironmentActionError, match="episode is over"):
        environment.counter(step_by=1)
    assert "count: 0" in environment.reset(target=9)
    assert "count: 2" in environment.counter(step_by=2)


def test_the_environment_evaluation_fits_in_the_sessions_training_used(servers, demo_model_path):
    """TRL keeps its rollout instances (and their sessions) to the end; the evaluation after training needs one
    more, so on a server with exactly the sessions training used it was refused (CapacityError)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from backend.environments.episodes import EpisodeSettings, success_rates

    factory = environment_class(describe(servers["notes_single"].url), timeout_s=10.0)
    pooled = factory()  # the only session, held as TRL holds its pool
    model = AutoModelForCausalLM.from_pretrained(demo_model_path)
    tokenizer = AutoTokenizer.from_pretrained(demo_model_path)
    result = success_rates(
        model,
        tokenizer,
        factory,
        [{"prompt": PROMPT, "goal": 1}],
        EpisodeSettings(max_completion_length=8, max_iterations=1),
        episodes=1,
        seed=0,
        compare_base=False,
    )
    assert result["episodes"] == 1 and "success_rate" in result["tuned"]
    assert not pooled._session.connected


def test_the_environment_evaluation_says_the_episodes_played_as_it_goes(servers, demo_model_path):
    """Issue 37: the evaluation episodes after training were an invisible phase; each batch now reports k of n."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from backend.environments.episodes import EpisodeSettings, success_rates

    factory = environment_class(describe(servers["notes"].url), timeout_s=10.0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(demo_model_path), LoraConfig(r=2, target_modules=["q_proj"])
    )
    tokenizer = AutoTokenizer.from_pretrained(demo_model_path)
    told: list[tuple[int, int, str]] = []
    success_rates(
        model,
        tokenizer,
        factory,
        [{"prompt": PROMPT, "goal": 1}],
        EpisodeSettings(max_completion_length=8, max_iterations=1),
        episodes=3,
        seed=0,
        sessions=2,
        on_episodes=lambda *said: told.append(said),
    )
    assert told == [
        (0, 6, "tuned, then base"),
        (2, 6, "tuned, then base"),
        (3, 6, "tuned, then base"),
        (5, 6, "tuned, then base"),
        (6, 6, "tuned, then base"),
    ]
    assert (
        progress_text(
            {"phase": "evaluating", "eval_done": 2, "eval_rows": 6, "eval_unit": "episodes", "eval_sides": told[0][2]}
        )
        == "evaluating: 2 / 6 episodes (tuned, then base)"
    )


def test_a_second_instance_on_a_one_session_server_is_refused(open_episode):
    first = open_episode("notes_single")
    with pytest.raises(CapacityError, match="refused a new session"):
        open_episode("notes_single")
    first.reset(goal=1)
    assert "1 of 1" in first.add_note(title="t", body="b") and first.get_reward() == 1.0
    first._close()  # frees the slot
    assert open_episode("notes_single").reset(goal=2)


def test_leaving_a_jobs_environment_closes_every_session_still_pooled():
    """TRL keeps its instances to the end; their sockets must be closed when the job's environment closes, not by
    ``__del__`` at interpreter exit, where closing joins a reader thread that can no longer run (a hung worker)."""
    spec = parse_spec(
        tiny_spec(
            method="grpo",
            dataset={"source": "builtin", "name": "echo-demo"},
            environment={"name": "builtin:echo"},
            grpo={"num_generations": 2},
        )
    )
    with open_environment(spec, sessions=2) as environment:
        pooled = [environment.factory(), environment.factory()]
        assert all(episode._session.connected for episode in pooled)
    assert not any(episode._session.connected for episode in pooled)


# --- addresses --------------------------------------------------------------------------------------------------


def test_space_ids_and_urls_resolve():
    assert resolve_url("openenv/echo_env") == "https://openenv-echo-env.hf.space"
    assert resolve_url("  Someone/My.Env_2  ") == "https://someone-my-env-2.hf.space"
    assert space_url("openenv/wordle") == "https://openenv-wordle.hf.space"
    assert resolve_url("https://openenv-echo-env.hf.space/") == "https://openenv-echo-env.hf.space"
    assert resolve_url("http://127.0.0.1:8000//") == "http://127.0.0.1:8000"
    assert resolve_url("http://localhost:8000/env") == "http://localhost:8000/env"
    for garbage in ("", "echo env", "a/b/c", "/echo", "ftp://host/env", "owner/"):
        with pytest.raises(ValueError, match="is not an environment"):
            resolve_url(garbage)


def test_describe_on_a_closed_port_fails_fast():
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(EnvironmentUnavailable, match=rf"the environment server at {url} is not reachable"):
        describe(url)
    assert time.monotonic() - started < 3


def test_a_dry_run_on_an_unreachable_environment_is_refused_before_any_model_loads(tmp_path, monkeypatch):
    """A mistyped URL is answered in a second: the model (10 s on a CPU, minutes for a large one) is never loaded."""
    from backend.workflows import dryrun

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded for an environment that cannot be reached")

    monkeypatch.setattr(dryrun, "load_for_inference", no_model)
    url = f"http://127.0.0.1:{free_port()}"
    spec = parse_spec(
        tiny_spec(
            method="grpo",
            dataset={"name": "echo-demo"},
            training={"batch_size": 4},
            environment={"name": url, "timeout_s": 2},
        )
    )
    with pytest.raises(EnvironmentUnavailable, match=rf"the environment server at {url} is not reachable"):
        dryrun.dry_run(spec, tmp_path / "models")
