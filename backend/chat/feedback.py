"""What users say about the Chat tab's answers, kept per user as training data: "this side is better" picks as DPO
pairs, 👍/👎 on one answer as KTO rows, the agent arena's "this side played better" as DPO pairs of whole episodes
(with their tool calls and tools), and their exports as dataset files."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, overload

from backend.chat.episode_feedback import EpisodePreferenceLog
from backend.chat.feedback_log import SIDES, FeedbackLog, Message, NoAnswerYet, NotSaved, last_turn
from backend.core.paths import DataPaths, storage_problem

FeedbackFormat = Literal["dpo", "kto", "episodes"]

PREFERENCE_COLUMNS = ("prompt", "chosen", "rejected")
# TRL's unpaired preference format (what KTOTrainer reads), conversational: prompt and completion are message lists.
THUMB_COLUMNS = ("prompt", "completion", "label")


def _asked(prompt: Sequence[Message]) -> list[Message]:
    """A prompt without the assistant's messages: what was asked, the same on both sides of a turn."""
    return [m for m in prompt if m["role"] != "assistant"]


class PreferenceLog(FeedbackLog):
    """Which of the two answers a user preferred, as DPO rows.

    Each row: ``prompt`` (the messages up to and including the user turn, system prompt first), ``chosen`` and
    ``rejected`` (one assistant message each), ``job_id`` and ``created_at`` (seconds since the epoch).
    """

    columns = PREFERENCE_COLUMNS
    nothing_yet = "no preferences recorded yet; pick the better answer in a few chats first"

    def _same(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        """A pick for the same turn: same job, pair of answers and what was asked (a regenerated turn is a new one).

        The prompts themselves may differ: each is the picked side's conversation, with that side's earlier answers.
        """
        answers = {old["chosen"][0]["content"], old["rejected"][0]["content"]}
        return (
            old.get("job_id") == new["job_id"]
            and _asked(old["prompt"]) == _asked(new["prompt"])
            and answers == {new["chosen"][0]["content"], new["rejected"][0]["content"]}
        )

    def record(self, prompt_messages: Sequence[Message], better: str, worse: str, job_id: str | None) -> dict[str, Any]:
        """Record one preference and return the row written, with ``replaced`` True when it replaced this turn's
        earlier pick: one preference per turn (same job, prompt and pair of answers), the last click wins."""
        prompt = [{"role": m["role"], "content": m["content"]} for m in prompt_messages]
        if not prompt or prompt[-1]["role"] != "user":
            raise ValueError("a preference's prompt must end with the user's message the two answers reply to")
        if not better.strip() or not worse.strip():
            raise ValueError("one of the answers is empty; there is nothing to prefer - ask again or pick another turn")
        if better == worse:
            raise ValueError(
                "both answers are the same, so neither is better; ask something else, or pick Conversation and ask "
                "again with sampling on (Compare answers greedily)"
            )
        row = {
            "prompt": prompt,
            "chosen": [{"role": "assistant", "content": better}],
            "rejected": [{"role": "assistant", "content": worse}],
            "job_id": job_id,
            "created_at": time.time(),
        }
        return {**row, "replaced": self._put(row) is not None}

    def record_turn(
        self,
        base_history: Sequence[dict],
        tuned_history: Sequence[dict],
        system_prompt: str,
        better_side: str,
        job_id: str | None,
    ) -> dict[str, Any]:
        """Record that ``better_side``'s answer to the last turn beats the other side's; the prompt is the preferred
        side's conversation (each side keeps its own answers). NoAnswerYet when either side has no answer."""
        if better_side not in SIDES:
            raise ValueError(f"the better side is 'base' or 'tuned', not {better_side!r}")
        base, tuned = last_turn(base_history, system_prompt), last_turn(tuned_history, system_prompt)
        if base is None or tuned is None:
            raise NoAnswerYet("Ask something first; then pick the better answer.")
        (prompt, better), (_, worse) = (base, tuned) if better_side == "base" else (tuned, base)
        return self.record(prompt, better, worse, job_id)


class ThumbLog(FeedbackLog):
    """👍/👎 on one side's answer, as KTO rows (TRL's conversational unpaired preference format).

    Each row: ``prompt`` (that side's messages up to and including the user turn, system prompt first),
    ``completion`` (one assistant message), ``label`` (True for 👍), ``side`` (base or tuned), ``job_id`` and
    ``created_at``. One thumb per side per turn: a second one on the same answer replaces the first.
    """

    columns = THUMB_COLUMNS
    nothing_yet = "no thumbs recorded yet; give a few answers a 👍 or 👎 first"

    def _same(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        """A thumb on the same answer: same job, side, prompt and completion (a regenerated answer is a new one)."""
        return (
            old.get("job_id") == new["job_id"]
            and old.get("side") == new["side"]
            and old.get("prompt") == new["prompt"]
            and old["completion"] == new["completion"]
        )

    def record(
        self, prompt_messages: Sequence[Message], answer: str, label: bool, side: str, job_id: str | None
    ) -> dict[str, Any]:
        """Record one thumb and return the row written, with ``previous``: the label it replaced (None if new)."""
        prompt = [{"role": m["role"], "content": m["content"]} for m in prompt_messages]
        if not prompt or prompt[-1]["role"] != "user":
            raise ValueError("a thumb's prompt must end with the user's message the answer replies to")
        if side not in SIDES:
            raise ValueError(f"a thumb is on the 'base' or the 'tuned' answer, not {side!r}")
        if not isinstance(label, bool):
            raise ValueError(f"a thumb's label is True (👍) or False (👎), not {label!r}")
        if not answer.strip():
            raise ValueError(f"the {side} answer is empty, so there is nothing to rate; ask again")
        row = {
            "prompt": prompt,
            "completion": [{"role": "assistant", "content": answer}],
            "label": label,
            "side": side,
            "job_id": job_id,
            "created_at": time.time(),
        }
        replaced = self._put(row)
        return {**row, "previous": replaced.get("label") if replaced else None}

    def record_turn(
        self, history: Sequence[dict], system_prompt: str, label: bool, side: str, job_id: str | None
    ) -> dict[str, Any]:
        """Record a thumb on the last answer of one side's chat history; NoAnswerYet when it has none."""
        turn = last_turn(history, system_prompt)
        if turn is None:
            raise NoAnswerYet("there is no answer yet; ask something first, then rate an answer with 👍 or 👎")
        prompt, answer = turn
        return self.record(prompt, answer, label, side, job_id)


# Each export format: its folder under the data dir (one of ``paths.FEEDBACK_KINDS``) and its log.
FEEDBACK_LOGS: dict[FeedbackFormat, tuple[str, type[FeedbackLog]]] = {
    "dpo": ("preferences", PreferenceLog),
    "kto": ("thumbs", ThumbLog),
    "episodes": ("arena-preferences", EpisodePreferenceLog),
}
FEEDBACK_FORMATS: tuple[FeedbackFormat, ...] = tuple(FEEDBACK_LOGS)


@overload
def feedback_log(paths: DataPaths, user_name: str, format: Literal["dpo"]) -> PreferenceLog: ...
@overload
def feedback_log(paths: DataPaths, user_name: str, format: Literal["kto"]) -> ThumbLog: ...
@overload
def feedback_log(paths: DataPaths, user_name: str, format: Literal["episodes"]) -> EpisodePreferenceLog: ...
@overload
def feedback_log(paths: DataPaths, user_name: str, format: FeedbackFormat) -> FeedbackLog: ...
def feedback_log(paths: DataPaths, user_name: str, format: FeedbackFormat) -> FeedbackLog:
    """A user's own log of one format: ``preferences/<user>.jsonl`` (DPO), ``thumbs/<user>.jsonl`` (KTO) or
    ``arena-preferences/<user>.jsonl`` (DPO rows of whole agent episodes)."""
    if format not in FEEDBACK_LOGS:
        raise ValueError(
            "the export format is 'dpo' (better-answer picks), 'kto' (thumbs) or 'episodes' (agent arena picks), "
            f"not {format!r}"
        )
    folder, kind = FEEDBACK_LOGS[format]
    return kind(paths.feedback(folder, user_name))


def export_feedback(paths: DataPaths, user_name: str, format: FeedbackFormat) -> Path:
    """A user's log of one format as ``<user>-<format>.jsonl`` in a fresh downloads folder (the only place the app
    serves files from); their earlier exports of that format there are removed. ValueError when it is empty, NotSaved
    (nothing left behind) when it could not be written."""
    log = feedback_log(paths, user_name, format)
    try:
        path = paths.new_download(f"{log.path.stem}-{format}.jsonl")
    except OSError as exc:
        raise NotSaved(f"the export was not written: {storage_problem(exc)}") from exc
    try:
        target = log.export(path)
    except BaseException:
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # no empty folder left in downloads/ (an empty log too: ValueError)
        raise
    for old in paths.downloads.glob(f"*/{target.name}"):
        if old != target:
            old.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                old.parent.rmdir()
    return target
