"""The baseline for benchmarks/overhead.py: the same run written as a plain TRL script, no app involved."""

import argparse
import json
import time

from datasets import load_dataset
from peft import LoraConfig
from trl import DPOConfig, DPOTrainer, GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer
from trl.rewards import accuracy_reward

parser = argparse.ArgumentParser()
parser.add_argument("--method", choices=["sft", "dpo", "grpo"], required=True)
parser.add_argument("--model", required=True)
parser.add_argument("--data", required=True)
parser.add_argument("--out", required=True)
parser.add_argument("--steps", type=int, required=True)
parser.add_argument("--batch-size", type=int, required=True)
args = parser.parse_args()

dataset = load_dataset("json", data_files=args.data, split="train")
common = dict(
    output_dir=args.out,
    max_steps=args.steps,
    per_device_train_batch_size=args.batch_size,
    learning_rate=5e-4,
    logging_steps=1,
    save_steps=10_000,
    report_to="none",
    disable_tqdm=True,
    seed=42,
    bf16=False,  # the benchmark runs on CPU
)
lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
if args.method == "sft":
    trainer = SFTTrainer(
        model=args.model,
        train_dataset=dataset,
        peft_config=lora,
        args=SFTConfig(**common, max_length=256, assistant_only_loss=True),
    )
elif args.method == "dpo":
    trainer = DPOTrainer(
        model=args.model, train_dataset=dataset, peft_config=lora, args=DPOConfig(**common, max_length=256, beta=0.1)
    )
else:
    trainer = GRPOTrainer(
        model=args.model,
        train_dataset=dataset,
        peft_config=lora,
        reward_funcs=accuracy_reward,
        args=GRPOConfig(**common, num_generations=4, max_completion_length=32),
    )
trainer.train()
trainer.save_model(args.out + "/adapter")
# The job is done once the adapter is saved; interpreter teardown after that is not part of either side's time.
print(json.dumps({"train_runtime": trainer.state.log_history[-1]["train_runtime"], "done_ts": time.time()}))
