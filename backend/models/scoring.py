"""Scoring models on rows outside a trainer's loop: every side (an adapter, or the base with it off) in the same
batches, per-row values kept for the learning verdict. The methods' evaluations are built from these."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from backend.models.mixed_batch import GenerationSettings, mixed_generate, mixed_logprobs

PER_ROW = "per_row"


# Greedy answers are this many tokens longer than the reference at most (and never longer than ANSWER_TOKENS).
ANSWER_SLACK_TOKENS = 16


ANSWER_TOKENS = 256


_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def as_messages(value) -> list[dict] | None:
    """``value`` when it is a conversation (a list of messages), else None."""
    return value if isinstance(value, list) else None


def row_tools(row) -> list[dict] | None:
    """A row's ``tools`` column as the trainers read it: TRL accepts the JSON schemas as a list or as one JSON string
    (a string keeps rows whose tools differ loadable by ``datasets``); None when the row has none."""
    tools = row.get("tools") if isinstance(row, dict) else None
    return json.loads(tools) if isinstance(tools, str) else tools


def render_texts(tokenizer, prompt, completion=None, tools: list[dict] | None = None) -> tuple[str, str]:
    """(prompt text with the generation prompt, full text) the way the trainers render a row; a conversation's
    ``tools`` (JSON schemas) go into the chat template, as TRL passes a row's ``tools`` column."""
    if as_messages(prompt) is not None:
        prompt_text = tokenizer.apply_chat_template(prompt, tools=tools, add_generation_prompt=True, tokenize=False)
        if completion is None:
            return prompt_text, prompt_text
        full = tokenizer.apply_chat_template(prompt + completion, tools=tools, tokenize=False)
        return prompt_text, full
    return prompt, prompt + (completion or "")


# Sequences per forward pass: a held-out set of any size is scored in chunks of this many rows (every side counted).
BATCH_ROWS = 16


# Told the share of a pass over the rows that is scored (0 to 1) as each chunk is done: the evaluation's progress.
_ON_PASS: ContextVar[Callable[[float], None] | None] = ContextVar("scoring_progress", default=None)


@contextmanager
def reporting_progress(on_pass: Callable[[float], None]) -> Iterator[None]:
    """While inside, every pass over rows (:func:`chunks`) tells ``on_pass`` its share scored after each chunk."""
    token = _ON_PASS.set(on_pass)
    try:
        yield
    finally:
        _ON_PASS.reset(token)


# Sequences per generate call for short answers: the cost of a batch is mostly its number of decoding steps, and a
# large batch shares them (256 rows, base and tuned, in one call), within a budget of tokens held (prompt and answer).
GENERATION_ROWS = 512
GENERATION_TOKENS = 32768


