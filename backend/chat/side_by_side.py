"""The side-by-side chat's backend: one model with a job's adapter, both answers streamed together (what users say
about the answers is kept by backend/chat/feedback.py)."""

from __future__ import annotations

import dataclasses
import gc
import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from transformers.generation.streamers import BaseStreamer

from backend.chat.feedback_log import message_text
from backend.chat.tool_calls import ChatAnswer, read_answer
from backend.core.spec import ModelSpec, QuantizationSpec
from backend.models.inference import load_for_inference
from backend.models.mixed_batch import SIDE_ADAPTERS, TUNED_ADAPTER, GenerationSettings, eos_ids, mixed_generate

if TYPE_CHECKING:
    from backend.jobs.records import JobRecord

Message = dict[str, Any]

# How the chat asks: "compare" as the learning verdict's evaluation does (each question on its own, greedy on both
# sides), or "conversation" (each side's history carries over, sampled as set).
ChatMode = Literal["compare", "conversation"]
CHAT_MODES: tuple[ChatMode, ...] = ("compare", "conversation")


def mode_turn(
    mode: str, base_history: Sequence[Message], tuned_history: Sequence[Message], settings: GenerationSettings
) -> tuple[list[Message], list[Message], GenerationSettings]:
    """What a turn sends each side in ``mode``: in "compare" no history and greedy answers (the system prompt and
    the answer's length stay), so the sides answer as the verdict scored them; in "conversation" all as given.

    >>> base, tuned, greedy = mode_turn("compare", [{"role": "user", "content": "2+2?"}], [], GenerationSettings())
    >>> base, tuned, greedy.temperature
    ([], [], 0.0)
    """
    if mode == "conversation":
        return list(base_history), list(tuned_history), settings
    if mode == "compare":
        return [], [], dataclasses.replace(settings, temperature=0.0)
    raise ValueError(f"the chat's mode is 'compare' or 'conversation', not {str(mode)[:40]!r}")


@dataclass(frozen=True)
class ChatTarget:
    """What a finished job's chat loads: the base model, how it was quantized, and the adapter on top."""

    model: ModelSpec
    quantization: QuantizationSpec
    adapter_dir: Path
    job_id: str | None = None


def chat_target(job: JobRecord) -> ChatTarget:
    """The model and adapter of a job that can be chatted with; a ValueError a user can act on otherwise."""
    from backend.jobs.records import JobStatus

    if job.status is not JobStatus.succeeded:
        raise ValueError(
            f"job {job.id} is {job.status.value}; only a job that succeeded has a tuned model to chat with - "
            "pick a finished job, or wait for this one to finish"
        )
    if not job.spec.lora.enabled:
        raise ValueError(
            f"job {job.id} trained all weights rather than a LoRA adapter, so there is no adapter to switch off; "
            "the side-by-side chat needs a LoRA job"
        )
    adapter = job.artifacts.adapter_dir
    if not adapter or not (Path(adapter) / "adapter_config.json").is_file():
        raise ValueError(
            f"job {job.id} has no saved adapter{f' in {adapter}' if adapter else ''}; "
            "its files may have been deleted - run the job again to chat with it"
        )
    return ChatTarget(job.spec.model, job.spec.quantization, Path(adapter), job.id)


@dataclass(frozen=True)
class PairUpdate:
    """Both sides' answers so far; the last update of a turn also holds each side's answer read for tool calls."""

    base: str
    tuned: str
    answers: tuple[ChatAnswer, ChatAnswer] | None = None

    @property
    def final(self) -> bool:
        """Whether both answers are complete (the turn's last update)."""
        return self.answers is not None


def build_prompt(history: Sequence[Message], user_message: str, system_prompt: str = "") -> list[Message]:
    """The messages one side sees: the system prompt, that side's own past turns, then the new user turn.

    An assistant turn keeps its ``tool_calls`` and a tool's answer (role ``tool``) stays, so a template that renders
    tool calls shows the model its own calls and their answers as it wrote and read them."""
    if not user_message or not user_message.strip():
        raise ValueError("the message is empty; type something to send to both models")
    messages: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt.strip() else []
    for turn in history:
        role, content = turn.get("role"), message_text(turn.get("content"))
        # A chat widget's history may carry the system prompt or metadata rows; the settings own the system prompt.
        if role in {"user", "assistant"} and content is not None:
            message: Message = {"role": role, "content": content}
            if role == "assistant" and turn.get("tool_calls"):
                message["tool_calls"] = list(turn["tool_calls"])
            messages.append(message)
        elif role == "tool" and content is not None:
            messages.append({"role": "tool", "name": str(turn.get("name") or ""), "content": content})
    messages.append({"role": "user", "content": user_message})
    return messages


