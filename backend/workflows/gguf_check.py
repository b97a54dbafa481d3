"""The quant check: a GGUF export answers the job's held-out rows as its merged model does, or says where not.

The GGUF is loaded back with transformers' GGUF reader (``from_pretrained(folder, gguf_file=name)``, the tokenizer and
its chat template from the file too), so what is checked is the file as written, not the weights before conversion.
Both models answer the same rows greedily, in the same batches, one after the other (never both in memory). Rows with
a reference answer (an SFT completion, DPO's chosen answer, a desirable KTO completion) are scored as the held-out
accuracy is (``scoring.same_answer``), and rows with a ``solution`` (GRPO's prompts) by TRL's accuracy reward; the
difference in accuracy gets a paired-bootstrap 95% interval (``learning.paired_interval``). Rows without either are
compared by agreement: the share of rows whose two answers are the same text.

The rows are the job's own held-out rows (the same split, seed and count as its evaluation), at most
:data:`MAX_ROWS`; a job that held none out is checked on its first training rows (:data:`TRAINING_ROWS`), as it says.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.core.artifacts import QuantCheck, QuantExample
from backend.core.learning import change_text, paired_interval, shown
from backend.core.paths import DataPaths
from backend.core.wording import counted
from backend.jobs.records import JobRecord
from backend.models.mixed_batch import GenerationSettings
from backend.models.scoring import (
    ANSWER_SLACK_TOKENS,
    ANSWER_TOKENS,
    answer_pair,
    as_messages,
    generate_completions,
    row_tools,
    same_answer,
    split_answer,
)

MAX_ROWS = 256  # the most held-out rows checked: the demo models answer them on both sides in seconds on a CPU
# On a CPU, a model whose weights pass CPU_LARGE_BYTES is checked on at most CPU_LARGE_ROWS rows: a Qwen3-0.6B-shaped
# one answered 64 rows in 139-191 s per type on 2 cores (docs/benchmarks.md), so 256 would take about 10 minutes.
CPU_LARGE_BYTES = 256 * 2**20
CPU_LARGE_ROWS = 64
TRAINING_ROWS = 64  # rows checked when the job held none out
AGREEMENT_TOKENS = 64  # the longest answer compared when the rows carry no reference
EXAMPLES = 5  # differing answers kept for the card and show --json
# The most accuracy a GGUF may lose against the merged model and pass (a share): 1 point, as the issue asks of q8_0.
TOLERANCE = {"f16": 0.01, "q8_0": 0.01}


@dataclass
class CheckRows:
    """What the check asks: each row's prompt, its reference answer or solution (or None), its tools."""

    prompts: list[Any]
    references: list[str | None]
    solutions: list[str | None]
    tools: list[list[dict] | None]
    rows_from: str
    system: str | None  # a system message every prompt opens with: the job's system prompt

    @property
    def scored(self) -> list[int]:
        """The rows that can be right or wrong (a reference answer or a solution)."""
        return [i for i in range(len(self.prompts)) if self.references[i] is not None or self.solutions[i] is not None]


def _row_item(row: dict[str, Any]) -> tuple[Any, str | None] | None:
    """(prompt, reference answer or None) of a dataset row as the methods' evaluations read it; None when it has no
    prompt a model can answer."""
    if "label" in row and "completion" in row and not row["label"]:  # KTO: an undesirable completion is no reference
        return row.get("prompt"), None
    pair = split_answer(row)
    if pair is not None:
        answered = answer_pair(*pair)
        return pair[0], (answered[1] if answered else None)
    if "prompt" in row and "chosen" in row:
        answered = answer_pair(row["prompt"], row["chosen"])
        return row["prompt"], (answered[1] if answered else None)
    return (row["prompt"], None) if "prompt" in row else None


def _common_system(prompts: list[Any]) -> str | None:
    """The system message every prompt opens with, when they all open with the same one."""
    systems = set()
    for prompt in prompts:
        messages = as_messages(prompt)
        if not messages or messages[0].get("role") != "system" or not isinstance(messages[0].get("content"), str):
            return None
        systems.add(messages[0]["content"])
    return systems.pop() if len(systems) == 1 else None


def row_cap(merged_dir: Path) -> int:
    """The most rows the check answers for this model here: :data:`MAX_ROWS`, fewer for a large model on a CPU."""
    import torch

    weights = sum(f.stat().st_size for f in Path(merged_dir).glob("*.safetensors"))
    return CPU_LARGE_ROWS if not torch.cuda.is_available() and weights > CPU_LARGE_BYTES else MAX_ROWS


