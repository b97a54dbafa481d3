"""Wordle: a typed-action environment where the agent guesses a secret five-letter word in six tries."""

from __future__ import annotations

from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State
from pydantic import ConfigDict, Field

from backend.environments.builtin.serving import EnvironmentServer, ServedEnvironment, seeded_choice
from backend.environments.builtin.splits import word_list

WORD_LENGTH = 5
MAX_GUESSES = 6
TOOL_NAME = "guess"
RULES = (
    "Guess the secret 5-letter word; you have 6 guesses. After each guess you get one code per letter: "
    "G = right letter in the right place, Y = the letter is in the word but elsewhere, X = not in the word "
    "(a repeated letter counts only as often as it occurs in the word)."
)


def normalize_word(text: str, what: str = "guess") -> str:
    """Lower-case and strip ``text``; raise ValueError unless it is exactly five letters A-Z."""
    if not isinstance(text, str):
        raise ValueError(f"the {what} must be a string of {WORD_LENGTH} letters, got {type(text).__name__}")
    word = text.strip().lower()
    if len(word) != WORD_LENGTH or not (word.isascii() and word.isalpha()):
        raise ValueError(f"the {what} must be exactly {WORD_LENGTH} letters A-Z, got {text!r}")
    return word


def score_guess(guess: str, word: str) -> str:
    """One code per letter of ``guess`` against ``word``: G right place, Y elsewhere in the word, X absent.

    A letter is marked Y only as many times as it is still unmatched in the word:

    >>> score_guess("crane", "crane")
    'GGGGG'
    >>> score_guess("speed", "abide")
    'XXYXY'
    >>> score_guess("eerie", "there")
    'YXYXG'
    """
    codes = ["X"] * len(guess)
    unmatched: dict[str, int] = {}
    for i, (g, w) in enumerate(zip(guess, word)):
        if g == w:
            codes[i] = "G"
        else:
            unmatched[w] = unmatched.get(w, 0) + 1
    for i, g in enumerate(guess):
        if codes[i] != "G" and unmatched.get(g, 0) > 0:
            codes[i] = "Y"
            unmatched[g] -= 1
    return "".join(codes)


class WordleAction(Action):
    """Guess the secret word: one five-letter English word. Returns one code per letter (G/Y/X)."""

    # Pydantic merges this with Action's config (validate_assignment, arbitrary types); x-tool-name names the tool.
    model_config = ConfigDict(extra="forbid", json_schema_extra={"x-tool-name": TOOL_NAME})

    guess: str = Field(description="Your guess: exactly five letters, e.g. 'crane'")


class WordleObservation(Observation):
    """The result of reset or of one guess."""

    feedback: str = Field(
        description="One code per letter of the last guess (G right place, Y elsewhere in the word, X absent); "
        "empty after reset"
    )
    guesses_left: int = Field(description="Guesses remaining in this episode")
    message: str = Field(description="What happened, in words (the rules after reset)")


class WordleState(State):
    """The secret word and the guesses so far."""

    word: str = Field(default="", description="The secret word")
    guesses: list[str] = Field(default_factory=list, description="Valid guesses made so far")
    max_guesses: int = Field(default=MAX_GUESSES, description="Guesses allowed per episode")
    done: bool = Field(default=False, description="Whether the episode has ended")
    won: bool = Field(default=False, description="Whether the word was guessed")


class WordleEnvironment(ServedEnvironment, Environment[WordleAction, WordleObservation, WordleState]):
    """Six guesses to find a five-letter word; reward 1.0 on a win, 0.0 otherwise."""

    NAME = "wordle"
    DESCRIPTION = "Guess a five-letter word in six tries with G/Y/X feedback. Reward 1.0 on a win."

    def __init__(self) -> None:
        super().__init__()
        self._state = WordleState()

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        word: str | None = None,
        split: str | None = None,
        index: int | None = None,
        **kwargs: Any,
    ) -> WordleObservation:
        """Start a game with ``word`` as the secret (or task ``index`` of ``split``'s, or one picked from the word list
        with ``seed``)."""
        word = self.task_arguments(split, index).get("word", word)
        secret = seeded_choice(word_list(), seed) if word is None else normalize_word(word, "secret word")
        self._state = WordleState(episode_id=episode_id, word=secret)
        return WordleObservation(feedback="", guesses_left=MAX_GUESSES, message=RULES, reward=None, done=False)

    def step(self, action: WordleAction, timeout_s: float | None = None, **kwargs: Any) -> WordleObservation:
        """Score one guess; invalid guesses raise ValueError and do not use up a guess."""
        state = self._state
        if not state.word:
            raise RuntimeError("no game is running; call reset before guessing")
        if state.done:
            raise RuntimeError("the episode is over; call reset to start a new game")
        guess = normalize_word(action.guess)
        feedback = score_guess(guess, state.word)
        state.guesses.append(guess)
        state.step_count += 1
        state.won = guess == state.word
        left = state.max_guesses - len(state.guesses)
        state.done = state.won or left == 0
        if state.won:
            message = f"{guess}: {feedback}. Solved in {len(state.guesses)} guesses!"
        elif state.done:
            message = f"{guess}: {feedback}. Out of guesses; the word was {state.word!r}."
        else:
            message = f"{guess}: {feedback}. {left} guesses left."
        return WordleObservation(
            feedback=feedback, guesses_left=left, message=message, reward=1.0 if state.won else 0.0, done=state.done
        )


SERVER = EnvironmentServer(
    WordleEnvironment,
    WordleAction,
    WordleObservation,
    WordleState,
    "Serve the Wordle OpenEnv environment (typed action: guess).",
)
build_app, main, __getattr__ = SERVER.build_app, SERVER.main, SERVER.module_getattr(__name__)

if __name__ == "__main__":
    main()
