"""Base and tuned in one batch: PEFT's mixed-adapter batching, shared by the side-by-side chat and the evaluation.

A PeftModel runs each row of a batch with the adapter named for that row in ``adapter_names``; ``__base__`` runs the
row with the adapter off. So one copy of the weights answers as the base model and as the tuned model in the same
forward pass, and the two sides' sequences advance together instead of one after the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# PEFT's name for "no adapter" in a mixed-adapter batch, and the name TRL and PeftModel.from_pretrained give an adapter.
BASE_ADAPTER = "__base__"
TUNED_ADAPTER = "default"
# Row order of the chat's batched generation: the base side first, the tuned side second.
SIDE_ADAPTERS = (BASE_ADAPTER, TUNED_ADAPTER)


@dataclass
class GenerationSettings:
    """What both sides share for one turn: the system prompt, the sampling settings and the seed."""

    system_prompt: str = ""
    max_new_tokens: int = 128
    temperature: float = 0.7  # 0 means greedy decoding
    top_p: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        # UI sliders hand over floats; accept 128.0 but refuse what cannot mean anything.
        self.max_new_tokens = int(self.max_new_tokens)
        self.seed = int(self.seed)
        self.temperature = float(self.temperature)
        self.top_p = float(self.top_p)
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens is {self.max_new_tokens}; the answer needs room for at least 1 token")
        if self.temperature < 0:
            raise ValueError(
                f"temperature is {self.temperature}; use 0 for greedy answers or a positive value to sample"
            )
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p is {self.top_p}; it must be above 0 and at most 1 (1 keeps every token)")

    @property
    def greedy(self) -> bool:
        """Whether generation is greedy (temperature 0) rather than sampled."""
        return self.temperature == 0


def adapter_name(model: Any) -> str | None:
    """The active adapter of a PeftModel (the tuned side), or None for a model without one (nothing to switch off)."""
    from peft import PeftModel

    if not isinstance(model, PeftModel):
        return None
    active = model.active_adapter
    return active if isinstance(active, str) else active[0]


def model_device(model: Any) -> Any:
    """The device of a model's weights, looking through a PEFT wrapper."""
    return model.get_base_model().device if hasattr(model, "get_base_model") else model.device


def side_kwargs(adapter_names: Sequence[str | None]) -> dict[str, Any]:
    """``adapter_names=`` for a forward or generate call, or nothing when no row names an adapter (no PeftModel)."""
    if all(name is None for name in adapter_names):
        return {}
    if any(name is None for name in adapter_names):
        raise ValueError("every row of a mixed-adapter batch needs an adapter name (use '__base__' for none)")
    return {"adapter_names": list(adapter_names)}


class RowSeededSampling:
    """A logits processor that samples every row from its own seeded generator (the Gumbel-max trick).

    Added after the temperature and top-p warpers and followed by greedy selection, it draws exactly from the warped
    distribution; because each row has its own random stream, a row's tokens do not depend on which rows share its
    batch, and two rows with the same seed (a prompt's base and tuned side) see the same random numbers.
    """

    def __init__(self, generators: Sequence[Any]) -> None:
        self.generators = list(generators)  # one torch.Generator per row, in row order

    @classmethod
    def seeded(cls, seeds: Sequence[int], device: Any) -> RowSeededSampling:
        """One fresh generator per row, seeded with that row's seed."""
        import torch

        return cls([torch.Generator(device=device).manual_seed(int(seed)) for seed in seeds])

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        uniform = torch.stack(
            [
                torch.rand(scores.shape[-1], generator=g, device=scores.device, dtype=torch.float32)
                for g in self.generators
            ]
        )
        gumbel = -torch.log(-torch.log(uniform.clamp(min=1e-20, max=1.0 - 1e-7)))
        return scores.float() + gumbel


def row_seeded_sampling(temperature: float, top_p: float, rows: RowSeededSampling) -> dict[str, Any]:
    """``generate``'s arguments for sampling every row from its own stream: warp (temperature, top-p), add each row's
    own noise, then pick the largest."""
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

    warpers: list[Any] = [TemperatureLogitsWarper(temperature)]
    if top_p < 1:
        warpers.append(TopPLogitsWarper(top_p))
    return {"do_sample": False, "logits_processor": LogitsProcessorList([*warpers, rows])}


