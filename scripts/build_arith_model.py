"""Pre-trains builtin:tiny-qwen3-arith: the demo model's architecture and tokenizer, taught a little arithmetic.

    python scripts/build_arith_model.py [--out backend/assets/models/tiny-qwen3-arith] [--seed 0]

The recipe (backend/arith_data.py): sums and differences of integers 0..49, phrased four ways, answered as
``a op b = \\boxed{c}``, plus episodes of the built-in arithmetic environment in which the answer is submitted with the
``submit_answer`` tool (started here on 127.0.0.1, so the rows are exactly what GRPO renders). Only the ``pretrain``
part of the problems is trained on. Training is full-weight AdamW on the assistant tokens only, and it stops on purpose
as soon as greedy accuracy on problems of the ``studio`` part (which the shipped datasets use and pre-training never
sees) reaches ``--target``: the model knows a little, so every method has room to make it better.

Deterministic for a seed on one machine (CPU, fp32). About two minutes on 2 CPU cores.
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

from backend import arith_data  # noqa: E402
from backend.demo_model import ARITH_MODEL_RECIPE, ARITH_MODEL_CONFIG, _build_tokenizer  # noqa: E402

DEFAULT_OUT = ROOT / "backend" / "assets" / "models" / "tiny-qwen3-arith"


def tool_rows(problems: list[arith_data.Problem]) -> list[tuple[list[dict], list[dict]]]:
    """(messages, tools) per problem: one environment episode whose first call submits the right answer."""
    from transformers.utils import get_json_schema

    from backend.environments.episodes import opening_messages
    from backend.environments.adapter import tool_methods
    from backend.environments.runtime import open_environment
    from backend.spec import JobSpec

    spec = JobSpec.model_validate({"method": "grpo", "model": {"name_or_path": "builtin:tiny-qwen3"},
                                   "environment": {"name": "builtin:arithmetic"}, "grpo": {"num_generations": 2},
                                   "training": {"batch_size": 2}})
    rows = []
    with open_environment(spec, sessions=1) as active:
        env = active.factory()
        schemas = [get_json_schema(m) for m in tool_methods(env)]
        for i, p in enumerate(problems):
            text = arith_data.ENV_PHRASINGS[i % len(arith_data.ENV_PHRASINGS)].format(a=p.a, op=p.op, b=p.b)
            row = {"prompt": [{"role": "user", "content": text}], "a": p.a, "b": p.b, "op": p.op}
            messages = opening_messages(env, row)
            answer = env.submit_answer(answer=p.answer)
            call = {"type": "function", "function": {"name": "submit_answer", "arguments": {"answer": p.answer}}}
            messages += [{"role": "assistant", "content": "", "tool_calls": [call]},
                         {"role": "tool", "name": "submit_answer", "content": str(answer)},
                         {"role": "assistant", "content": "Done."}]
            rows.append((messages, schemas))
        env._close()
    return rows


def encode(tokenizer, messages, tools=None) -> tuple[list[int], list[int]]:
    """(input ids, labels): the loss is on what the assistant writes after the first generation prompt."""
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    prefix = tokenizer.apply_chat_template(messages[:first], tools=tools, add_generation_prompt=True, tokenize=False)
    full = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    assert full.startswith(prefix), "the chat template renders the prompt differently inside the conversation"
    prompt_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
    ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    labels = [-100] * len(prompt_ids) + ids[len(prompt_ids):]
    return ids, labels


def greedy_accuracy(model, tokenizer, problems: list[arith_data.Problem]) -> float:
    """Share of problems whose greedy answer's boxed number is right."""
    answers = arith_data.model_answers(model, tokenizer, problems)
    return sum(answer == p.answer for answer, p in zip(answers, problems)) / len(problems)


def main(argv: list[str] | None = None) -> int:
    """Build the model into --out."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=0.30, help="stop at this held-out greedy accuracy")
    parser.add_argument("--max-steps", type=int, default=6000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--tool-share", type=float, default=0.2, help="share of steps that train on tool episodes")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    rng = random.Random(args.seed)
    started = time.monotonic()

    tokenizer = _build_tokenizer()
    pretrain = [arith_data.Problem(a, op, b, rng.randrange(len(arith_data.PHRASINGS)))
                for a, op, b in arith_data.problems("pretrain")]
    chats = [encode(tokenizer, arith_data.chat(p)) for p in pretrain]
    tools = [encode(tokenizer, m, t) for m, t in tool_rows(rng.sample(pretrain, 600))]
    check = arith_data.sample("studio", 200, seed=args.seed + 99)
    print(f"{len(chats)} chat rows, {len(tools)} tool episodes, {len(check)} held-out checks "
          f"({time.monotonic() - started:.0f}s)", flush=True)

    config = Qwen3Config(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None, **ARITH_MODEL_CONFIG)
    model = Qwen3ForCausalLM(config)
    print(f"{sum(p.numel() for p in model.parameters()):,} parameters", flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = 100
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    history = []
    accuracy = 0.0
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
            history.append({"step": step, "loss": round(loss.item(), 4), "heldout_accuracy": accuracy})
            print(f"step {step}: loss {loss.item():.3f}, held-out greedy accuracy {accuracy:.1%} "
                  f"({time.monotonic() - started:.0f}s)", flush=True)
            if accuracy >= args.target:
                break

    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                                               do_sample=True, max_new_tokens=64)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    (args.out / "studio_demo.json").write_text(json.dumps({
        "recipe": ARITH_MODEL_RECIPE, "seed": args.seed, "steps": step, "batch": args.batch, "learning_rate": args.lr,
        "tool_share": args.tool_share, "target": args.target, "heldout_accuracy": accuracy, "history": history,
    }, indent=2))
    print(f"saved to {args.out} after {step} steps, held-out greedy accuracy {accuracy:.1%} "
          f"({time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
