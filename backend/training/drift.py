"""Drift from the base: how far training moved the model, as the mean per-token KL(tuned || start) on the tuned
model's own greedy answers to held-out prompts, where start is the base (the adapter off) or, for a staged job, the
parent's adapter.

On-task KL from the base predicts what a fine-tune forgets, whatever the algorithm that made it (Shenfeld et al.,
"RL's Razor", arXiv 2509.04259). The KL is exact over the vocabulary at each answer token (not a one-sample estimate),
averaged over the answer's tokens (its end included), then over the answers; the 95% interval is a bootstrap over the
answers. Both sides are the same loaded model: each sequence goes through once with the tuned adapter and once with
the start's (or none), in one mixed-adapter batch, so nothing is loaded twice and it costs one short greedy
generation and one forward pass per prompt.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from backend.core.artifacts import DriftCheck
from backend.core.learning import HEALTHY_DRIFT, paired_interval
from backend.core.spec import JobSpec
from backend.methods.table import support
from backend.models.loading import LANGUAGE_MODEL_HEAD
from backend.models.mixed_batch import (
    BASE_ADAPTER,
    GenerationSettings,
    adapter_name,
    mixed_generate,
    model_device,
    side_kwargs,
)
from backend.models.scoring import render_texts, row_tools, split_answer

# Held-out prompts the drift is measured on (the first ones, distinct): enough for an interval of a few percent of
# the figure, few enough to cost seconds on a CPU.
DRIFT_PROMPTS = 64
# Tokens of each greedy answer scored at most (an answer that ends sooner is scored to its end).
DRIFT_ANSWER_TOKENS = 96
# The most bytes one forward pass's vocabulary-wide fp32 log-probabilities may take (two sequences per prompt: tuned
# and start). A 151,936-token vocabulary (Qwen) fits 9 prompts of 96 answer tokens; the demo model's 1,024, all 64,
# which decode in one batch instead of eight: 8.1 s -> 3.2 s on 2 CPU cores (benchmarks/drift.py --batching).
DRIFT_LOGITS_BYTES = 1 << 30


def prompts_per_batch(vocab: int, answer_tokens: int = DRIFT_ANSWER_TOKENS, limit: int = DRIFT_PROMPTS) -> int:
    """How many prompts one forward pass takes, by what their log-probabilities weigh (``DRIFT_LOGITS_BYTES``).

    >>> prompts_per_batch(151_936), prompts_per_batch(1_024), prompts_per_batch(10_000_000)
    (9, 64, 1)
    """
    per_prompt = 2 * (answer_tokens + 1) * vocab * 4
    return max(1, min(limit, DRIFT_LOGITS_BYTES // per_prompt))


def held_out_prompts(rows: Sequence[dict[str, Any]], limit: int = DRIFT_PROMPTS) -> list[tuple[Any, Any]]:
    """The first ``limit`` distinct (prompt, tool schemas) of the held-out rows: a row's ``prompt``, or an SFT
    conversation cut before its first assistant turn; rows with neither are left out (KTO's rows repeat a prompt
    with each of its answers: it counts once).

    >>> held_out_prompts([{"prompt": "a"}, {"prompt": "a"}, {"messages": [{"role": "user", "content": "b"},
    ...                   {"role": "assistant", "content": "c"}]}, {"chosen": "x"}])
    [('a', None), ([{'role': 'user', 'content': 'b'}], None)]
    """
    prompts: list[tuple[Any, Any]] = []
    seen: set[str] = set()
    for row in rows:
        prompt = row["prompt"] if "prompt" in row else (split_answer(row) or (None,))[0]
        key = json.dumps(prompt, sort_keys=True, default=str)
        if prompt is None or key in seen:
            continue
        seen.add(key)
        prompts.append((prompt, row_tools(row)))
        if len(prompts) == limit:
            break
    return prompts


def environment_tool_schemas(info) -> list[dict[str, Any]]:
    """An environment's tools as the chat template's JSON schemas (``info``: its EnvironmentInfo), so the prompts
    of an environment job show the tools as training did."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": {"type": "object", "properties": tool.parameters, "required": list(tool.required)},
            },
        }
        for tool in info.tools
    ]