def mixed_generate(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    adapter_names: Sequence[str | None],
    settings: GenerationSettings,
    row_seeds: Sequence[int] | None = None,
    keep_end: bool = False,
    **generate_kwargs: Any,
) -> list[list[int]]:
    """Generate for every prompt with its row's adapter, in one left-padded batch; the new token ids of each row.

    Sampling follows ``settings``: greedy at temperature 0; otherwise seeded by ``settings.seed`` for the whole batch,
    or, with ``row_seeds``, one seed per row (a row's answer then does not depend on the batch it is in). Extra
    keyword arguments (a streamer, stopping criteria, eos ids) go to ``generate``. Rows stop at their end-of-sequence
    token; what follows it (padding) is cut off, and the token itself too unless ``keep_end`` (a scorer of the answer's
    distribution counts the end as part of it).
    """
    import torch

    device = model_device(model)
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False).to(
        device
    )
    sampling: dict[str, Any] = {"do_sample": False}
    if not settings.greedy and row_seeds is not None:
        rows = RowSeededSampling.seeded(row_seeds, device)
        sampling = row_seeded_sampling(settings.temperature, settings.top_p, rows)
    elif not settings.greedy:
        sampling = {"do_sample": True, "temperature": settings.temperature, "top_p": settings.top_p}
    cuda = [device.index or 0] if device.type == "cuda" else []
    # fork_rng keeps the seed from leaking into (or being disturbed by) the process's own RNG use.
    with torch.random.fork_rng(devices=cuda), torch.inference_mode():
        torch.manual_seed(settings.seed)
        out = model.generate(
            **enc,
            **side_kwargs(adapter_names),
            max_new_tokens=settings.max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            **sampling,
            **generate_kwargs,
        )
    eos = eos_ids(model, tokenizer, generate_kwargs.get("eos_token_id"))
    rows = []
    for ids in out[:, enc["input_ids"].shape[1] :].tolist():
        cut = next((i + keep_end for i, token in enumerate(ids) if token in eos), len(ids))
        rows.append(ids[:cut])
    return rows


def eos_ids(model: Any, tokenizer: Any, given: Any = None) -> set[int]:
    """The token ids that end an answer: ``given`` (or the model's generation config) and the tokenizer's."""
    ids: set[int] = set()
    for value in (given if given is not None else model.generation_config.eos_token_id, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(value)
    return ids


def mixed_logprobs(
    model: Any, tokenizer: Any, items: Sequence[tuple[str, str]], adapter_names: Sequence[str | None]
) -> list[float]:
    """For each (prompt text, full text) row: the summed log-probability of the full text's tokens after the prompt,
    under that row's adapter, in one left-padded forward pass.

    Rows are left-padded so every row ends at the last position: only the logits of the longest completion are kept
    (``logits_to_keep``), not the whole vocabulary at every prompt position.
    """
    import torch

    device = model_device(model)
    prompt_lengths = [len(tokenizer(p, add_special_tokens=False).input_ids) for p, _ in items]
    enc = tokenizer(
        [full for _, full in items], return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
    ).to(device)
    lengths = enc["attention_mask"].sum(dim=1).tolist()
    # Tokens scored per row: the completion's (every token but the first when the prompt is empty).
    scored = [min(n - p, n - 1) for n, p in zip(lengths, prompt_lengths)]
    keep = max(scored) + 1
    position_ids = (enc["attention_mask"].cumsum(dim=1) - 1).clamp(min=0)
    with torch.inference_mode():
        logits = model(
            **enc, position_ids=position_ids, logits_to_keep=keep, use_cache=False, **side_kwargs(adapter_names)
        ).logits
    targets = enc["input_ids"][:, -keep:]
    result = []
    for row, count in enumerate(scored):
        # Logits at kept index j predict the token at kept index j + 1; the row's completion is its last `count`.
        row_logprobs = torch.log_softmax(logits[row, keep - count - 1 : keep - 1].float(), dim=-1)
        picked = row_logprobs.gather(1, targets[row, keep - count :].unsqueeze(1))
        result.append(float(picked.sum()))
    return result
