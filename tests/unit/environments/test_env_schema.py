"""Environment schemas and observations as the model sees them, from schemas written by Pydantic and OpenEnv
exactly as a real server publishes them (``Action.model_json_schema()``), without starting one.

Covers issue 11's defects 1 (``$ref``/``$defs``, enums, nested models), 4 (observation text), 5 (names and
descriptions) and the metric name of a URL environment.
"""

from __future__ import annotations

import typing
from enum import Enum

import pytest
from openenv.core.env_server import Action
from pydantic import BaseModel, Field
from transformers.utils import get_json_schema

from backend.core.spec import EnvironmentSpec, SpecError, parse_spec
from backend.environments.adapter import (
    _validate_arguments,
    class_name,
    environment_class,
    observation_text,
    tool_docstring,
)
from backend.environments.connection import EnvironmentActionError
from backend.environments.discovery import EnvironmentInfo, ToolSpec, _action_tool
from backend.environments.runtime import reward_name
from backend.environments.schema import inline_refs
from tests.helpers import tiny_spec


class Direction(str, Enum):
    up = "up"
    down = "down"
    left = "left"
    right = "right"


class Cell(BaseModel):
    row: int = Field(ge=0, le=7, description="Row from the top")
    col: int = Field(ge=0, le=7)


class MazeAction(Action):
    """Walk one square.

    Attributes:
        direction: Which way to walk from where you stand.
        target: The square you expect to reach,
            used to check your map.
    """

    direction: Direction
    target: Cell | None = None


class REPLAction(Action):
    """Run code in the REPL."""

    code: str = Field(description="Python source to run")
    timeout: int = Field(5, description="Seconds before the run is stopped")


class PlayAction(Action):
    """Play a move."""

    action: str = Field(description="The move, e.g. 'e2e4'")


def _tool(action_cls: type[Action], env: str = "maze") -> ToolSpec:
    return _action_tool(inline_refs(action_cls.model_json_schema()), env)


def test_enum_and_nested_model_fields_are_resolved_shown_and_validated():
    schema = MazeAction.model_json_schema()
    assert "$defs" in schema and "$ref" in str(schema["properties"]), "Pydantic writes these as references"
    tool = _tool(MazeAction)
    assert tool.parameters["direction"]["enum"] == ["up", "down", "left", "right"]
    assert tool.parameters["target"]["anyOf"][0]["properties"]["row"]["maximum"] == 7
    # The model is shown the allowed values, the nested fields and each field's description.
    doc = tool_docstring(tool)
    assert "One of: up, down, left, right" in doc and "Which way to walk from where you stand" in doc
    assert "Attributes" not in doc
    # An instance needs a server; the class's function is what TRL reads the tool from.
    cls = environment_class(EnvironmentInfo("http://127.0.0.1:1", "maze", "", "typed", (tool,)))
    method = getattr(cls, tool.name)
    assert typing.get_args(method.__annotations__["direction"]) == ("up", "down", "left", "right")
    trl_schema = get_json_schema(method)["function"]["parameters"]["properties"]
    assert trl_schema["direction"]["enum"] == ["up", "down", "left", "right"]
    # Valid calls pass validation against the full schema; invalid ones are refused with what is wrong.
    _validate_arguments(tool, {"direction": "up"})
    _validate_arguments(tool, {"direction": "left", "target": {"row": 1, "col": 2}})
    with pytest.raises(EnvironmentActionError, match="direction: 'north' is not one of"):
        _validate_arguments(tool, {"direction": "north"})
    with pytest.raises(EnvironmentActionError, match="target.row: 9 is greater than the maximum of 7"):
        _validate_arguments(tool, {"direction": "up", "target": {"row": 9, "col": 0}})


def test_tool_names_are_readable():
    assert _tool(MazeAction).name == "maze"  # two fields: the class, less "Action"
    assert _tool(REPLAction).name == "repl"  # an acronym stays one word (was r_e_p_l)
    assert _tool(PlayAction, "chess").name == "play"  # a single field called "action" names nothing: the class does
    assert class_name("127.0.0.1:8001") == "OpenEnv" and class_name("connect4_env") == "Connect4Env"


def test_the_description_is_the_prose_and_each_argument_keeps_its_own():
    tool = _tool(MazeAction)
    assert tool.description == "Walk one square."
    assert tool.parameters["target"]["description"] == "The square you expect to reach, used to check your map."
    mcp = ToolSpec(
        "add_note", "Add a note.\n\nArgs:\n    title: The note's title.\n", {"title": {"type": "string"}}, ("title",)
    )
    doc = tool_docstring(mcp)
    assert doc.count("title:") == 1 and doc.startswith("Add a note.")


