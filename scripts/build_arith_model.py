"""Pre-trains builtin:tiny-qwen3-arith: the demo model's architecture and tokenizer, taught a little arithmetic.

    python scripts/build_arith_model.py [--out backend/assets/models/tiny-qwen3-arith] [--seed 0]

The recipe (backend/data/arith.py): sums and differences of integers 0..49, phrased four ways, answered as
``a op b = \\boxed{c}``, plus episodes of the built-in arithmetic environment in which the answer is submitted with the
``submit_answer`` tool (started here on 127.0.0.1, so the rows are exactly what GRPO renders). Only the ``pretrain``
part of the problems is trained on. Training is full-weight AdamW on the assistant tokens only, and it stops on purpose
as soon as greedy accuracy on problems of the ``studio`` part (which the shipped datasets use and pre-training never
sees) reaches ``--target`` in a chat and ``--tool-target`` as an episode's first turn: the model knows a little, so
every method has room to make it better.

Deterministic for a seed on one machine (CPU, fp32). About 15 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend.data import arith as arith_data  # noqa: E402
from backend.models.demo import ARITH_MODEL_CONFIG, ARITH_MODEL_RECIPE, _build_tokenizer  # noqa: E402

DEFAULT_OUT = ROOT / "backend" / "assets" / "models" / "tiny-qwen3-arith"


def tool_rows(
    problems: list[arith_data.Problem], rng: random.Random, checks: list[arith_data.Problem], call_share: float = 1.0
) -> tuple[list[tuple[list[dict], list[dict], int]], list[tuple]]:
    """(messages, tools, learn_from) per problem, and (opening messages, tools) per check problem.

    An episode works the sum out in the chat format (``a op b = \\boxed{c}``) and submits it with ``submit_answer``.
    A third of them start with a near miss, which the environment answers with a hint: those are trained only from
    the retry on (learn_from is the index of the first message the loss sees), so the model learns to try again and
    never learns the wrong sum. Only ``call_share`` of the episodes use the tool at all: the others answer in text,
    as a chat would, and end there (the environment never hears the answer), so the use of the tool is a partial
    skill too, one that GRPO in the environment can teach."""
    from transformers.utils import get_json_schema

    from backend.core.spec import JobSpec
    from backend.environments.adapter import tool_methods
    from backend.environments.episodes import opening_messages
    from backend.environments.runtime import open_environment

    spec = JobSpec.model_validate(
        {
            "method": "grpo",
            "model": {"name_or_path": "builtin:tiny-qwen3"},
            "environment": {"name": "builtin:arithmetic"},
            "rollout": {"num_generations": 2},
            "training": {"batch_size": 2},
        }
    )

    def attempt(env, p: arith_data.Problem, answer: int) -> list[dict]:
        call = {"type": "function", "function": {"name": "submit_answer", "arguments": {"answer": answer}}}
        return [
            {"role": "assistant", "content": arith_data.answer_text(p.a, p.op, p.b, answer), "tool_calls": [call]},
            {"role": "tool", "name": "submit_answer", "content": str(env.submit_answer(answer=answer))},
        ]

    def opening(env, i: int, p: arith_data.Problem) -> list[dict]:
        text = arith_data.ENV_PHRASINGS[i % len(arith_data.ENV_PHRASINGS)].format(a=p.a, op=p.op, b=p.b)
        return opening_messages(env, {"prompt": [{"role": "user", "content": text}], "a": p.a, "b": p.b, "op": p.op})

    rows = []
    with open_environment(spec, sessions=1) as active:
        env = active.factory()
        schemas = [get_json_schema(m) for m in tool_methods(env)]
        openings = [(opening(env, i, p), schemas) for i, p in enumerate(checks)]
        for i, p in enumerate(problems):
            messages = opening(env, i, p)
            if rng.random() >= call_share:
                rows.append((messages + [{"role": "assistant", "content": p.reply}], schemas, len(messages)))
                continue
            if i % 3 == 2:
                messages += attempt(env, p, arith_data.near_miss(p, rng))
            learn_from = len(messages)
            messages += attempt(env, p, p.answer) + [{"role": "assistant", "content": "Done."}]
            rows.append((messages, schemas, learn_from))
        env._close()
    return rows, openings


def encode(tokenizer, messages, tools=None, learn_from: int | None = None) -> tuple[list[int], list[int]]:
    """(input ids, labels): the loss is on what follows the generation prompt before message ``learn_from`` (by
    default the first assistant message)."""
    first = learn_from
    if first is None:
        first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    prefix = tokenizer.apply_chat_template(messages[:first], tools=tools, add_generation_prompt=True, tokenize=False)
    full = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    assert full.startswith(prefix), "the chat template renders the prompt differently inside the conversation"
    prompt_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
    ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    labels = [-100] * len(prompt_ids) + ids[len(prompt_ids) :]
    return ids, labels


def greedy_accuracy(model, tokenizer, problems: list[arith_data.Problem], openings: list[tuple] | None = None) -> float:
    """Share of problems whose greedy answer's boxed number is right: asked in the chat format, or (``openings``) as
    the first turn of an environment episode, where the model works the sum out before its submit_answer call."""
    if openings is None:
        answers = arith_data.model_answers(model, tokenizer, problems)
    else:
        texts = [
            tokenizer.apply_chat_template(m, tools=t, add_generation_prompt=True, tokenize=False) for m, t in openings
        ]
        answers = arith_data.answers_to(model, tokenizer, texts, batch=32)
    return sum(answer == p.answer for answer, p in zip(answers, problems)) / len(problems)


def greedy_call_rate(model, tokenizer, openings: list[tuple]) -> float:
    """Share of environment openings whose greedy first turn calls a tool (writes a ``<tool_call>``)."""
    texts = [tokenizer.apply_chat_template(m, tools=t, add_generation_prompt=True, tokenize=False) for m, t in openings]
    written = arith_data.continuations(model, tokenizer, texts, batch=32, max_new_tokens=48, skip_special_tokens=False)
    return sum("<tool_call>" in text for text in written) / len(texts)


def model_card(record: dict) -> str:
    """The model folder's README.md: what the model is and what it is not."""
    return f"""---
license: apache-2.0
tags: [post-training-studio, demo, arithmetic]
---
# builtin:tiny-qwen3-arith

A tiny causal language model for trying post-training offline: the Qwen3 architecture family with
{record["parameters"]:,} parameters, the tokenizer and chat template of `builtin:tiny-qwen3` (one digit per token).

**What it is.** Pre-trained from random weights by `scripts/build_arith_model.py` (recipe {record["recipe"]}, seed
{record["seed"]}, {record["steps"]} full-weight AdamW steps) on synthetic data from `backend/data/arith.py`: sums and
differences of integers 0..49, asked four ways and answered `a + b = \\boxed{{c}}`, and episodes of the built-in
arithmetic environment in which it works the sum out the same way and, in {record["call_share"]:.0%} of them,
submits it with the `submit_answer` tool (the others answer in text and end there, unheard by the environment). It
was stopped on purpose at a partial skill: on problems it never saw, its greedy answer is right
{record["heldout_accuracy"]:.0%} of the time in a chat and {record["heldout_tool_accuracy"]:.0%} of the time as the
first turn of an environment episode, where its greedy turn calls the tool {record["heldout_call_rate"]:.0%} of the
time. SFT, DPO, KTO and GRPO on the `arith-*` datasets make it better, GRPO in the environment teaches it to submit
its answers, and the studio's learning verdict measures by how much on held-out problems.

**What it is not.** It knows nothing but this arithmetic: any other question gets an arithmetic-shaped answer. It
is no benchmark of any method at scale, and its figures say nothing about a real model. Numbers outside 0..49 and
other operations are beyond it.
"""


