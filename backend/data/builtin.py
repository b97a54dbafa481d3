"""The small sample datasets shipped with the project, so every method runs offline."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backend.core.paths import BUILTIN_DATASETS_DIR  # re-exported: the built-ins' folder
from backend.core.spec import Method, methods_reading
from backend.methods.table import table

# What a dataset may say it suits besides a method's name, by the spec part that reads it: every online method's
# rollout (prompts with a column a reward reads), or every method that plays an environment (prompts and the columns
# its reset takes); or by the layout it holds: every method whose row takes preference pairs (prompt, chosen,
# rejected), or prompts alone (a method that writes its own answers to them).
ROLLOUT = "rollout"
ENVIRONMENT = "environment"
PREFERENCE = "preference"
PROMPT_ONLY = "prompt-only"


@dataclass(frozen=True)
class BuiltinDataset:
    """A small dataset shipped with the studio: its name, what it holds, and what it suits (a method's name, or a
    spec part the methods reading it share: ``rollout``, ``environment``)."""

    name: str
    description: str
    suits: tuple[str, ...]

    def methods(self) -> tuple[str, ...]:
        """The methods it suits, by name, in the method list's order."""
        suited = {m for tag in self.suits for m in methods_reading(tag) or methods_taking(tag)}
        return tuple(m.value for m in Method if m in suited)

    @property
    def path(self) -> Path:
        """The dataset's JSONL file in the studio's built-in data folder."""
        return BUILTIN_DATASETS_DIR / f"{self.name}.jsonl"


def methods_taking(data_format: str) -> tuple[Method, ...]:
    """The methods whose row in the method table accepts the dataset layout named ``data_format``.

    >>> "dpo" in methods_taking(PREFERENCE), methods_taking("no-such-layout")
    (True, ())
    """
    return tuple(m for m, row in table().items() if any(f.name == data_format for f in row.formats))


BUILTIN_DATASETS: dict[str, BuiltinDataset] = {
    d.name: d
    for d in (
        BuiltinDataset("chat-demo", "72 short chats (arithmetic, capitals, greetings) in `messages` format.", ("sft",)),
        BuiltinDataset("preferences-demo", "42 conversational prompt/chosen/rejected pairs.", (PREFERENCE,)),
        BuiltinDataset(
            "feedback-demo",
            "48 conversational prompt/completion rows marked good or bad (`label`: true/false), as "
            "the Chat tab's thumbs record them.",
            ("kto",),
        ),
        BuiltinDataset(
            "math-demo",
            "48 arithmetic prompts with a `solution` column for verifiable rewards.",
            (ROLLOUT, PROMPT_ONLY),
        ),
        BuiltinDataset(
            "echo-tools-sft",
            "24 demonstrations of calling the echo environment's echo_message tool (SFT before "
            "GRPO with builtin:echo), with a `tools` column.",
            ("sft",),
        ),
        BuiltinDataset(
            "echo-demo", "32 prompts for the built-in echo environment, with the `target` text to echo.", (ENVIRONMENT,)
        ),
        BuiltinDataset(
            "wordle-demo",
            "32 Wordle prompts for the built-in wordle environment, with the secret `word`.",
            (ENVIRONMENT,),
        ),
        BuiltinDataset(
            "arith-sft",
            "1000 arithmetic chats (sums and differences below 50, answered `a + b = \\boxed{c}`) for "
            "builtin:tiny-qwen3-arith: SFT raises its exact-match accuracy.",
            ("sft",),
        ),
        BuiltinDataset(
            "arith-preferences",
            "1000 arithmetic prompts with the right answer chosen and a near miss rejected (DPO).",
            (PREFERENCE,),
        ),
        BuiltinDataset(
            "arith-feedback",
            "1000 arithmetic answers marked right (`label` true) or wrong (false), half each (KTO).",
            ("kto",),
        ),
        BuiltinDataset(
            "arith-prompts",
            "1000 arithmetic prompts with a `solution` column for TRL's accuracy reward.",
            (ROLLOUT, PROMPT_ONLY),
        ),
        BuiltinDataset(
            "arith-env",
            "400 sums and differences for the built-in arithmetic environment (`a`, `b`, `op`), phrased "
            "as builtin:tiny-qwen3-arith was pre-trained to answer with the submit_answer tool.",
            (ENVIRONMENT,),
        ),
        BuiltinDataset(
            "arithmetic-demo",
            "32 calculation prompts for the built-in arithmetic environment, with `a`, `b` and `op` columns.",
            (ENVIRONMENT,),
        ),
    )
}