def test_observations_keep_the_feedback_and_do_not_repeat_history():
    board = [[0, 0, 1], [0, 2, 1]]
    first = {"board": board, "history": ["e4"], "legal_moves": [0, 1, 2], "metadata": {}}
    illegal = {
        "board": board,
        "history": ["e4"],
        "legal_moves": [0, 1, 2],
        "metadata": {"error": "column 5 is full"},
        "reward": -0.1,
        "done": False,
    }
    text = observation_text(illegal, previous=first, reward=-0.1)
    assert "column 5 is full" in text and "reward: -0.1" in text, text
    assert "0 0 1\n0 2 1" in text  # the board as rows
    later = {"board": board, "history": ["e4", "e5", "Nf3"], "legal_moves": [1], "metadata": {}}
    text = observation_text(later, previous=illegal, reward=0.0, done=True)
    assert 'history: ["e5", "Nf3"]' in text and "The episode is over." in text, text
    # A counter that is 0 is labelled; an empty field is left out (no bare "0" or "[]").
    assert observation_text({"message": "Hi", "score": 0, "notes": []}) == "message: Hi\nscore: 0"
    assert observation_text({"prompt": "Guess a word"}) == "Guess a word"
    huge = observation_text({"log": "x" * 50_000})
    assert len(huge) < 1400 and "more characters" in huge


def test_a_history_that_grows_inside_a_message_is_shown_by_its_new_part():
    """TextArena (OpenEnv's textarena_env) keeps a game's whole log in one message whose text grows each turn, and
    sends it twice (``messages`` and ``metadata.raw_messages``). Shown whole, every turn repeated the log, and once
    it passed the field cap the cap cut the end: the model never saw the answer to its latest guess."""
    intro = "[GAME] You are Player 0. You are playing Guess The Number. " + "Rules. " * 100

    def turn(log: str) -> dict:
        message = {"sender_id": -1, "content": log, "category": "MESSAGE"}
        return {
            "prompt": "GuessTheNumber-v0",
            "messages": [message],
            "turn": log.count("[Player]"),
            "metadata": {"raw_messages": [message], "env_id": "GuessTheNumber-v0"},
        }

    log = intro
    previous = turn(log)
    for guess in range(1, 10):
        log += f"\n[Player] [{guess}]\n[GAME] The target number is higher than {guess}."
        observation = turn(log)
        text = observation_text(observation, previous=previous, reward=0.0)
        previous = observation
        assert f"The target number is higher than {guess}." in text, text
        assert "Rules." not in text and len(text) < 600, text  # only the new part, not the log again
    # Whatever is not a grown history is shown whole.
    assert "env_id: GuessTheNumber-v0" in text and "turn: 9" in text, text
    other = {"sender_id": 0, "content": "A different message", "category": "MESSAGE"}
    assert "A different message" in observation_text({"messages": [other]}, previous=previous)


def test_an_observation_template_lays_out_the_fields():
    spec = parse_spec(
        tiny_spec(
            method="grpo",
            dataset={"source": "builtin", "name": "echo-demo"},
            training={"batch_size": 4},
            grpo={"num_generations": 2},
            environment={"name": "builtin:echo", "observation_template": "{board}\nYour moves: {legal_moves}"},
        )
    )
    text = observation_text(
        {"board": [[1, 0]], "legal_moves": [1], "metadata": {"error": "full"}},
        template=spec.environment.observation_template,
    )
    assert text == "1 0\nYour moves: [1]\nerror: full"
    with pytest.raises(SpecError, match="not a plain field name"):
        parse_spec(
            tiny_spec(
                method="grpo",
                dataset={"source": "builtin", "name": "echo-demo"},
                training={"batch_size": 4},
                grpo={"num_generations": 2},
                environment={"name": "builtin:echo", "observation_template": "{board.__class__}"},
            )
        )


def test_a_url_environment_is_named_after_what_the_server_calls_itself():
    info = EnvironmentInfo("http://127.0.0.1:8001", "counter", "", "typed", ())
    assert reward_name(EnvironmentSpec(name="http://127.0.0.1:8001"), info) == "counter"
    assert class_name(reward_name(EnvironmentSpec(name="http://127.0.0.1:8001"), info)) == "CounterEnv"
    assert reward_name(EnvironmentSpec(name="builtin:echo"), info) == "echo"


def test_a_transcript_shows_the_models_reasoning():
    """A thinking model's turn is mostly reasoning (TRL parses it into ``reasoning_content``): a 58-token turn
    shown as "Done." hid what the model did."""
    from backend.environments.episodes import Episode

    turn = {"role": "assistant", "reasoning_content": "The target is 7,\nso I move up by 7.", "content": "Done."}
    episode = Episode(
        messages=[{"role": "user", "content": "Count to 7."}, turn],
        prompt_messages=1,
        reward=0.0,
        success=False,
        done=False,
        tool_calls=0,
        tool_failures=0,
        completion_tokens=58,
        stop_reason="the model answered without a tool call",
        seed=0,
    )
    text = episode.transcript()
    assert "The target is 7, so I move up by 7." in text and text.index("reasoning") < text.index("Done.")
