"""Rewards on what a completion says rather than whether it is right: its length and its keywords."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from backend.methods.rewards.reading import completion_text


class LengthTarget:
    """1.0 within ``tolerance`` of ``target_length``, falling linearly to 0.0 a further ``target_length`` away.

    Shape: with distance ``d = |length - target_length|`` and overshoot ``o = max(0, d - tolerance)``,
    the score is ``max(0, 1 - o / target_length)``. Length counts whitespace-separated words, or characters
    of the stripped text with ``unit="chars"``. For target 10 words and tolerance 2: 8-12 words score 1.0,
    17 words 0.5, 22 words or more 0.0, and an empty completion 0.2.

    >>> LengthTarget(10, tolerance=2)(["w " * 10, "w " * 17, "w " * 30, ""])
    [1.0, 0.5, 0.0, 0.2]
    """

    def __init__(self, target_length: int, tolerance: int = 0, unit: str = "words"):
        if target_length <= 0:
            raise ValueError("target_length must be positive")
        if unit not in ("words", "chars"):
            raise ValueError(f"unit must be 'words' or 'chars', not {unit!r}")
        self.target_length = target_length
        self.tolerance = tolerance
        self.unit = unit
        self.__name__ = "length"

    def __call__(self, completions, **kwargs) -> list[float]:
        return [self.score(self.measure(completion_text(c))) for c in completions]

    def measure(self, text: str) -> int:
        """The text's length in the configured unit (words or characters)."""
        return len(text.split()) if self.unit == "words" else len(text.strip())

    def score(self, length: int) -> float:
        """1.0 within ``tolerance`` of the target length, falling linearly to 0.0 as the length strays."""
        overshoot = max(0, abs(length - self.target_length) - self.tolerance)
        # (target - overshoot) / target rather than 1 - overshoot / target: exact 0.2 instead of 0.19999999999999996.
        return max(0.0, (self.target_length - overshoot) / self.target_length)


class Keywords:
    """The share of ``include`` words present, or 0.0 as soon as any ``exclude`` word is present.

    Words match whole (``cat`` is not found in ``category``), after NFKC and with whitespace collapsed,
    ignoring case unless ``case_sensitive``; a keyword may be a phrase, and blank keywords are ignored.
    With only ``exclude`` words the score is 1.0 when none is present, else 0.0.

    >>> Keywords(include=["paris", "france"], exclude=["london"])(["Paris, France", "Paris", "Paris not London"])
    [1.0, 0.5, 0.0]
    """

    def __init__(self, include: Sequence[str] = (), exclude: Sequence[str] = (), case_sensitive: bool = False):
        self.case_sensitive = case_sensitive
        # A blank keyword would match at every word boundary, so it is dropped rather than matched.
        self.include = [self._word_pattern(word) for word in include if word.strip()]
        self.exclude = [self._word_pattern(word) for word in exclude if word.strip()]
        if not (self.include or self.exclude):
            raise ValueError("keywords needs at least one non-blank include or exclude word")
        self.__name__ = "keywords"

    def __call__(self, completions, **kwargs) -> list[float]:
        return [self.score(completion_text(c)) for c in completions]

    def score(self, text: str) -> float:
        """0.0 if an excluded pattern matches, else the share of include patterns that match (1.0 if none)."""
        text = self._normalize(text)
        if any(pattern.search(text) for pattern in self.exclude):
            return 0.0
        if not self.include:
            return 1.0
        return sum(1 for pattern in self.include if pattern.search(text)) / len(self.include)

    def _normalize(self, text: str) -> str:
        # Whitespace is collapsed so a phrase keyword still matches across a line break or a double space.
        text = " ".join(unicodedata.normalize("NFKC", text).split())
        return text if self.case_sensitive else text.casefold()

    def _word_pattern(self, word: str) -> re.Pattern:
        # An escaped literal between single-character lookarounds: no backtracking, linear in the text.
        return re.compile(r"(?<!\w)" + re.escape(self._normalize(word)) + r"(?!\w)")
