"""The facade's side-by-side chat, the judgements users give its answers, and the tool calls its answers make, run in
the picked job's environment."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from backend.api.common import name_of
from backend.api.core import StudioCore
from backend.api.guards import CHAT_STREAMS, TOOL_CALLS, TOOL_RUNS, TOOL_TIME, build
from backend.api.jobs import JobOperations
from backend.core.spec import SpecError
from backend.core.users import User
from backend.platform.limits import HeldStream, held_run, int_setting
from backend.training.named_jobs import require_generating
from backend.workflows.chat_tools import DEFAULT_IDLE_S, DEFAULT_MAX_SESSIONS, SIDES, ChatToolSessions

if TYPE_CHECKING:
    from backend.chat.answer_scores import AnswerScorer
    from backend.chat.feedback import FeedbackFormat, PreferenceLog, ThumbLog
    from backend.chat.side_by_side import ChatMode, ChatModels, ComparisonChat, GenerationSettings, PairUpdate
    from backend.chat.tool_calls import ToolCall
    from backend.workflows.chat_tools import ToolRun

T = TypeVar("T")
U = TypeVar("U")

MAX_SCORED = 8  # conversations a reward model scores in one call (the chat sends its two sides)


class ChatToolRuns:
    """The chat's tool-call environments (one per user and job) and the limits on running calls in them; held by
    the chat part and closed with it."""

    def __init__(self) -> None:
        self.sessions = ChatToolSessions(
            idle_s=float(int_setting("STUDIO_CHAT_TOOLS_IDLE_S", int(DEFAULT_IDLE_S), 5)),
            max_sessions=int_setting("STUDIO_MAX_CHAT_TOOL_ENVIRONMENTS", DEFAULT_MAX_SESSIONS),
        )
        # Running an answer's tool calls plays the job's environment (a built-in one is a server process): signed-in
        # users only on a Space, a few runs a minute each, one at a time per person, off the request thread with a
        # time limit.
        self.calls = build(TOOL_CALLS)
        self.in_flight = build(TOOL_RUNS)
        # Its threads live as long as the app: a built-in server dies with the thread that started it. Every run let
        # in has its own thread: a slow server holds only its own.
        self.time = build(TOOL_TIME)

    def run_held(self, user: User, action: Callable[[], T]) -> T:
        """``action()`` off the request thread within the time limit, counted in flight until it really ends."""
        return held_run(self.in_flight, self.time, user.name, action)

    def close(self) -> None:
        """Close every environment and the pool (the app is closing)."""
        self.sessions.close_all()
        self.time.close()


class ChatOperations:
    """The chat (``api.chat``): side-by-side answers, their tool calls and the judgements on them, over the facade's
    core and its jobs; it holds the chat models (loaded on the first chat), the streams' limit and the tool runs."""

    def __init__(self, core: StudioCore, jobs: JobOperations) -> None:
        self.core = core
        self.jobs = jobs
        self._models: ChatModels | None = None  # loaded on the first chat
        self._scorer: AnswerScorer | None = None  # a reward job's model, loaded on the first score
        self._lock = threading.Lock()
        self._tools = ChatToolRuns()  # each user's environment for their chat's tool calls, and its limits
        self._streams = build(CHAT_STREAMS)  # answers streaming at once, per user and on the whole Space

    def close(self) -> None:
        """Close the tool-call environments and their pool (the facade is closing)."""
        self._tools.close()

    def for_job(self, job_id: str, user: User | None) -> ComparisonChat:
        """The loaded base model with a finished job's adapter, for its chat or its arena (ValueError sentences: not
        succeeded, no adapter); another user's job is JobNotFound."""
        from backend.chat.side_by_side import ChatModels

        job = self.jobs.get_job(job_id, user)
        require_generating(job, "chat")
        with self._lock:
            if self._models is None:
                self._models = ChatModels(self.core.paths.models)
            models = self._models
        return models.for_job(job)

    def score_answers(self, job_id: str, conversations: Sequence[list[dict]], user: User | None = None) -> list[float]:
        """A finished reward job's score of each conversation's last answer (the chat's two sides), counted among the
        user's chat streams while it runs. Sentences (SpecError): not a reward model, not finished, a conversation
        without an answer; another user's job is JobNotFound."""
        from backend.chat.answer_scores import AnswerScorer
        from backend.chat.feedback_log import message_text
        from backend.training.named_jobs import reward_job_source

        self.core.require_user(user, "score answers")
        source = reward_job_source(self.core.store, job_id, user)
        # Each turn as the reward model read its training rows: a role and its text (tool blocks and files left out).
        texts = [
            [
                {"role": turn["role"], "content": text}
                for turn in turns
                if isinstance(turn, dict)
                and turn.get("role") in ("system", "user", "assistant")
                and (text := message_text(turn.get("content")))
            ]
            for turns in conversations[: MAX_SCORED + 1]
        ]
        if len(texts) > MAX_SCORED:
            raise SpecError([f"at most {MAX_SCORED} conversations are scored at once"])
        if not texts or any(not turns or turns[-1]["role"] != "assistant" for turns in texts):
            raise SpecError(["ask something first: each side needs an answer to score"])
        release = self._streams.hold(user.name) if user is not None else (lambda: None)
        try:
            with self._lock:
                if self._scorer is None:
                    self._scorer = AnswerScorer(self.core.paths.models)
                scorer = self._scorer
            return scorer.score(job_id, source, texts)
        finally:
            release()

    def _held_stream(self, stream: Iterator[U], user: User | None) -> Iterator[U]:
        """``stream``, counted among the user's chat streams until it ends (a trusted caller's is not counted)."""
        return stream if user is None else HeldStream(stream, self._streams.hold(user.name))

    def chat_pair(
        self,
        job_id: str,
        base_history: list[dict],
        tuned_history: list[dict],
        message: str,
        settings: GenerationSettings | None = None,
        user: User | None = None,
        mode: ChatMode = "conversation",
    ) -> Iterator[tuple[str, str]]:
        """Stream (base answer, tuned answer) so far for a finished job: one base model, adapter on for one side.

        ``mode`` "compare" asks as the learning verdict's evaluation does: the histories are left out and both sides
        answer greedily (the Chat tab's default); "conversation" sends each side's history and samples as set."""
        from backend.chat.side_by_side import GenerationSettings, mode_turn

        base_history, tuned_history, settings = mode_turn(
            mode, base_history, tuned_history, settings or GenerationSettings()
        )
        chat = self.for_job(job_id, user)
        return self._held_stream(chat.stream_pair(base_history, tuned_history, message, settings), user)

    def chat_turn(
        self,
        job_id: str,
        base_history: list[dict],
        tuned_history: list[dict],
        message: str,
        settings: GenerationSettings | None = None,
        user: User | None = None,
        mode: ChatMode = "conversation",
    ) -> Iterator[PairUpdate]:
        """:meth:`chat_pair` as ``PairUpdate``s (``.base``, ``.tuned``): the last one's ``.answers`` hold each side's
        answer read for tool calls (``ChatAnswer``: the text as streamed, what it says apart from its calls, the
        calls). A history may hold assistant turns with ``tool_calls`` and ``tool`` turns (a tool's answer)."""
        from backend.chat.side_by_side import GenerationSettings, mode_turn

        base_history, tuned_history, settings = mode_turn(
            mode, base_history, tuned_history, settings or GenerationSettings()
        )
        chat = self.for_job(job_id, user)
        return self._held_stream(chat.stream_turn(base_history, tuned_history, message, settings), user)

    def chat_environment(self, job_id: str, user: User | None = None) -> str | None:
        """The environment a job's chat can run tool calls in (``spec.environment.name``); None when it has none."""
        return self.jobs.get_job(job_id, user).spec.environment.name

    def run_tool_calls(
        self, job_id: str, calls: Sequence[ToolCall | dict], side: str = "tuned", user: User | None = None
    ) -> ToolRun:
        """Run one chat side's tool calls in the job's environment and return the tool's answers (``ToolRun``).

        Each user has one environment per job (a built-in server started on the first run), with an episode per side
        started from the job's first dataset row; it is closed by :meth:`close_chat_tools`, after an idle timeout and
        when the app closes. Another user's job is JobNotFound; a job without an environment, too many calls, a rate
        limit or a server that stopped answering is a ValueError sentence."""
        self.core.require_user(user, "running tool calls")
        if side not in SIDES:
            raise SpecError([f"the side is 'base' or 'tuned', not {str(side)[:40]!r}"])
        job = self.jobs.get_job(job_id, user)
        if not job.spec.environment.name:
            raise SpecError([f"job {job.id} plays no environment, so there is nothing to run its tool calls in"])
        from backend.chat.tool_calls import tool_calls_from

        checked = tool_calls_from(calls)  # refused before anything is counted or started
        owner, uploads = name_of(user), self.core.uploads_of(job.spec)

        def run() -> ToolRun:
            return self._tools.sessions.run(owner, job.id, job.spec, side, checked, uploads)

        if user is None:  # a trusted caller (tests, scripts) waits on its own thread
            return run()
        self._tools.calls.check(user.name)
        return self._tools.run_held(user, run)

    def close_chat_tools(self, user: User | None = None, job_id: str | None = None) -> int:
        """Close the user's tool-call environment for ``job_id`` (every one of theirs when None): the chat was
        cleared or another job picked. How many were open."""
        return self._tools.sessions.close(name_of(user), job_id)

    def preference_log(self, user: User | None = None) -> PreferenceLog:
        """Where a user's "this side is better" picks are kept (DPO rows)."""
        from backend.chat.feedback import feedback_log

        return feedback_log(self.core.paths, name_of(user), "dpo")

    def thumb_log(self, user: User | None = None) -> ThumbLog:
        """Where a user's 👍/👎 on single answers are kept (KTO rows)."""
        from backend.chat.feedback import feedback_log

        return feedback_log(self.core.paths, name_of(user), "kto")

    def export_preferences(self, user: User | None = None, format: FeedbackFormat = "dpo") -> Path:
        """The user's picks (``dpo``) or thumbs (``kto``) as ``<user>-<format>.jsonl`` in a fresh downloads folder
        (the only place the app serves files from); their earlier exports of it are removed. ValueError when empty."""
        from backend.chat.feedback import export_feedback

        return export_feedback(self.core.paths, name_of(user), format)