def check_rows(job: JobRecord, paths: DataPaths, max_rows: int = MAX_ROWS) -> CheckRows:
    """The rows the job held out (its dataset loaded and split as the worker did), at most ``max_rows``; its first
    training rows when it held none out."""
    from backend.data.loading import load_training_dataset, split_holdout

    spec = job.spec
    dataset, _ = load_training_dataset(spec.dataset, spec.method, keep_all=True, uploads_dir=paths.uploads(spec.owner))
    train, held_out = split_holdout(dataset, spec.eval.holdout_fraction, spec.eval.holdout_rows, spec.training.seed)
    rows_from, source = ("held-out", held_out) if held_out is not None else ("training", train)
    limit = min(len(source), max_rows if held_out is not None else min(max_rows, TRAINING_ROWS))
    rows = [source[i] for i in range(limit)]
    items = [(row, item) for row in rows if (item := _row_item(row)) is not None]
    return CheckRows(
        prompts=[item[0] for _, item in items],
        references=[item[1] for _, item in items],
        solutions=[row.get("solution") if isinstance(row.get("solution"), str) else None for row, _ in items],
        tools=[row_tools(row) for row, _ in items],
        rows_from=rows_from,
        system=_common_system([item[0] for _, item in items]),
    )


def answer_tokens(tokenizer: Any, rows: CheckRows, generated_tokens: int | None = None) -> int:
    """The longest answer generated: the longest reference and some slack, else ``generated_tokens`` (the rollout's
    completion length), else :data:`AGREEMENT_TOKENS`."""
    references = [r for r in rows.references if r is not None]
    if references:
        longest = max(len(tokenizer(r, add_special_tokens=False)["input_ids"]) for r in references)
        return min(ANSWER_TOKENS, longest + ANSWER_SLACK_TOKENS)
    return min(ANSWER_TOKENS, generated_tokens or AGREEMENT_TOKENS)


def _right(answers: list[str], rows: CheckRows) -> list[float | None]:
    """Per row: 1.0 right, 0.0 wrong, None when the row cannot be scored."""
    from backend.methods.rewards.accuracy_rewards import TRLReward

    scores: list[float | None] = [None] * len(answers)
    solved = [i for i in range(len(answers)) if rows.references[i] is None and rows.solutions[i] is not None]
    if solved:
        rewards = TRLReward("accuracy")(
            completions=[answers[i] for i in solved], solution=[rows.solutions[i] for i in solved]
        )
        for i, reward in zip(solved, rewards):
            scores[i] = 1.0 if reward == 1 else 0.0
    for i, reference in enumerate(rows.references):
        if reference is not None:
            scores[i] = float(same_answer(answers[i], reference))
    return scores


def greedy_answers(
    load: Callable[[], tuple[Any, Any]], rows: CheckRows, new_tokens: int | None, seed: int
) -> list[str]:
    """Greedy answers of the model ``load`` gives (model, tokenizer), which is let go after."""
    import torch

    model, tokenizer = load()
    try:
        settings = GenerationSettings(
            max_new_tokens=answer_tokens(tokenizer, rows, new_tokens), temperature=0, seed=seed
        )
        with torch.no_grad():
            return generate_completions(model, tokenizer, rows.prompts, [None], settings, rows.tools, batched=True)[
                None
            ]
    finally:
        del model
        gc.collect()


def gguf_config(gguf_file: Path) -> Any:
    """The model config transformers reads from a GGUF file, with the attention head size the file says.

    transformers 5.20's GGUF reader maps no ``qwen3.attention.key_length`` (its qwen3_moe entry has it), so a Qwen3
    GGUF gets Qwen3Config's default ``head_dim`` of 128: right for every released Qwen3, wrong for a model of another
    shape (the demo models' 16 and 32), which then fails to run or runs wrong. Read from the file here until
    transformers maps it."""
    from gguf import GGUFReader
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    fields = GGUFReader(gguf_file).fields
    architecture = fields["general.architecture"].contents()
    key_length = fields.get(f"{architecture}.attention.key_length")
    if key_length is not None and getattr(config, "head_dim", None) not in (None, key_length.contents()):
        config.head_dim = int(key_length.contents())
    return config


def check_dtype(merged_dir: Path, saved: Any, cuda: bool) -> Any:
    """The dtype both models answer in: the merged model's own on a GPU; on a CPU float32 where a float32 copy fits in
    half the memory left (CPU kernels run 16-bit matrix products several times slower), else the model's own."""
    import torch

    if cuda or saved == torch.float32:
        return saved
    from backend.platform.hardware import memory_room

    weights = sum(f.stat().st_size for f in Path(merged_dir).glob("*.safetensors"))
    room = memory_room()
    return torch.float32 if room is not None and weights * 2 * 2 < room / 2 else saved