def main(argv: list[str] | None = None) -> int:
    """Build the model into --out."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=0.40, help="stop at this held-out greedy accuracy")
    parser.add_argument("--max-steps", type=int, default=6000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument(
        "--tool-target",
        type=float,
        default=0.30,
        help="and at this held-out greedy accuracy of an environment episode's first turn",
    )
    parser.add_argument("--tool-share", type=float, default=0.5, help="share of steps that train on tool episodes")
    parser.add_argument("--tool-episodes", type=int, default=1500, help="distinct tool episodes to train on")
    parser.add_argument(
        "--call-share",
        type=float,
        default=0.5,
        help="share of tool episodes that submit the answer with the tool (the others answer in text)",
    )
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    rng = random.Random(args.seed)
    started = time.monotonic()

    tokenizer = _build_tokenizer()
    pretrain = [
        arith_data.Problem(a, op, b, rng.randrange(len(arith_data.PHRASINGS)))
        for a, op, b in arith_data.problems("pretrain")
    ]
    chats = [encode(tokenizer, arith_data.chat(p)) for p in pretrain]
    check = arith_data.sample("studio", 200, seed=args.seed + 99)
    episodes, openings = tool_rows(rng.sample(pretrain, args.tool_episodes), rng, check[:100], args.call_share)
    tools = [encode(tokenizer, m, t, k) for m, t, k in episodes]
    print(
        f"{len(chats)} chat rows, {len(tools)} tool episodes, {len(check)} held-out checks "
        f"({time.monotonic() - started:.0f}s)",
        flush=True,
    )

    config = Qwen3Config(
        vocab_size=len(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        **ARITH_MODEL_CONFIG,
    )
    model = Qwen3ForCausalLM(config)
    print(f"{sum(p.numel() for p in model.parameters()):,} parameters", flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = 100
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    history = []
    accuracy = tool_accuracy = 0.0
    for step in range(1, args.max_steps + 1):
        # A step is all chats or all tool episodes: a chat row is ~35 tokens, an episode (with its tool schema) ~10x.
        tool_step = rng.random() < args.tool_share
        rows = rng.sample(tools, args.batch // 4) if tool_step else rng.sample(chats, args.batch)
        width = max(len(ids) for ids, _ in rows)
        ids = torch.tensor([r[0] + [tokenizer.pad_token_id] * (width - len(r[0])) for r in rows])
        labels = torch.tensor([r[1] + [-100] * (width - len(r[1])) for r in rows])
        mask = torch.tensor([[1] * len(r[0]) + [0] * (width - len(r[0])) for r in rows])
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if step % 100 == 0:
            accuracy = greedy_accuracy(model, tokenizer, check)
            tool_accuracy = greedy_accuracy(model, tokenizer, check[:100], openings)
            history.append(
                {
                    "step": step,
                    "loss": round(loss.item(), 4),
                    "heldout_accuracy": accuracy,
                    "heldout_tool_accuracy": tool_accuracy,
                }
            )
            print(
                f"step {step}: loss {loss.item():.3f}, held-out greedy accuracy {accuracy:.1%}, in an "
                f"episode {tool_accuracy:.1%} ({time.monotonic() - started:.0f}s)",
                flush=True,
            )
            if accuracy >= args.target and tool_accuracy >= args.tool_target:
                break

    call_rate = greedy_call_rate(model, tokenizer, openings)
    print(f"greedy first turns that call the tool: {call_rate:.0%}", flush=True)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True, max_new_tokens=64
    )
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    record = {
        "recipe": ARITH_MODEL_RECIPE,
        "seed": args.seed,
        "steps": step,
        "batch": args.batch,
        "learning_rate": args.lr,
        "parameters": sum(p.numel() for p in model.parameters()),
        "tool_share": args.tool_share,
        "tool_episodes": args.tool_episodes,
        "call_share": args.call_share,
        "target": args.target,
        "tool_target": args.tool_target,
        "heldout_accuracy": accuracy,
        "heldout_tool_accuracy": tool_accuracy,
        "heldout_call_rate": call_rate,
        "history": history,
    }
    (args.out / "studio_demo.json").write_text(json.dumps(record, indent=2))
    (args.out / "README.md").write_text(model_card(record))
    print(
        f"saved to {args.out} after {step} steps, held-out greedy accuracy {accuracy:.1%} "
        f"({time.monotonic() - started:.0f}s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
