"""The arithmetic recipe: small-integer sums and differences, phrased a few ways, answered in one fixed format.

One recipe feeds the built-in model that already knows a little (``builtin:tiny-qwen3-arith``, pre-trained by
``scripts/build_arith_model.py``), the arithmetic datasets every method's example trains on, and the held-out checks
that say whether a job made the model better. The 5,000 problems ``a op b`` (``a, b`` in 0..49, ``op`` + or -) are cut
in two by a fixed rule: pre-training sees only the ``pretrain`` part, the shipped datasets only the ``studio`` part. So
a job's held-out rows are problems the base model never trained on either.

>>> problem_text(12, "+", 30, 0), answer_text(12, "+", 30)
('What is 12 + 30?', '12 + 30 = \\\\boxed{42}')
>>> parse_answer("7 - 9 = \\\\boxed{-2}"), parse_answer("gibberish")
(-2, None)
>>> partition(3, "+", 4) in ("pretrain", "studio")
True
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass

OPERANDS = range(50)
OPS = ("+", "-")
WORDS = {"+": "plus", "-": "minus"}
# Phrasings of one question; the answer always has the same shape: ``a op b = \boxed{c}``.
PHRASINGS = (
    "What is {a} {op} {b}?",
    "Compute {a} {op} {b}.",
    "{a} {op} {b} = ?",
    "Calculate {a} {word} {b}.",
)
# Every STUDIO_EVERY-th problem (by a fixed hash of the problem) belongs to the studio part.
STUDIO_EVERY = 3
_BOXED = re.compile(r"\\boxed\{\s*(-?\d+)\s*\}")


@dataclass(frozen=True)
class Problem:
    """One question ``a op b`` and its phrasing."""

    a: int
    op: str
    b: int
    phrasing: int = 0

    @property
    def answer(self) -> int:
        """The correct result."""
        return self.a + self.b if self.op == "+" else self.a - self.b

    @property
    def question(self) -> str:
        """The question as the user asks it."""
        return problem_text(self.a, self.op, self.b, self.phrasing)

    @property
    def reply(self) -> str:
        """The answer in the fixed format."""
        return answer_text(self.a, self.op, self.b)


def problem_text(a: int, op: str, b: int, phrasing: int) -> str:
    """The question in phrasing number ``phrasing``."""
    return PHRASINGS[phrasing % len(PHRASINGS)].format(a=a, op=op, b=b, word=WORDS[op])


def answer_text(a: int, op: str, b: int, result: int | None = None) -> str:
    """The one answer format: the calculation, then the result in ``\\boxed{}`` (what TRL's accuracy reward reads);
    ``result`` writes a given (wrong) one instead."""
    result = (a + b if op == "+" else a - b) if result is None else result
    return f"{a} {op} {b} = \\boxed{{{result}}}"


def parse_answer(text: str) -> int | None:
    """The last boxed integer of a completion, or None when it has none."""
    found = _BOXED.findall(text or "")
    return int(found[-1]) if found else None


def partition(a: int, op: str, b: int) -> str:
    """``pretrain`` or ``studio``: a fixed rule, the same on every machine (no Python hash randomisation)."""
    key = (a * 131 + b * 31 + (7 if op == "-" else 0)) * 2654435761 % 2**32
    return "studio" if (key >> 7) % STUDIO_EVERY == 0 else "pretrain"


def problems(part: str) -> list[tuple[int, str, int]]:
    """Every (a, op, b) of one part, in a fixed order."""
    return [(a, op, b) for op in OPS for a in OPERANDS for b in OPERANDS if partition(a, op, b) == part]


def sample(part: str, count: int, seed: int) -> list[Problem]:
    """``count`` distinct problems of ``part`` (as many as there are, if fewer), each with a random phrasing."""
    rng = random.Random(seed)
    pool = problems(part)
    chosen = rng.sample(pool, min(count, len(pool)))
    return [Problem(a, op, b, rng.randrange(len(PHRASINGS))) for a, op, b in chosen]


def near_miss(problem: Problem, rng: random.Random) -> int:
    """A wrong result a weak model might give: one or two off, or ten off (a slipped carry)."""
    return problem.answer + rng.choice([-1, 1]) * rng.choice([1, 1, 2, 10])


def wrong_reply(problem: Problem, rng: random.Random, mistakes: dict | None = None) -> str:
    """The fixed answer format with a wrong result: the model's own mistake on this problem where ``mistakes`` has one
    (on-policy, as preference data from a model's own answers is), else a near miss."""
    wrong = (mistakes or {}).get((problem.a, problem.op, problem.b))
    if wrong is None or wrong == problem.answer:
        wrong = near_miss(problem, rng)
    return answer_text(problem.a, problem.op, problem.b, wrong)


def model_answers(
    model, tokenizer, problems: list[Problem], *, sample: bool = False, batch: int = 64, max_new_tokens: int = 24
) -> list[int | None]:
    """Each problem's boxed answer from ``model`` (None when it boxed none): greedy, or one sample at temperature 1.
    Used by the build scripts and the tests; needs torch."""
    texts = [tokenizer.apply_chat_template(prompt_of(p), add_generation_prompt=True, tokenize=False) for p in problems]
    return answers_to(model, tokenizer, texts, sample=sample, batch=batch, max_new_tokens=max_new_tokens)


def answers_to(
    model, tokenizer, texts: list[str], *, sample: bool = False, batch: int = 64, max_new_tokens: int = 24
) -> list[int | None]:
    """The boxed answer in what ``model`` writes after each rendered prompt (None when it boxed none)."""
    return [
        parse_answer(text)
        for text in continuations(model, tokenizer, texts, sample=sample, batch=batch, max_new_tokens=max_new_tokens)
    ]


def continuations(
    model,
    tokenizer,
    texts: list[str],
    *,
    sample: bool = False,
    batch: int = 64,
    max_new_tokens: int = 24,
    skip_special_tokens: bool = True,
) -> list[str]:
    """What ``model`` writes after each rendered prompt, in left-padded batches: greedy, or sampled at temperature 1.
    Special tokens (``<tool_call>``) are kept when ``skip_special_tokens`` is False."""
    import torch

    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    written: list[str] = []
    sampling = {"do_sample": True, "temperature": 1.0} if sample else {"do_sample": False}
    for start in range(0, len(texts), batch):
        enc = tokenizer(texts[start : start + batch], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
                **sampling,
            )
        written += [
            tokenizer.decode(row, skip_special_tokens=skip_special_tokens)
            for row in out[:, enc["input_ids"].shape[1] :]
        ]
    model.train(was_training)
    return written


def chat(problem: Problem) -> list[dict[str, str]]:
    """The problem as a one-turn conversation with its correct answer."""
    return [{"role": "user", "content": problem.question}, {"role": "assistant", "content": problem.reply}]


def prompt_of(problem: Problem) -> list[dict[str, str]]:
    """The problem as a conversational prompt."""
    return [{"role": "user", "content": problem.question}]


# The shipped datasets: name -> (rows, seed). Each draws its own problems from the studio part.
def sft_rows(count: int, seed: int) -> Iterator[dict]:
    """Demonstrations for SFT (``messages``)."""
    for p in sample("studio", count, seed):
        yield {"messages": chat(p)}


def dpo_rows(count: int, seed: int, mistakes: dict | None = None) -> Iterator[dict]:
    """Preference pairs for DPO: the right answer chosen, the model's own mistake (else a near miss) rejected."""
    rng = random.Random(seed + 1)
    for p in sample("studio", count, seed):
        yield {
            "prompt": prompt_of(p),
            "chosen": [{"role": "assistant", "content": p.reply}],
            "rejected": [{"role": "assistant", "content": wrong_reply(p, rng, mistakes)}],
        }


def kto_rows(count: int, seed: int, mistakes: dict | None = None) -> Iterator[dict]:
    """Unpaired feedback for KTO: half the answers right (label true), half the model's own mistakes or near misses
    (label false)."""
    rng = random.Random(seed + 1)
    for i, p in enumerate(sample("studio", count, seed)):
        good = i % 2 == 0
        reply = p.reply if good else wrong_reply(p, rng, mistakes)
        yield {"prompt": prompt_of(p), "completion": [{"role": "assistant", "content": reply}], "label": good}


def grpo_rows(count: int, seed: int) -> Iterator[dict]:
    """Prompts with a ``solution`` for verifiable rewards (TRL's accuracy reward reads ``$42$``)."""
    for p in sample("studio", count, seed):
        yield {"prompt": prompt_of(p), "solution": f"${p.answer}$"}


ENV_PHRASINGS = (
    "What is {a} {op} {b}? Submit the answer with the submit_answer tool.",
    "Compute {a} {op} {b} and give the result using submit_answer.",
)


def env_rows(count: int, seed: int) -> Iterator[dict]:
    """Prompts for the built-in arithmetic environment, with the ``a``, ``b`` and ``op`` its reset takes."""
    for p in sample("studio", count, seed):
        text = ENV_PHRASINGS[p.phrasing % len(ENV_PHRASINGS)].format(a=p.a, op=p.op, b=p.b)
        yield {"prompt": [{"role": "user", "content": text}], "a": p.a, "b": p.b, "op": p.op}


# name -> (row builder, rows, seed): the arithmetic datasets shipped in backend/assets/datasets. The preference and
# feedback sets take the shipped model's own wrong answers (scripts/build_arith_datasets.py finds them).
DATASETS = {
    "arith-sft": (sft_rows, 1000, 11),
    "arith-preferences": (dpo_rows, 1000, 12),
    "arith-feedback": (kto_rows, 1000, 13),
    "arith-prompts": (grpo_rows, 1000, 14),
    "arith-env": (env_rows, 400, 15),
}
