"""Arithmetic: a typed-action environment posing one integer sum, difference or product, with three tries."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State
from pydantic import ConfigDict, Field

from backend.environments.builtin.serving import EnvironmentServer, ServedEnvironment, episode_rng

MAX_TRIES = 3
TOOL_NAME = "submit_answer"
OPERATIONS: dict[str, Callable[[int, int], int]] = {"+": operator.add, "-": operator.sub, "*": operator.mul}
# Operand ranges used when reset does not give them: small enough to be a fair question.
OPERAND_RANGES: dict[str, tuple[int, int]] = {"+": (1, 50), "-": (1, 50), "*": (2, 12)}


class ArithmeticAction(Action):
    """Submit your answer to the question: one whole number (it may be negative)."""

    # Pydantic merges this with Action's config (validate_assignment, arbitrary types); x-tool-name names the tool.
    model_config = ConfigDict(extra="forbid", json_schema_extra={"x-tool-name": TOOL_NAME})

    answer: int = Field(description="The result of the calculation, as a whole number")


class ArithmeticObservation(Observation):
    """The question and how the last answer fared."""

    question: str = Field(description="The calculation to do, e.g. 'What is 17 + 25?'")
    feedback: str = Field(
        description="How the last answer fared ('Too high.', 'Too low.', 'Correct!'); instructions after reset"
    )
    tries_left: int = Field(description="Answers still allowed in this episode")


class ArithmeticState(State):
    """The question, its answer and the answers tried."""

    a: int = Field(default=0, description="Left operand")
    b: int = Field(default=0, description="Right operand")
    op: str = Field(default="+", description="Operator: +, - or *")
    expected: int = Field(default=0, description="The correct answer")
    answers: list[int] = Field(default_factory=list, description="Answers submitted so far")
    max_tries: int = Field(default=MAX_TRIES, description="Answers allowed per episode")
    started: bool = Field(default=False, description="Whether reset has posed a question")
    done: bool = Field(default=False, description="Whether the episode has ended")
    won: bool = Field(default=False, description="Whether the correct answer was given")


def _operand(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return value


class ArithmeticEnvironment(ServedEnvironment, Environment[ArithmeticAction, ArithmeticObservation, ArithmeticState]):
    """Answer ``a op b`` in up to three tries with too-high/too-low hints; reward 1.0 when correct."""

    NAME = "arithmetic"
    DESCRIPTION = "Answer one integer calculation in three tries with too-high/too-low hints. Reward 1.0 when correct."

    def __init__(self) -> None:
        super().__init__()
        self._state = ArithmeticState()

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        a: int | None = None,
        b: int | None = None,
        op: str | None = None,
        split: str | None = None,
        index: int | None = None,
        **kwargs: Any,
    ) -> ArithmeticObservation:
        """Pose ``a op b`` (or task ``index`` of ``split``); operands or operator left out are drawn with ``seed``."""
        task = self.task_arguments(split, index)
        a, b, op = task.get("a", a), task.get("b", b), task.get("op", op)
        rng = episode_rng(seed)
        if op is None:
            op = rng.choice(sorted(OPERATIONS))
        elif op not in OPERATIONS:
            raise ValueError(f"op must be one of {', '.join(OPERATIONS)}, got {op!r}")
        low, high = OPERAND_RANGES[op]
        a = rng.randint(low, high) if a is None else _operand(a, "a")
        b = rng.randint(low, high) if b is None else _operand(b, "b")
        self._state = ArithmeticState(
            episode_id=episode_id, a=a, b=b, op=op, expected=OPERATIONS[op](a, b), started=True
        )
        return ArithmeticObservation(
            question=self._question(),
            feedback=f"Answer with the {TOOL_NAME} tool; you have {MAX_TRIES} tries.",
            tries_left=MAX_TRIES,
            reward=None,
            done=False,
        )

    def _question(self) -> str:
        s = self._state
        return f"What is {s.a} {s.op} {s.b}?"

    def step(self, action: ArithmeticAction, timeout_s: float | None = None, **kwargs: Any) -> ArithmeticObservation:
        """Check one answer."""
        state = self._state
        if not state.started:
            raise RuntimeError("no question is posed; call reset before submitting an answer")
        if state.done:
            raise RuntimeError("the episode is over; call reset to get a new question")
        state.answers.append(action.answer)
        state.step_count += 1
        state.won = action.answer == state.expected
        left = state.max_tries - len(state.answers)
        state.done = state.won or left == 0
        if state.won:
            feedback = f"Correct! {state.a} {state.op} {state.b} = {state.expected}."
        else:
            feedback = "Too high." if action.answer > state.expected else "Too low."
            feedback += f" The answer was {state.expected}." if state.done else f" {left} tries left."
        return ArithmeticObservation(
            question=self._question(),
            feedback=feedback,
            tries_left=left,
            reward=1.0 if state.won else 0.0,
            done=state.done,
        )


def solve(row: dict[str, Any]) -> dict[str, Any] | None:
    """The submit_answer arguments that are right for a dataset row's ``a``, ``op`` and ``b`` (what its reset poses),
    or None when the row leaves them to the seed. The warm-up tries them first, so its demonstrations are right.

    >>> solve({"a": 17, "b": 25, "op": "-"}), solve({"prompt": "no operands"})
    ({'answer': -8}, None)
    """
    a, b, op = row.get("a"), row.get("b"), row.get("op")
    if type(a) is not int or type(b) is not int or op not in OPERATIONS:
        return None
    return {"answer": OPERATIONS[op](a, b)}


SERVER = EnvironmentServer(
    ArithmeticEnvironment,
    ArithmeticAction,
    ArithmeticObservation,
    ArithmeticState,
    "Serve the arithmetic OpenEnv environment (typed action: submit_answer).",
)
build_app, main, __getattr__ = SERVER.build_app, SERVER.main, SERVER.module_getattr(__name__)

if __name__ == "__main__":
    main()
