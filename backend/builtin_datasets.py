"""The small sample datasets shipped with the project, so every method runs offline."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BUILTIN_DATASETS_DIR = Path(__file__).parent / "assets" / "datasets"


@dataclass(frozen=True)
class BuiltinDataset:
    """A small dataset shipped with the studio: its name, what it holds, and the methods it suits."""
    name: str
    description: str
    suits: tuple[str, ...]

    @property
    def path(self) -> Path:
        """The dataset's JSONL file in the studio's built-in data folder."""
        return BUILTIN_DATASETS_DIR / f"{self.name}.jsonl"


BUILTIN_DATASETS: dict[str, BuiltinDataset] = {
    d.name: d
    for d in (
        BuiltinDataset("chat-demo", "72 short chats (arithmetic, capitals, greetings) in `messages` format.", ("sft",)),
        BuiltinDataset("preferences-demo", "42 conversational prompt/chosen/rejected pairs.", ("dpo",)),
        BuiltinDataset(
            "feedback-demo", "48 conversational prompt/completion rows marked good or bad (`label`: true/false), as "
            "the Chat tab's thumbs record them.", ("kto",),
        ),
        BuiltinDataset(
            "math-demo", "48 arithmetic prompts with a `solution` column for verifiable rewards.", ("grpo",)
        ),
        BuiltinDataset(
            "echo-tools-sft", "24 demonstrations of calling the echo environment's echo_message tool (SFT before "
            "GRPO with builtin:echo), with a `tools` column.", ("sft",),
        ),
        BuiltinDataset(
            "echo-demo", "32 prompts for the built-in echo environment, with the `target` text to echo.", ("grpo",)
        ),
        BuiltinDataset(
            "wordle-demo", "32 Wordle prompts for the built-in wordle environment, with the secret `word`.", ("grpo",)
        ),
        BuiltinDataset(
            "arithmetic-demo",
            "32 calculation prompts for the built-in arithmetic environment, with `a`, `b` and `op` columns.",
            ("grpo",),
        ),
    )
}
