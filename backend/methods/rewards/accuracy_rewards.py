"""Rewards that check the answer: TRL's math rewards (with its think_format, wrapped alike) and exact match."""

from __future__ import annotations

import unicodedata
from typing import Any

from backend.methods.rewards.reading import batch_column, completion_text

# math_verify's LaTeX parsing is quadratic on some inputs (a long run of unclosed "\boxed{") and its timeout
# only works in the main thread, so a Gradio handler could hang on one adversarial completion. The final
# answer sits at the end of a completion, so the math rewards read only this many trailing characters.
MATH_TAIL_CHARS = 32_768
THINK_END = "</think>"


# --- TRL's rewards -----------------------------------------------------------------------------------------


class TRLReward:
    """One of TRL's rewards (accuracy, reasoning_accuracy, think_format), fed plain or chat completions.

    TRL's rewards read ``completion[0]["content"]``: they need chat-shaped completions and look at the first
    message only. This wrapper hands them the text :func:`completion_text` picks, so plain-text datasets and
    multi-turn (tool) completions work too. accuracy and reasoning_accuracy compare against the ``solution``
    column with math_verify and return None where the solution itself cannot be parsed; they read only the
    last ``MATH_TAIL_CHARS`` characters of the answer, to stay fast on adversarial completions.

    >>> TRLReward("think_format")(["<think>hm</think> 4", "4"])
    [1.0, 0.0]
    """

    TRL_FUNCTIONS = {
        "accuracy": "accuracy_reward",
        "reasoning_accuracy": "reasoning_accuracy_reward",
        "think_format": "think_format_reward",
    }

    def __init__(self, name: str):
        if name not in self.TRL_FUNCTIONS:
            raise ValueError(f"{name!r} is not one of TRL's rewards ({', '.join(self.TRL_FUNCTIONS)})")
        self.reward_name = name
        self.__name__ = name

    def __call__(self, completions, **kwargs) -> list[float | None]:
        import trl.rewards  # imported here: TRL pulls in torch, and building rewards should stay cheap

        trl_function = getattr(trl.rewards, self.TRL_FUNCTIONS[self.reward_name])
        texts = [completion_text(c) for c in completions]
        if self.reward_name == "think_format":
            return trl_function(_as_chat(texts), **kwargs)
        solutions = [_solution_text(s) for s in batch_column(kwargs, "solution", self.reward_name, len(texts))]
        kwargs = {**kwargs, "solution": solutions}
        if self.reward_name == "reasoning_accuracy":
            texts = [_reasoning_answer_tail(t) for t in texts]
        else:
            texts = [t[-MATH_TAIL_CHARS:] for t in texts]
        return trl_function(_as_chat(texts), **kwargs)


def _as_chat(texts: list[str]) -> list[list[dict[str, str]]]:
    return [[{"role": "assistant", "content": text}] for text in texts]


def _solution_text(solution: Any) -> str:
    # Datasets often store numeric answers as numbers; math_verify only parses strings.
    return "" if solution is None else str(solution)


def _reasoning_answer_tail(text: str) -> str:
    """The answer after the last </think>, cut to its tail, still marked as following finished reasoning."""
    _, delimiter, answer = text.rpartition(THINK_END)
    if not delimiter:
        return text  # TRL scores unfinished reasoning 0.0 without parsing it
    return THINK_END + answer[-MATH_TAIL_CHARS:]


# --- exact match: the project's own answer check ----------------------------------------------------------


def normalize_answer(text: str, case_sensitive: bool = False) -> str:
    """NFKC, whitespace collapsed, case folded (unless case_sensitive), surrounding punctuation and quotes gone.

    >>> normalize_answer('  "Ｐａｒｉｓ."  ')
    'paris'
    """
    text = " ".join(unicodedata.normalize("NFKC", text).split())
    if not case_sensitive:
        text = text.casefold()
    return _strip_punctuation(text)


def _strip_punctuation(text: str) -> str:
    start, end = 0, len(text)
    while start < end and _is_punctuation_or_space(text[start]):
        start += 1
    while end > start and _is_punctuation_or_space(text[end - 1]):
        end -= 1
    return text[start:end]


def _is_punctuation_or_space(char: str) -> bool:
    return char.isspace() or unicodedata.category(char).startswith("P")


def last_boxed(text: str) -> str | None:
    r"""The content of the last balanced ``\boxed{...}``, or None.

    >>> last_boxed(r"so \boxed{\frac{1}{2}}")
    '\\frac{1}{2}'
    """
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth = 0
    content_start = start + len("\\boxed{")
    for index in range(content_start - 1, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return text[content_start:index]
    return None


class ExactMatch:
    r"""1.0 when the completion, or its last ``\boxed{...}``, equals the expected answer once both are normalised.

    Normalising (see :func:`normalize_answer`) applies NFKC, collapses whitespace, folds case unless
    ``case_sensitive``, and strips surrounding punctuation and quotes, so ``"Paris."`` matches ``paris``.
    The expected answer comes from the dataset column ``column``; a list there means "any of these".
    A row whose expected answer is None scores None (TRL skips it).

    >>> ExactMatch("answer")(["Paris.", r"It is \boxed{paris}", "Lyon"], answer=["paris"] * 3)
    [1.0, 1.0, 0.0]
    """

    def __init__(self, column: str, case_sensitive: bool = False):
        self.column = column
        self.case_sensitive = case_sensitive
        self.__name__ = "exact_match"

    def __call__(self, completions, **kwargs) -> list[float | None]:
        expected = batch_column(kwargs, self.column, "exact_match", len(completions))
        return [self.score(completion_text(c), answer) for c, answer in zip(completions, expected)]

    def score(self, text: str, expected: Any) -> float | None:
        """1.0 when the text (or its last ``\\boxed{}``) equals an expected answer, 0.0 if not, None without one."""
        answers = self._normalized_answers(expected)
        if not answers:
            return None
        candidates = {self._normalize(text)}
        boxed = last_boxed(text)
        if boxed is not None:
            candidates.add(self._normalize(boxed))
        return 1.0 if candidates & answers else 0.0

    def _normalized_answers(self, expected: Any) -> set[str]:
        if expected is None:
            return set()
        options = expected if isinstance(expected, (list, tuple)) else [expected]
        return {self._normalize(str(option)) for option in options if option is not None}

    def _normalize(self, text: str) -> str:
        return normalize_answer(text, self.case_sensitive)