def visible_text(text: str, final: bool) -> str:
    """What a side shows: without a leading think block, and mid-stream without a half-decoded character."""
    if text.lstrip().startswith("<think>"):
        end = text.find("</think>")
        text = "" if end < 0 else text[end + len("</think>") :].lstrip()
    # A multi-byte character split across tokens decodes to U+FFFD until its last byte arrives; holding it back keeps
    # every update a prefix of the next one.
    return text if final else text.rstrip("\ufffd")


class _End:
    """The marker the streamer queues when generation is over."""


class PairStreamer(BaseStreamer):
    """A transformers streamer for a two-row batch: each step's new tokens go on a queue, one id per row.

    ``generate`` first hands over the whole prompt (a 2-D tensor), which is skipped; afterwards every call carries the
    step's next token of each row (a 1-D tensor). Rows that have finished keep receiving padding; the reader stops
    each row at its first end-of-sequence token.
    """

    def __init__(self) -> None:
        self.queue: queue.Queue[list[int] | _End | BaseException] = queue.Queue()

    def put(self, value: Any) -> None:
        """Queue one step's new token of each row; the prompt (the first, 2-D call) is skipped."""
        if value.dim() > 1:  # the prompt
            return
        self.queue.put([int(t) for t in value.tolist()])

    def end(self) -> None:
        """Called by ``generate`` when it is done: tells the reader the stream ended."""
        self.queue.put(_End())

    def fail(self, error: BaseException) -> None:
        """Hand the generation thread's error to the reader, which raises it."""
        self.queue.put(error)


class _StopWhenAsked:
    """A stopping criterion that ends generation for every row once the reader has gone away."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


class ComparisonChat:
    """One base model with the tuned adapter loaded once; the base side is the same model with the adapter off.

    Both sides are answered in one batched ``generate``: PEFT's mixed-adapter batches run row 0 without the adapter
    (``__base__``) and row 1 with it, so the two answers advance token by token together and nothing is copied.
    """

    def __init__(self, model: Any, tokenizer: Any, job_id: str | None = None) -> None:
        from peft import PeftModel

        if not isinstance(model, PeftModel) or TUNED_ADAPTER not in model.peft_config:
            raise ValueError("the comparison chat needs a PeftModel with its adapter loaded under the name 'default'")
        self.model: Any = model
        self.tokenizer = tokenizer
        self.job_id = job_id
        # One generation at a time per model: they share the weights and, for seeded sampling, the torch RNG.
        self._generating = threading.Lock()

    @classmethod
    def load(
        cls,
        model_spec: ModelSpec,
        quant_spec: QuantizationSpec,
        models_dir: Path,
        adapter_dir: Path,
        job_id: str | None = None,
    ) -> ComparisonChat:
        """Load the base model once with the adapter from ``adapter_dir`` on top."""
        model, tokenizer = load_for_inference(model_spec, quant_spec, models_dir, adapter_dir)
        return cls(model, tokenizer, job_id)

    @property
    def base_model(self) -> Any:
        """The one transformers model under the adapter (both sides run on it)."""
        self._check_open()
        return self.model.get_base_model()

    @property
    def closed(self) -> bool:
        """Whether the model was let go (``close``); a closed chat answers nothing."""
        return self.model is None

    def close(self) -> None:
        """Drop the model once any generation in flight ends; later turns raise a ValueError to pick the job again."""
        with self._generating:
            self.model = None

    @property
    def generating(self) -> threading.Lock:
        """Held around every use of the model (the chat's generations, the arena's rounds): one at a time."""
        return self._generating

    def _check_open(self) -> None:
        if self.model is None:
            raise ValueError(
                "this chat's model was unloaded because another job was picked for chatting; pick the job again"
            )

    def prompt_messages(
        self, history: Sequence[Message], user_message: str, settings: GenerationSettings
    ) -> list[Message]:
        """The messages one side is prompted with (what a preference row records as its prompt)."""
        return build_prompt(history, user_message, settings.system_prompt)

    def _render(self, messages: list[Message]) -> str:
        # enable_thinking=False asks Qwen3-style templates for a direct answer; templates without it ignore it.
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, enable_thinking=False
        )

    def _eos_ids(self) -> set[int]:
        return eos_ids(self.model, self.tokenizer)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def stream_pair(
        self,
        base_history: Sequence[Message],
        tuned_history: Sequence[Message],
        user_message: str,
        settings: GenerationSettings | None = None,
    ) -> Iterator[tuple[str, str]]:
        """Answer ``user_message`` on both sides at once, yielding (base text, tuned text) so far as tokens arrive.

        Each side is prompted with its own history (its own past answers) under the same system prompt, sampling
        settings and seed. The last yield holds both complete answers. Closing the iterator early stops generation.
        """
        updates = self.stream_turn(base_history, tuned_history, user_message, settings)
        try:
            for update in updates:
                yield update.base, update.tuned
        finally:
            updates.close()

    def stream_turn(
        self,
        base_history: Sequence[Message],
        tuned_history: Sequence[Message],
        user_message: str,
        settings: GenerationSettings | None = None,
    ) -> Iterator[PairUpdate]:
        """:meth:`stream_pair` as ``PairUpdate``s: the last one also holds each side's answer read for tool calls
        (TRL's parser on the generated tokens, so markup the text leaves out, special tokens, is still read)."""
        settings = settings or GenerationSettings()
        prompts = [
            self._render(build_prompt(history, user_message, settings.system_prompt))
            for history in (base_history, tuned_history)
        ]
        self._check_open()
        streamer = PairStreamer()
        stop = threading.Event()
        worker = threading.Thread(
            target=self._generate, args=(prompts, settings, streamer, stop), name="comparison-chat", daemon=True
        )
        worker.start()
        try:
            yield from self._read(streamer, self._eos_ids(), prompts)
        finally:
            stop.set()  # the reader is done or went away: let generation end at the next step

    def _read(self, streamer: PairStreamer, eos: set[int], prompts: list[str]) -> Iterator[PairUpdate]:
        ids: list[list[int]] = [[], []]
        done = [False, False]
        shown = ("", "")
        while True:
            items = [streamer.queue.get()]
            while not isinstance(items[-1], (_End, BaseException)):  # catch up on steps that queued meanwhile
                try:
                    items.append(streamer.queue.get_nowait())
                except queue.Empty:
                    break
            for item in items:
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, _End):
                    break
                for row, token in enumerate(item):
                    if done[row]:
                        continue
                    if token in eos:
                        done[row] = True
                    else:
                        ids[row].append(token)
            final = isinstance(items[-1], _End)
            texts = (
                visible_text(self._decode(ids[0]), final or done[0]),
                visible_text(self._decode(ids[1]), final or done[1]),
            )
            if final:
                yield PairUpdate(
                    *texts,
                    answers=(self._answer(ids[0], texts[0], prompts[0]), self._answer(ids[1], texts[1], prompts[1])),
                )
                return
            if texts != shown:
                shown = texts
                yield PairUpdate(*texts)

    def _answer(self, ids: list[int], text: str, prompt: str) -> ChatAnswer:
        """One side's complete answer read for tool calls, after the prompt it answered."""
        return read_answer(self.tokenizer, ids, text, self.tokenizer(prompt, add_special_tokens=False)["input_ids"])

    def _generate(
        self, prompts: list[str], settings: GenerationSettings, streamer: PairStreamer, stop: threading.Event
    ) -> None:
        """Run the batched generation (in a background thread), reporting a failure through the streamer."""
        from transformers import StoppingCriteriaList

        try:
            with self._generating:
                self._check_open()
                mixed_generate(
                    self.model,
                    self.tokenizer,
                    prompts,
                    SIDE_ADAPTERS,
                    settings,
                    eos_token_id=sorted(self._eos_ids()),
                    streamer=streamer,
                    stopping_criteria=StoppingCriteriaList([_StopWhenAsked(stop)]),
                )
        except BaseException as error:  # the reader re-raises it in the caller's thread
            streamer.fail(error)