def generation_rows(longest_prompt: int, new_tokens: int) -> int:
    """Sequences per generate call: :data:`GENERATION_ROWS`, fewer where long prompts would hold too many tokens.

    >>> generation_rows(40, 20), generation_rows(1000, 256), generation_rows(100000, 10)
    (512, 26, 16)
    """
    return max(BATCH_ROWS, min(GENERATION_ROWS, GENERATION_TOKENS // max(longest_prompt + new_tokens, 1)))


def chunks(items: list, size: int = BATCH_ROWS):
    """``items`` in slices of at most ``size``: the rows of one forward pass. Each slice done is reported to the
    progress of :func:`reporting_progress`, if any."""
    on_pass = _ON_PASS.get()
    for start in range(0, len(items), size):
        yield items[start : start + size]
        if on_pass is not None:
            on_pass(min(start + size, len(items)) / len(items))


def per_side(sides: list[str | None], values: list[tuple[str | None, Any]]) -> dict[str | None, list]:
    """(side, value) pairs grouped by side, every side present."""
    by_side: dict[str | None, list] = {side: [] for side in sides}
    for side, value in values:
        by_side[side].append(value)
    return by_side


def mean(values: list[float]) -> float:
    """The mean of ``values`` (0 for none)."""
    return sum(values) / len(values) if values else 0.0


def _answer_key(text: str) -> str:
    """What two answers are compared by: the last ``\\boxed{}`` if there is one, else the text, whitespace folded."""
    boxed = _BOXED.findall(text or "")
    return boxed[-1].strip() if boxed else " ".join((text or "").split())


def same_answer(answer: str, reference: str) -> bool:
    """Whether an answer matches a reference answer as held-out accuracy counts it: the last ``\\boxed{}`` if the
    text has one, else the whole text, whitespace folded.

    >>> same_answer(r"so 3 + 4 = \\boxed{7}", r"3 + 4 = \\boxed{7}"), same_answer("seven", " seven  ")
    (True, True)
    """
    return _answer_key(answer) == _answer_key(reference)


def answer_scores(
    model, tokenizer, prompts: list, references: list[str], sides, tools: list[list[dict] | None] | None = None
) -> dict[str | None, dict]:
    """Greedy answers of every side to ``prompts`` against the reference answers: exact match (the boxed answer, or
    the whole answer with whitespace folded) and, where the references box their answer, answer format (the answer
    has a ``\\boxed{}``). Per side: the shares and the per-row values. ``tools``: each prompt's tool schemas (or
    None), rendered into its chat template."""
    longest = max(len(tokenizer(ref, add_special_tokens=False)["input_ids"]) for ref in references)
    settings = GenerationSettings(max_new_tokens=min(ANSWER_TOKENS, longest + ANSWER_SLACK_TOKENS), temperature=0)
    answers = generate_completions(model, tokenizer, prompts, sides, settings, tools, batched=True)
    boxed = all(_BOXED.search(ref) for ref in references)
    result = {}
    for side, texts in answers.items():
        exact = [float(same_answer(t, r)) for t, r in zip(texts, references)]
        scores: dict[str, Any] = {"exact_match": mean(exact), PER_ROW: {"exact_match": exact}}
        if boxed:
            shaped = [float(bool(_BOXED.search(t))) for t in texts]
            scores["answer_format"] = mean(shaped)
            scores[PER_ROW]["answer_format"] = shaped
        result[side] = scores
    return result


T = TypeVar("T")


def all_present(values: list[T | None]) -> list[T] | None:
    """``values`` when none of them is None (a row each method can score), else None.

    >>> all_present([1, 2]), all_present([1, None])
    ([1, 2], None)
    """
    present = [value for value in values if value is not None]
    return present if len(present) == len(values) else None


def answer_pair(prompt, completion) -> tuple[Any, str] | None:
    """(prompt, reference answer) of a row whose completion is one assistant answer in text, else None."""
    if isinstance(completion, str):
        return prompt, completion
    if (
        isinstance(completion, list)
        and len(completion) == 1
        and isinstance(completion[0], dict)
        and completion[0].get("role") == "assistant"
        and isinstance(completion[0].get("content"), str)
        and not completion[0].get("tool_calls")
    ):
        return prompt, completion[0]["content"]
    return None


def merge_scores(into: dict[str | None, dict], extra: dict[str | None, dict]) -> dict[str | None, dict]:
    """Add ``extra``'s scores (and per-row values) to ``into``'s, side by side."""
    for side, scores in extra.items():
        per_row = {**into[side].get(PER_ROW, {}), **scores.pop(PER_ROW, {})}
        into[side].update(scores)
        into[side][PER_ROW] = per_row
    return into


def generate_completions(
    model, tokenizer, prompts, sides, settings: GenerationSettings, tools: list | None = None, batched: bool = False
) -> dict[str | None, list[str]]:
    """Each prompt's completion under each side, all sides in the same batches; ``tools``: each prompt's tool schemas
    (or None), rendered into its chat template. ``batched``: short answers, many rows per call
    (:func:`generation_rows`), else :data:`BATCH_ROWS` sequences per call.

    Prompt i is sampled with seed ``settings.seed + i`` on every side (its own random stream), so a completion does
    not depend on how the rows are batched, and base and tuned draw the same random numbers for the same prompt.
    """
    tools = tools or [None] * len(prompts)
    texts = [render_texts(tokenizer, prompt, tools=schemas)[0] for prompt, schemas in zip(prompts, tools)]
    # Prompts of about the same length share a batch (little padding); each keeps its own seed, so the order of the
    # batches changes nothing but the time.
    lengths = [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts]
    order = sorted(range(len(prompts)), key=lambda i: lengths[i])
    items = [(i, side) for i in order for side in sides]
    completions = []
    size = generation_rows(max(lengths, default=0), settings.max_new_tokens) if batched else BATCH_ROWS
    for chunk in chunks(items, size):
        ids = mixed_generate(
            model,
            tokenizer,
            [texts[i] for i, _ in chunk],
            [side for _, side in chunk],
            settings,
            row_seeds=[settings.seed + i for i, _ in chunk],
        )
        completions += [tokenizer.decode(row, skip_special_tokens=True) for row in ids]
    answers = {(i, side): text for (i, side), text in zip(items, completions)}
    return {side: [answers[i, side] for i in range(len(prompts))] for side in sides}


def split_answer(row) -> tuple[Any, Any] | None:
    """(prompt, completion) of an SFT row: a conversation is cut before its first assistant turn."""
    if "messages" in row and as_messages(row["messages"]):
        messages = row["messages"]
        first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), None)
        return (messages[:first], messages[first:]) if first else None
    if "prompt" in row and "completion" in row:
        return row["prompt"], row["completion"]
    return None


def token_nll(model, tokenizer, pairs: list[tuple[Any, Any]], sides) -> dict[str | None, list[float]]:
    """Per side, each (prompt, completion) row's mean negative log-likelihood per completion token (nats)."""
    texts = [render_texts(tokenizer, prompt, completion) for prompt, completion in pairs]
    counts = [
        max(
            1,
            len(tokenizer(full, add_special_tokens=False)["input_ids"])
            - len(tokenizer(head, add_special_tokens=False)["input_ids"]),
        )
        for head, full in texts
    ]
    items = [(i, side) for i in range(len(texts)) for side in sides]
    logprobs: list[float] = []
    for chunk in chunks(items):
        logprobs += mixed_logprobs(model, tokenizer, [texts[i] for i, _ in chunk], [side for _, side in chunk])
    return per_side(sides, [(side, -lp / counts[i]) for (i, side), lp in zip(items, logprobs)])