def answer_kl(
    model, prompt_ids: list[list[int]], answers: list[list[int]], tuned: str, start: str, pad: int
) -> list[float]:
    """Per answer, the mean over its tokens of KL(tuned || start) of the next-token distributions, each sequence run
    under both adapters in one left-padded mixed-adapter batch."""
    import torch

    device = model_device(model)
    sequences = [p + a for p, a in zip(prompt_ids, answers)]
    longest = max(len(s) for s in sequences)
    rows = [s for s in sequences for _ in (tuned, start)]
    input_ids = torch.tensor([[pad] * (longest - len(s)) + s for s in rows], device=device)
    mask = torch.tensor([[0] * (longest - len(s)) + [1] * len(s) for s in rows], device=device)
    keep = max(len(a) for a in answers) + 1
    with torch.inference_mode():
        logits = model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=(mask.cumsum(dim=1) - 1).clamp(min=0),
            logits_to_keep=keep,
            use_cache=False,
            **side_kwargs([tuned, start] * len(sequences)),
        ).logits
        result = []
        for i, answer in enumerate(answers):
            # Logits at kept index j predict the token at kept index j + 1: the answer's tokens are the last ones.
            window = slice(keep - len(answer) - 1, keep - 1)
            after = torch.log_softmax(logits[2 * i, window].float(), dim=-1)
            before = torch.log_softmax(logits[2 * i + 1, window].float(), dim=-1)
            result.append(float((after.exp() * (after - before)).sum(dim=-1).clamp(min=0).mean()))
    return result


def measure_drift(
    model,
    tokenizer,
    prompts: Sequence[tuple[Any, Any]],
    start: str = BASE_ADAPTER,
    max_new_tokens: int = DRIFT_ANSWER_TOKENS,
) -> tuple[list[float], int]:
    """Each prompt's mean per-token KL(tuned || ``start``) on the tuned adapter's greedy answer, and the answer
    tokens scored in all; ``prompts``: (prompt, tool schemas or None) pairs."""
    tuned = adapter_name(model)
    if tuned is None:
        raise ValueError("the model has no adapter: there is no base in it to measure the drift from")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    greedy = GenerationSettings(max_new_tokens=max_new_tokens, temperature=0)
    was_training = model.training
    model.eval()
    values: list[float] = []
    tokens = 0
    batch = prompts_per_batch(model.get_output_embeddings().weight.shape[0], max_new_tokens)
    try:
        for first in range(0, len(prompts), batch):
            chunk = prompts[first : first + batch]
            texts = [render_texts(tokenizer, prompt, tools=tools)[0] for prompt, tools in chunk]
            ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
            # online trainers turn the model's cache off for training; decoding without it is slow
            answers = mixed_generate(
                model, tokenizer, texts, [tuned] * len(texts), greedy, keep_end=True, use_cache=True
            )
            answers = [a or [pad] for a in answers]  # a zero-token budget cannot happen; never an empty window
            tokens += sum(len(a) for a in answers)
            values += answer_kl(model, ids, answers, tuned, start, pad)
    finally:
        model.train(was_training)
    return values, tokens


def drift_check(spec: JobSpec, model, tokenizer, rows, tools=None, start_adapter: str | None = None) -> DriftCheck:
    """The job's drift from where it started, on the held-out ``rows``' prompts (``tools``: the environment's tool
    schemas, for every prompt that names none); a job whose model writes no answers says why instead."""
    reference = "parent" if start_adapter else "base"
    if support(spec.method).head != LANGUAGE_MODEL_HEAD:
        return DriftCheck(reference=reference, skipped="a reward model scores answers and writes none of its own")
    prompts = [(prompt, schemas or tools) for prompt, schemas in held_out_prompts(rows or [])]
    if not prompts:
        return DriftCheck(reference=reference, skipped="no held-out prompts to answer")
    began = time.monotonic()
    values, tokens = measure_drift(model, tokenizer, prompts, start_adapter or BASE_ADAPTER)
    mean = sum(values) / len(values)
    return DriftCheck(
        mean=mean,
        ci95=paired_interval([0.0] * len(values), values),
        rows=len(values),
        tokens=tokens,
        reference=reference,
        threshold=HEALTHY_DRIFT,
        exceeds=mean > HEALTHY_DRIFT,
        seconds=round(time.monotonic() - began, 2),
    )