def loaders(merged_dir: Path, gguf_file: Path) -> tuple[Callable[[], tuple[Any, Any]], Callable[[], tuple[Any, Any]]]:
    """Loaders of the merged model and of the GGUF, both at :func:`check_dtype`, on the GPU where there is one."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(merged_dir)
    saved = getattr(config, "dtype", None) or torch.float32
    saved = getattr(torch, saved.removeprefix("torch.")) if isinstance(saved, str) else saved
    cuda = torch.cuda.is_available()
    dtype, device = check_dtype(merged_dir, saved, cuda), "cuda" if cuda else "cpu"

    def merged() -> tuple[Any, Any]:
        model = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=dtype).to(device).eval()
        return model, AutoTokenizer.from_pretrained(merged_dir)

    def gguf() -> tuple[Any, Any]:
        folder, name = str(gguf_file.parent), gguf_file.name
        config = gguf_config(gguf_file)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, config=config, dtype=dtype)
        return model.to(device).eval(), AutoTokenizer.from_pretrained(folder, gguf_file=name)

    return merged, gguf


def _prompt_text(prompt: Any) -> str:
    messages = as_messages(prompt)
    if messages:
        users = [m.get("content") for m in messages if m.get("role") == "user" and isinstance(m.get("content"), str)]
        text = users[-1] if users else str(messages[-1].get("content", ""))
    else:
        text = str(prompt)
    return text if len(text) <= 200 else text[:199] + "…"


def _sentence(check: QuantCheck, gguf_type: str) -> str:
    rows = f"{counted(check.rows, 'row')} ({check.rows_from})"
    if check.scored == "agreement":
        return (
            f"The {gguf_type} GGUF gives the merged model's greedy answer on {shown(check.agreement, True)} of {rows}; "
            "the rows have no reference answers to score."
        )
    change = change_text(check.difference, check.ci95, rate=True)
    verdict = "within" if check.passed else "beyond"
    verb = "differs" if check.differing == 1 else "differ"
    differ = f"{check.differing} of the {check.rows} greedy answers {verb}" if check.differing else "no answer differs"
    return (
        f"Accuracy on {rows}: merged {shown(check.merged_accuracy, True)}, {gguf_type} GGUF "
        f"{shown(check.gguf_accuracy, True)} ({change}), {verdict} the {(check.tolerance or 0) * 100:g}-point "
        f"tolerance; {differ}."
    )


def compare(
    rows: CheckRows, merged_answers: list[str], gguf_answers: list[str], gguf_type: str, seconds: float | None = None
) -> QuantCheck:
    """The quant check from both models' greedy answers to ``rows``."""
    differing = [i for i, (a, b) in enumerate(zip(merged_answers, gguf_answers)) if a != b]
    examples = [
        QuantExample(
            prompt=_prompt_text(rows.prompts[i]),
            merged=merged_answers[i],
            gguf=gguf_answers[i],
            reference=rows.references[i] or rows.solutions[i],
        )
        for i in differing[:EXAMPLES]
    ]
    n = len(merged_answers)
    check = QuantCheck(
        rows=n,
        rows_from=rows.rows_from,
        agreement=(n - len(differing)) / n if n else None,
        differing=len(differing),
        examples=examples,
        seconds=seconds,
    )
    scored = rows.scored
    if scored:
        right_merged, right_gguf = _right(merged_answers, rows), _right(gguf_answers, rows)
        before = [right_merged[i] or 0.0 for i in scored]
        after = [right_gguf[i] or 0.0 for i in scored]
        merged_accuracy, gguf_accuracy = sum(before) / len(before), sum(after) / len(after)
        tolerance = TOLERANCE.get(gguf_type, 0.01)
        check = check.model_copy(
            update={
                "scored": "accuracy",
                "merged_accuracy": merged_accuracy,
                "gguf_accuracy": gguf_accuracy,
                "difference": gguf_accuracy - merged_accuracy,
                "ci95": paired_interval(before, after),
                "tolerance": tolerance,
                "passed": gguf_accuracy - merged_accuracy >= -tolerance - 1e-9,
            }
        )
    else:
        check = check.model_copy(update={"scored": "agreement"})
    return check.model_copy(update={"sentence": _sentence(check, gguf_type)})


def quant_check(
    job: JobRecord, paths: DataPaths, merged_dir: Path, gguf_file: Path, gguf_type: str, rows: CheckRows | None = None
) -> QuantCheck:
    """Greedy answers of the merged model and of the GGUF on the job's held-out rows, compared; a check that cannot
    run says why in ``error`` (the GGUF is exported all the same)."""
    started = time.monotonic()
    try:
        rows = rows if rows is not None else check_rows(job, paths)
    except Exception as exc:  # noqa: BLE001 - the dataset is gone, offline, or unreadable: the check says so
        return QuantCheck(error=f"the job's rows could not be loaded ({type(exc).__name__}: {_first_line(exc)})")
    if not rows.prompts:
        return QuantCheck(error="the job's dataset has no rows a model can answer")
    spec = job.spec
    new_tokens = spec.rollout.max_completion_length if rows.solutions and any(rows.solutions) else None
    merged, gguf = loaders(Path(merged_dir), Path(gguf_file))
    merged_answers = greedy_answers(merged, rows, new_tokens, spec.training.seed)
    try:
        gguf_answers = greedy_answers(gguf, rows, new_tokens, spec.training.seed)
    except Exception as exc:  # noqa: BLE001 - transformers cannot read this architecture's GGUF: the check says so
        return QuantCheck(error=f"transformers could not load the GGUF back ({type(exc).__name__}: {_first_line(exc)})")
    return compare(rows, merged_answers, gguf_answers, gguf_type, round(time.monotonic() - started, 1))


def _first_line(exc: BaseException) -> str:
    return ((str(exc).strip().splitlines() or [""])[0])[:200]
