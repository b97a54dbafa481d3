"""The built-in OpenEnv servers, the launcher and two foreign test servers, driven over the raw WebSocket protocol.

No openenv client classes here: every exchange is a JSON frame, so these tests pin down the wire format the
adapter relies on. All servers start once, side by side, in a module-scoped fixture.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from backend.data.builtin import BUILTIN_DATASETS
from backend.environments.builtin.registry import BUILTIN_ENVIRONMENTS, builtin_environment
from backend.environments.launcher import (
    EnvironmentStartError,
    RunningEnvironment,
    start_builtin,
    start_server_process,
)
from tests.helpers import ROOT

pytestmark = pytest.mark.slow

SERVERS_DIR = ROOT / "tests" / "helpers" / "env_servers"
ARITHMETIC_MAX_SESSIONS = 2
Call = Callable[..., dict[str, Any]]


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, RunningEnvironment]]:
    """Every server under test, started in parallel (each takes seconds to import openenv) and stopped at the end."""
    started: dict[str, RunningEnvironment] = {}
    try:
        started["echo"] = start_builtin("echo", wait=False)
        started["wordle"] = start_builtin("wordle", wait=False)
        started["arithmetic"] = start_builtin("arithmetic", max_sessions=ARITHMETIC_MAX_SESSIONS, wait=False)
        started["counter"] = start_server_process(
            [sys.executable, str(SERVERS_DIR / "counter_server.py")], name="counter", wait=False
        )
        started["notes"] = start_server_process(
            [sys.executable, str(SERVERS_DIR / "notes_mcp_server.py"), "--max-sessions", "1"], name="notes", wait=False
        )
        for server in started.values():
            server.wait_until_ready(timeout_s=120)
        yield started
    finally:
        for server in started.values():
            server.stop()


def _get(url: str, path: str) -> Any:
    with urllib.request.urlopen(url + path, timeout=10) as response:
        return json.loads(response.read())


@contextmanager
def ws_session(url: str) -> Iterator[Call]:
    """A WebSocket session; yields ``call(type, data=None) -> reply frame`` and closes cleanly (freeing the slot)."""
    with connect(url.replace("http://", "ws://", 1) + "/ws", open_timeout=10) as conn:

        def call(kind: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
            message: dict[str, Any] = {"type": kind}
            if data is not None:
                message["data"] = data
            try:
                conn.send(json.dumps(message))
            except ConnectionClosed:
                pass  # a server at capacity refuses at once and hangs up; its error frame is still queued
            return json.loads(conn.recv(timeout=30))

        try:
            yield call
        finally:
            # Ask the server to end the session and wait for it to hang up, so its session slot is free afterwards.
            try:
                conn.send(json.dumps({"type": "close"}))
                while True:
                    conn.recv(timeout=10)
            except (ConnectionClosed, TimeoutError):
                pass


def observed(frame: dict[str, Any]) -> dict[str, Any]:
    assert frame["type"] == "observation", frame
    return frame["data"]


def error_of(frame: dict[str, Any]) -> dict[str, Any]:
    assert frame["type"] == "error", frame
    return frame["data"]


def call_tool(call: Call, tool: str, **arguments: Any) -> dict[str, Any]:
    return observed(call("step", {"type": "call_tool", "tool_name": tool, "arguments": arguments}))


def first_row(dataset: str) -> dict[str, Any]:
    return json.loads(BUILTIN_DATASETS[dataset].path.read_text().splitlines()[0])


# --- registry and endpoints ----------------------------------------------------------------------------------


def test_registry_names_datasets_that_exist():
    for env in BUILTIN_ENVIRONMENTS.values():
        assert env.dataset in BUILTIN_DATASETS and "grpo" in BUILTIN_DATASETS[env.dataset].methods()
        assert env.module == f"backend.environments.builtin.{env.name}"
    with pytest.raises(KeyError, match="echo, wordle, arithmetic"):
        builtin_environment("chess")


@pytest.mark.parametrize(
    "name, kind_marker",
    [
        ("echo", "CallToolAction"),
        ("wordle", "guess"),
        ("arithmetic", "submit_answer"),
        ("counter", None),
        ("notes", "CallToolAction"),
    ],
)
def test_health_metadata_and_schema(servers, name, kind_marker):
    url = servers[name].url
    assert _get(url, "/health")["status"] == "healthy"
    metadata = _get(url, "/metadata")
    assert metadata["name"] == name and metadata["description"]
    action = _get(url, "/schema")["action"]
    if kind_marker == "CallToolAction":
        assert action["title"] == "CallToolAction"
    elif kind_marker is not None:
        assert action["x-tool-name"] == kind_marker
        assert action["description"]
        assert all(prop.get("description") for key, prop in action["properties"].items())
    else:
        assert "x-tool-name" not in action
        assert set(action["properties"]) == {"metadata", "step_by", "direction"}
        assert action["properties"]["direction"]["enum"] == ["up", "down"]


@pytest.mark.parametrize("name", list(BUILTIN_ENVIRONMENTS))
def test_reset_takes_the_dataset_columns(servers, name):
    row = first_row(builtin_environment(name).dataset)
    columns = {k: v for k, v in row.items() if k != "prompt"}
    with ws_session(servers[name].url) as call:
        frame = observed(call("reset", columns))
        state = call("state")["data"]
    assert frame["done"] is False and frame["reward"] is None
    for key, value in columns.items():
        assert state[key] == value
    if name == "echo":
        assert frame["observation"]["prompt"] == f"Echo this text exactly: {row['target']}"
    elif name == "arithmetic":
        assert frame["observation"]["question"] == f"What is {row['a']} {row['op']} {row['b']}?"


# --- echo (MCP) --------------------------------------------------------------------------------------------------


def test_echo_lists_its_tool_with_description_and_schema(servers):
    with ws_session(servers["echo"].url) as call:
        tools = observed(call("step", {"type": "list_tools"}))["observation"]["tools"]
    assert [t["name"] for t in tools] == ["echo_message"]
    tool = tools[0]
    assert "Echo a message back" in tool["description"]
    assert tool["input_schema"]["required"] == ["message"]
    assert tool["input_schema"]["properties"]["message"]["type"] == "string"
    assert tool["input_schema"]["properties"]["message"]["description"]


def test_echo_rewards_an_exact_echo_and_refuses_calls_after_the_end(servers):
    with ws_session(servers["echo"].url) as call:
        obs = observed(call("reset", {"target": "paper boat"}))["observation"]
        assert obs["prompt"] == "Echo this text exactly: paper boat" and obs["attempts_left"] == 3
        miss = call_tool(call, "echo_message", message="Paper boat")
        assert (miss["reward"], miss["done"]) == (0.0, False)
        assert miss["observation"]["result"]["data"] == "Paper boat"
        hit = call_tool(call, "echo_message", message="paper boat")
        assert (hit["reward"], hit["done"]) == (1.0, True)
        assert hit["observation"]["error"] is None
        late = call_tool(call, "echo_message", message="paper boat")
        assert late["done"] is True and late["reward"] == 0.0
        assert "the episode is over" in late["observation"]["error"]["message"]


def test_echo_ends_after_three_misses_and_seeds_pick_the_same_target(servers):
    with ws_session(servers["echo"].url) as call:
        prompt = observed(call("reset", {"seed": 5}))["observation"]["prompt"]
        rewards = [call_tool(call, "echo_message", message="nope") for _ in range(3)]
        assert [(r["reward"], r["done"]) for r in rewards] == [(0.0, False), (0.0, False), (0.0, True)]
        assert observed(call("reset", {"seed": 5}))["observation"]["prompt"] == prompt


# --- wordle (typed) -----------------------------------------------------------------------------------------


def test_wordle_win_with_repeated_letter_feedback(servers):
    with ws_session(servers["wordle"].url) as call:
        reset = observed(call("reset", {"word": "there"}))["observation"]
        assert reset["guesses_left"] == 6 and reset["feedback"] == ""
        assert "G = right letter in the right place" in reset["message"]
        first = observed(call("step", {"guess": "EERIE"}))
        assert first["observation"]["feedback"] == "YXYXG"
        assert (first["reward"], first["done"], first["observation"]["guesses_left"]) == (0.0, False, 5)
        win = observed(call("step", {"guess": "there"}))
        assert win["observation"]["feedback"] == "GGGGG"
        assert (win["reward"], win["done"]) == (1.0, True)
        assert "the episode is over" in error_of(call("step", {"guess": "there"}))["message"]


def test_wordle_invalid_guesses_are_errors_that_cost_nothing(servers):
    with ws_session(servers["wordle"].url) as call:
        observed(call("reset", {"word": "crane"}))
        for bad in ("abc", "cranes", "cr4ne"):
            error = error_of(call("step", {"guess": bad}))
            assert "exactly 5 letters" in error["message"] and error["code"] == "EXECUTION_ERROR"
        assert error_of(call("step", {"word": "crane"}))["code"] == "VALIDATION_ERROR"
        assert observed(call("step", {"guess": "slate"}))["observation"]["guesses_left"] == 5


def test_wordle_loss_after_six_guesses(servers):
    with ws_session(servers["wordle"].url) as call:
        observed(call("reset", {"word": "crane"}))
        results = [observed(call("step", {"guess": "blimp"})) for _ in range(6)]
        assert [r["done"] for r in results] == [False] * 5 + [True]
        assert all(r["reward"] == 0.0 for r in results)
        assert "the word was 'crane'" in results[-1]["observation"]["message"]
        assert error_of(call("step", {"guess": "crane"}))["message"].startswith("the episode is over")
        assert "exactly 5 letters" in error_of(call("reset", {"word": "toolong"}))["message"]


# --- arithmetic (typed) -------------------------------------------------------------------------------------


def test_arithmetic_hints_then_reward(servers):
    with ws_session(servers["arithmetic"].url) as call:
        reset = observed(call("reset", {"a": 17, "b": 25, "op": "+"}))["observation"]
        assert reset["question"] == "What is 17 + 25?" and reset["tries_left"] == 3
        high = observed(call("step", {"answer": 50}))
        assert high["observation"]["feedback"].startswith("Too high.") and high["reward"] == 0.0
        low = observed(call("step", {"answer": 40}))
        assert low["observation"]["feedback"].startswith("Too low.") and low["observation"]["tries_left"] == 1
        right = observed(call("step", {"answer": 42}))
        assert (right["reward"], right["done"]) == (1.0, True)
        assert "episode is over" in error_of(call("step", {"answer": 42}))["message"]


@pytest.mark.parametrize("name", ["echo", "wordle", "arithmetic"])
def test_builtins_serve_the_task_api_and_reset_poses_a_split_task(servers, name):
    """OpenEnv's Task API over HTTP: a train and a test split, their counts and tasks; reset(split, index) over the
    WebSocket poses exactly that task, and a task past the split's end is an error frame, not a random task."""
    url = servers[name].url
    assert _get(url, "/list_environments") == [name]
    assert _get(url, f"/{name}/splits") == [{"name": "train", "type": "train"}, {"name": "test", "type": "test"}]
    count = _post(url, f"/{name}/num_tasks", {"split": "test"})["num_tasks"]
    task = _post(url, f"/{name}/task", {"split": "test", "index": count - 1})["task"]
    assert task["prompt"][0]["role"] == "user"
    with ws_session(url) as call:
        observed(call("reset", {"split": "test", "index": count - 1}))
        state = call("state")["data"]
        assert {key: state[key] for key in task if key != "prompt"} == {k: v for k, v in task.items() if k != "prompt"}
        assert "tasks 0 to" in error_of(call("reset", {"split": "test", "index": count}))["message"]