class ChatModels:
    """Keeps the last picked (base model, adapter) pair loaded and frees the previous one when another is picked.

    One model in memory at a time; safe to call from the UI's handler threads.
    """

    def __init__(self, models_dir: Path) -> None:
        self.models_dir = Path(models_dir)
        self._lock = threading.Lock()
        self._key: tuple[str, str, str] | None = None
        self._chat: ComparisonChat | None = None

    @property
    def current(self) -> ComparisonChat | None:
        """The loaded comparison, or None before one is picked."""
        return self._chat

    def for_job(self, job: JobRecord) -> ComparisonChat:
        """The chat for a finished job's adapter (ValueError when the job has none)."""
        return self.get(chat_target(job))

    def get(self, target: ChatTarget) -> ComparisonChat:
        """The chat for ``target``, loading it (and unloading the previous pair) unless it is the one already loaded."""
        key = (
            target.model.model_dump_json(exclude={"parent_job_id"}),
            target.quantization.model_dump_json(),
            str(Path(target.adapter_dir).resolve()),
        )
        with self._lock:
            if self._chat is not None and self._key == key and not self._chat.closed:
                if target.job_id is not None:
                    self._chat.job_id = target.job_id
                return self._chat
            self._unload()
            self._chat = ComparisonChat.load(
                target.model, target.quantization, self.models_dir, target.adapter_dir, target.job_id
            )
            self._key = key
            return self._chat

    def clear(self) -> None:
        """Unload whatever is loaded."""
        with self._lock:
            self._unload()

    def _unload(self) -> None:
        if self._chat is None:
            return
        self._chat.close()
        self._chat, self._key = None, None
        gc.collect()
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
