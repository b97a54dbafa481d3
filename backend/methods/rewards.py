"""GRPO reward functions built from RewardSpecs, and a bench that scores typed completions with them."""

from __future__ import annotations

import functools
import json
import logging
import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

import regex

from backend.core.spec import RewardSpec, SpecError

log = logging.getLogger(__name__)

RewardFunction = Callable[..., list[float | None]]

# Keyword arguments TRL passes to every reward besides the dataset columns; a dataset row must not shadow them.
TRAINER_KWARGS = frozenset({"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric"})
# Columns TRL hands to rewards under other names (prompts=, completions=), never as themselves.
NON_REWARD_COLUMNS = frozenset({"prompt", "completion", "completion_ids"})

# math_verify's LaTeX parsing is quadratic on some inputs (a long run of unclosed "\boxed{") and its timeout
# only works in the main thread, so a Gradio handler could hang on one adversarial completion. The final
# answer sits at the end of a completion, so the math rewards read only this many trailing characters.
MATH_TAIL_CHARS = 32_768
THINK_END = "</think>"
# A user's pattern can backtrack exponentially ("(a|aa)+$"); Python's re cannot be interrupted and holds the GIL, so
# user patterns run on the ``regex`` package with a time limit per match (and release the GIL while matching).
USER_PATTERN_TIMEOUT_S = 0.1


def search_user_pattern(pattern: regex.Pattern, text: str) -> bool | None:
    """Whether a user's compiled pattern occurs in ``text``; None when it ran out of time.

    >>> search_user_pattern(regex.compile("(a|aa)+$"), "a" * 40 + "b") is None
    True
    """
    try:
        return pattern.search(text, timeout=USER_PATTERN_TIMEOUT_S, concurrent=True) is not None
    except TimeoutError:
        return None


# --- reading completions -----------------------------------------------------------------------------------