def _post(url: str, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_arithmetic_three_wrong_answers_lose(servers):
    with ws_session(servers["arithmetic"].url) as call:
        observed(call("reset", {"a": 6, "b": 7, "op": "*"}))
        results = [observed(call("step", {"answer": 41})) for _ in range(3)]
        assert [(r["reward"], r["done"]) for r in results] == [(0.0, False), (0.0, False), (0.0, True)]
        assert "The answer was 42." in results[-1]["observation"]["feedback"]
        assert "op must be one of" in error_of(call("reset", {"a": 1, "b": 2, "op": "/"}))["message"]


def test_launcher_passes_the_session_limit(servers):
    url = servers["arithmetic"].url
    with ws_session(url) as first, ws_session(url) as second:
        observed(first("reset", {}))
        observed(second("reset", {}))
        with ws_session(url) as third:
            assert error_of(third("reset", {}))["code"] == "CAPACITY_REACHED"


def test_a_builtin_server_runs_without_gradio(servers):
    """openenv imports Gradio for a web page these servers never serve: 2.9 s of a 4.5 s start. The launcher starts
    each through ``python -m backend.environments.builtin NAME``, which serves its module with Gradio unimportable;
    here that entry, asked for --help once the module is loaded, has openenv and no Gradio."""
    for name, running in servers.items():
        if name in BUILTIN_ENVIRONMENTS:
            assert running.process.args[1:4] == ["-m", "backend.environments.builtin", name], running.process.args
    probe = (
        "import sys\n"
        "from backend.environments.builtin.__main__ import main\n"
        "try:\n    main(['-', 'arithmetic', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sys.modules.get('gradio') is None, 'openenv.core.env_server' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.split()[-2:] == ["True", "True"], done.stdout[-2000:] + done.stderr[-2000:]


# --- foreign servers ------------------------------------------------------------------------------------------


def test_counter_server_multi_field_action(servers):
    with ws_session(servers["counter"].url) as call:
        reset = observed(call("reset", {"target": 7, "start": 2}))["observation"]
        assert (reset["count"], reset["target"], reset["moves_left"]) == (2, 7, 5)
        assert observed(call("step", {"step_by": 10, "direction": "up"}))["observation"]["count"] == 12
        assert error_of(call("step", {"step_by": 0}))["code"] == "VALIDATION_ERROR"
        win = observed(call("step", {"step_by": 5, "direction": "down"}))
        assert (win["reward"], win["done"], win["observation"]["count"]) == (1.0, True, 7)


def test_notes_mcp_server_tools_and_reward(servers):
    with ws_session(servers["notes"].url) as call:
        observed(call("reset", {"goal": 2}))
        tools = {t["name"]: t for t in observed(call("step", {"type": "list_tools"}))["observation"]["tools"]}
        assert set(tools) == {"add_note", "count_notes"}
        assert tools["add_note"]["description"].startswith("Save a note")
        assert set(tools["add_note"]["input_schema"]["required"]) == {"title", "body"}
        assert tools["count_notes"]["input_schema"]["properties"] == {}
        first = call_tool(call, "add_note", title="a", body="one")
        assert (first["reward"], first["done"]) == (0.0, False)
        duplicate = call_tool(call, "add_note", title="a", body="again")
        assert "already exists" in duplicate["observation"]["error"]["message"]
        second = call_tool(call, "add_note", title="b", body="two")
        assert (second["reward"], second["done"]) == (1.0, True)
        assert call_tool(call, "count_notes")["observation"]["result"]["data"] == 2


def test_single_session_server_refuses_a_second_session(servers):
    url = servers["notes"].url
    with ws_session(url) as first:
        observed(first("reset", {}))
        with ws_session(url) as second:
            error = error_of(second("reset", {}))
            assert error["code"] == "CAPACITY_REACHED"
    with ws_session(url) as again:  # the slot is free once the first session closed
        observed(again("reset", {}))


# --- launcher -------------------------------------------------------------------------------------------------


def test_launcher_reports_a_server_that_exits_with_its_log_tail():
    with pytest.raises(EnvironmentStartError) as caught:
        start_server_process([sys.executable, "-m", "backend.environments.no_such_env"], name="broken", timeout_s=30)
    message = str(caught.value)
    assert "broken environment server" in message and "exited with code 1" in message
    assert "No module named backend.environments.no_such_env" in message


def test_launcher_times_out_on_a_silent_server():
    script = "import time; print('starting but never listening', flush=True); time.sleep(60)"
    with pytest.raises(EnvironmentStartError, match=r"did not answer .*/health within 1 s(.|\n)*never listening"):
        start_server_process([sys.executable, "-c", script], name="silent", timeout_s=1)


HEALTH_SERVER = """
import http.server, signal, sys
if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'{"status": "healthy"}')
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[-1])), Health).serve_forever()
"""


@pytest.mark.parametrize("ignore_term", [False, True])
def test_stop_ends_the_process_even_if_it_ignores_sigterm(ignore_term):
    argv = [sys.executable, "-c", HEALTH_SERVER] + (["--ignore-term"] if ignore_term else [])
    with start_server_process(argv, name="health", timeout_s=30) as server:
        assert _get(server.url, "/health") == {"status": "healthy"} and server.is_running()
        log_dir = server.log_path.parent
        server.stop(grace_s=0.5)
        assert not server.is_running()
        assert server.process.returncode == (-9 if ignore_term else -15)
        assert not log_dir.exists()
        with pytest.raises(OSError):
            _get(server.url, "/health")
    server.stop()  # idempotent
