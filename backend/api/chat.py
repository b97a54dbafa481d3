"""The facade's side-by-side chat and the judgements users give its answers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from backend.api.common import name_of
from backend.core.users import User
from backend.platform.limits import HeldStream

if TYPE_CHECKING:
    from backend.chat.feedback import FeedbackFormat, PreferenceLog, ThumbLog
    from backend.chat.side_by_side import GenerationSettings


class ChatOperations:
    """The chat: for ``StudioAPI`` (it uses ``get_job``, the chat models and the streams' limit)."""

    def chat_pair(
        self,
        job_id: str,
        base_history: list[dict],
        tuned_history: list[dict],
        message: str,
        settings: GenerationSettings | None = None,
        user: User | None = None,
    ):
        """Stream (base answer, tuned answer) so far for a finished job: one base model, adapter on for one side."""
        from backend.chat.side_by_side import ChatModels

        job = self.get_job(job_id, user)
        with self._chat_lock:
            if self._chat_models is None:
                self._chat_models = ChatModels(self.paths.models)
        chat = self._chat_models.for_job(job)
        if user is None:
            return chat.stream_pair(base_history, tuned_history, message, settings)
        return HeldStream(
            chat.stream_pair(base_history, tuned_history, message, settings), self._chat_streams.hold(user.name)
        )

    def preference_log(self, user: User | None = None) -> PreferenceLog:
        """Where a user's "this side is better" picks are kept (DPO rows)."""
        from backend.chat.feedback import feedback_log

        return feedback_log(self.paths, name_of(user), "dpo")

    def thumb_log(self, user: User | None = None) -> ThumbLog:
        """Where a user's 👍/👎 on single answers are kept (KTO rows)."""
        from backend.chat.feedback import feedback_log

        return feedback_log(self.paths, name_of(user), "kto")

    def export_preferences(self, user: User | None = None, format: FeedbackFormat = "dpo") -> Path:
        """The user's picks (``dpo``) or thumbs (``kto``) as ``<user>-<format>.jsonl`` in a fresh downloads folder
        (the only place the app serves files from); their earlier exports of it are removed. ValueError when empty."""
        from backend.chat.feedback import export_feedback

        return export_feedback(self.paths, name_of(user), format)