def completion_text(completion: Any) -> str:
    """The text a reward scores: a plain completion itself, or the last assistant message's content.

    >>> completion_text("Paris")
    'Paris'
    >>> completion_text([{"role": "assistant", "content": "Paris"}])
    'Paris'
    >>> completion_text([{"role": "assistant", "content": None}])
    ''
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    for message in reversed(list(completion)):
        # TRL's own examples omit the role on completion messages, so a missing role means the model spoke.
        if isinstance(message, dict) and message.get("role", "assistant") == "assistant":
            return _content_text(message.get("content"))
    return ""


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal content: [{"type": "text", "text": ...}, {"type": "image"}]
        return "".join(part.get("text") or "" for part in content if isinstance(part, dict))
    return str(content)


def _column(kwargs: dict[str, Any], column: str, reward_name: str, count: int) -> list[Any]:
    if column not in kwargs:
        raise ValueError(f"the {reward_name} reward needs the dataset column {column!r}, which the batch lacks")
    values = list(kwargs[column])
    if len(values) != count:
        raise ValueError(f"column {column!r} has {len(values)} values for {count} completions")
    return values


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
        solutions = [_solution_text(s) for s in _column(kwargs, "solution", self.reward_name, len(texts))]
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


# --- project rewards ---------------------------------------------------------------------------------------


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
        expected = _column(kwargs, self.column, "exact_match", len(completions))
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


class RegexMatch:
    r"""1.0 if the pattern occurs anywhere in the completion (a search), else 0.0.

    Case is ignored unless ``case_sensitive``. The pattern is the user's, so each search may take at most
    ``USER_PATTERN_TIMEOUT_S``: one that runs longer scores 0.0, is logged, and its index is kept in
    ``timed_out`` (for the test bench to say so).

    >>> RegexMatch(r"answer: \d+")(["Answer: 42", "no idea"])
    [1.0, 0.0]
    """

    def __init__(self, pattern: str, case_sensitive: bool = False):
        self.pattern = regex.compile(pattern, regex.V0 if case_sensitive else regex.V0 | regex.IGNORECASE)
        self.timed_out: list[int] = []
        self.__name__ = "regex"

    def __call__(self, completions, **kwargs) -> list[float]:
        found = [search_user_pattern(self.pattern, completion_text(c)) for c in completions]
        self.timed_out = [index for index, hit in enumerate(found) if hit is None]
        if self.timed_out:
            log.warning(
                "%s reward: pattern %r ran past %.1f s on %d of %d completions; they score 0.0",
                self.__name__,
                self.pattern.pattern[:80],
                USER_PATTERN_TIMEOUT_S,
                len(self.timed_out),
                len(found),
            )
        return [1.0 if hit else 0.0 for hit in found]


class ValidJSON:
    """1.0 if the completion is JSON (and, given a schema, valid under JSON Schema Draft 2020-12), else 0.0.

    The whole completion, stripped, must be JSON, or be one fenced block (```json ... ``` or ``` ... ```)
    holding JSON; prose around the JSON scores 0.0. NaN and Infinity are refused, as strict JSON does,
    and so is nesting too deep for Python to parse.

    >>> ValidJSON({"type": "object", "required": ["name"]})(['{"name": "x"}', '```json\\n{"name": 1}\\n```', "{}"])
    [1.0, 1.0, 0.0]
    """

    def __init__(self, json_schema: dict[str, Any] | None = None):
        self.json_schema = json_schema
        self._validator = None
        self.__name__ = "valid_json"

    def __call__(self, completions, **kwargs) -> list[float]:
        return [self.score(completion_text(c)) for c in completions]

    def score(self, text: str) -> float:
        """1.0 when the text (code fences removed) is JSON that fits the schema, else 0.0."""
        try:
            document = json.loads(unfence(text), parse_constant=_refuse_constant)
        except (ValueError, RecursionError):
            return 0.0
        return 1.0 if self._fits_schema(document) else 0.0

    def _fits_schema(self, document: Any) -> bool:
        if self.json_schema is None:
            return True
        from referencing.exceptions import Unresolvable

        try:
            return self.validator().is_valid(document)
        except (RecursionError, Unresolvable):  # a $ref that leads nowhere fails the completion, not the job
            return False

    def validator(self):
        """The JSON-schema validator for ``json_schema``, built on first use with time-limited patterns."""
        if self._validator is None:
            self._validator = _time_limited_pattern_validator()(self.json_schema)
        return self._validator

    def __getstate__(self) -> dict[str, Any]:
        # jsonschema validators hold local functions and cannot be pickled; rebuild one after unpickling.
        return {**self.__dict__, "_validator": None}


def _time_limited_pattern_validator():
    """Draft 2020-12 with the schema's own regexes (pattern, patternProperties) run like every user pattern:
    on ``regex`` with a time limit, a timeout counting as no match. (unevaluatedProperties still uses re.)"""
    from jsonschema import Draft202012Validator, ValidationError, validators

    def matches(pattern: str, text: str) -> bool:
        try:
            return bool(search_user_pattern(_compiled(pattern), text))
        except regex.error:
            return False

    def pattern(validator, pattern_text, instance, schema):
        if validator.is_type(instance, "string") and not matches(pattern_text, instance):
            yield ValidationError(f"{instance[:80]!r} does not match {pattern_text[:80]!r}")

    def pattern_properties(validator, patterns, instance, schema):
        if not validator.is_type(instance, "object"):
            return
        for pattern_text, subschema in patterns.items():
            for key, value in instance.items():
                if matches(pattern_text, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern_text)

    def additional_properties(validator, allowed, instance, schema):
        if not validator.is_type(instance, "object"):
            return
        named, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
        extras = [key for key in instance if key not in named and not any(matches(p, key) for p in patterns)]
        if validator.is_type(allowed, "object"):
            for key in extras:
                yield from validator.descend(instance[key], allowed, path=key)
        elif not allowed and extras:
            yield ValidationError(f"additional properties are not allowed ({', '.join(map(repr, extras[:5]))})")

    return validators.extend(
        Draft202012Validator,
        {
            "pattern": pattern,
            "patternProperties": pattern_properties,
            "additionalProperties": additional_properties,
        },
    )


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> regex.Pattern:
    return regex.compile(pattern, regex.V0)


def unfence(text: str) -> str:
    """The inside of a completion that is one Markdown code fence, else the stripped completion.

    >>> unfence('```json\\n{"a": 1}\\n```')
    '{"a": 1}'
    """
    text = text.strip()
    if not (text.startswith("```") and text.endswith("```") and len(text) >= 6):
        return text
    inner = text[3:-3]
    first_line, newline, rest = inner.partition("\n")
    # The opening line may carry a language tag (```json); if the fence is all on one line, keep it all.
    return (rest if newline else first_line).strip()


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


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


# --- from specs --------------------------------------------------------------------------------------------


def build_reward(spec: RewardSpec) -> RewardFunction:
    """The reward callable one RewardSpec describes; its weight is applied by TRL (GRPOConfig.reward_weights)."""
    if spec.name in TRLReward.TRL_FUNCTIONS:
        return TRLReward(spec.name)
    if spec.name == "exact_match":
        return ExactMatch(spec.column, case_sensitive=spec.case_sensitive)
    if spec.name == "regex":
        return RegexMatch(spec.pattern, case_sensitive=spec.case_sensitive)
    if spec.name == "valid_json":
        return ValidJSON(spec.json_schema)
    if spec.name == "length":
        return LengthTarget(spec.target_length, tolerance=spec.tolerance, unit=spec.unit)
    if spec.name == "keywords":
        return Keywords(spec.include, spec.exclude, case_sensitive=spec.case_sensitive)
    raise ValueError(f"no reward is built for {spec.name!r}")


def build_rewards(specs: Sequence[RewardSpec]) -> tuple[list[RewardFunction], list[float]]:
    """Reward callables and their weights; repeated names get suffixes (keywords, keywords_2) so metrics stay apart."""
    functions = [build_reward(spec) for spec in specs]
    for function, name in zip(functions, unique_names([spec.name for spec in specs])):
        function.__name__ = name
    return functions, [spec.weight for spec in specs]


def unique_names(names: Sequence[str]) -> list[str]:
    """
    >>> unique_names(["keywords", "regex", "keywords"])
    ['keywords', 'regex', 'keywords_2']
    """
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return unique


def required_columns(spec: RewardSpec) -> set[str]:
    """Dataset columns the reward reads; pre-flight refuses a dataset that lacks one."""
    if spec.name in ("accuracy", "reasoning_accuracy"):
        return {"solution"}
    if spec.name == "exact_match":
        return {spec.column}
    return set()


def missing_columns(specs: Sequence[RewardSpec], columns: set[str] | Sequence[str]) -> list[str]:
    """One sentence per column a reward needs that ``columns`` lacks; empty when all are there."""
    present = set(columns)
    return [
        f"column {column!r} is missing: the {spec.name} reward reads the expected answer from it"
        for spec in specs
        for column in sorted(required_columns(spec) - present)
    ]


# --- the reward test bench ---------------------------------------------------------------------------------


# What one bench call may score: enough to try rewards by hand, too little to tie up the app.
BENCH_MAX_COMPLETIONS = 32
BENCH_MAX_COMPLETION_CHARS = 8_000
BENCH_MAX_ROW_CHARS = 16_000
BENCH_MAX_REWARDS = 16


def bench_input_problems(specs: Sequence[Any], completions: Sequence[Any], row: dict[str, Any] | None) -> list[str]:
    """Sentences for bench input over the limits (nothing is scored then); empty when it fits."""
    problems = []
    if len(specs) > BENCH_MAX_REWARDS:
        problems.append(
            f"rewards: the bench scores at most {BENCH_MAX_REWARDS} rewards at once; you gave {len(specs)}, remove some"
        )
    if len(completions) > BENCH_MAX_COMPLETIONS:
        problems.append(
            f"completions: the bench scores at most {BENCH_MAX_COMPLETIONS} completions at once; "
            f"you gave {len(completions)}, score them in parts"
        )
    longest = max((len(completion_text(c)) for c in completions), default=0)
    if longest > BENCH_MAX_COMPLETION_CHARS:
        problems.append(
            f"completions: each may be at most {BENCH_MAX_COMPLETION_CHARS:,} characters; the longest has "
            f"{longest:,}, shorten it"
        )
    if row is not None:
        size = len(json.dumps(row, default=str))
        if size > BENCH_MAX_ROW_CHARS:
            problems.append(
                f"row: the dataset row may be at most {BENCH_MAX_ROW_CHARS:,} characters of JSON; "
                f"it has {size:,}, keep only the columns the rewards read"
            )
    return problems


def score_completions(
    specs: Sequence[RewardSpec], completions: Sequence[Any], row: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Score typed completions with every reward, as GRPO would for one dataset row.

    Returns one ``{"completion", "scores", "total", "notes"}`` per completion. ``scores`` maps each reward's
    name to its score, None where the reward does not apply; ``total`` is the weighted sum with None
    counted as 0, as TRL sums rewards; ``notes`` says where a user pattern ran out of time (scored 0.0).
    Raises SpecError when the input is over the bench's limits or the row lacks a column a reward needs.
    """
    problems = bench_input_problems(specs, completions, row)
    if problems:
        raise SpecError(problems)
    row = dict(row or {})
    problems = missing_columns(specs, row)
    if problems:
        raise SpecError(problems)
    functions, weights = build_rewards(specs)
    reward_kwargs = _row_as_batch(row, len(completions))
    scores_by_reward = {fn.__name__: fn(completions=list(completions), **reward_kwargs) for fn in functions}
    notes: dict[int, list[str]] = {}
    for fn in functions:
        for index in getattr(fn, "timed_out", ()):
            notes.setdefault(index, []).append(
                f"{fn.__name__}: the pattern ran past {USER_PATTERN_TIMEOUT_S} s and scored 0.0; simplify it"
            )
    return [
        {
            **_scored(
                completion, {name: scores[index] for name, scores in scores_by_reward.items()}, functions, weights
            ),
            "notes": notes.get(index, []),
        }
        for index, completion in enumerate(completions)
    ]


def _row_as_batch(row: dict[str, Any], count: int) -> dict[str, list[Any]]:
    columns = {
        name: [value] * count
        for name, value in row.items()
        if name not in NON_REWARD_COLUMNS and name not in TRAINER_KWARGS
    }
    if "prompt" in row:
        columns["prompts"] = [row["prompt"]] * count
    return columns


def _scored(completion: Any, scores: dict[str, float | None], functions, weights) -> dict[str, Any]:
    total = sum(weight * (scores[fn.__name__] or 0.0) for fn, weight in zip(functions, weights))
    return {"completion": completion_text(completion), "scores": scores, "total": total}
