"""Rows rendered exactly as TRL tokenizes them, for the preview: the renderer, and one function per dataset shape
that a method's table row names (``render``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from backend.core.spec import SpecError
from backend.models.scoring import row_tools

# A template that quotes text arguments (``tool_call.arguments | tojson`` whatever their type: Qwen2.5's, Llama 3's)
# would train calls the model never wrote, so such rows are refused rather than rendered.
TEXT_ARGUMENTS_QUOTED = (
    "dataset: this model's chat template writes tool-call arguments given as JSON text differently from the same "
    "arguments given as an object (it quotes the text), so these rows would train calls the model never made; give "
    "the arguments as objects, or use a model whose template writes text arguments as they are (Qwen3's does)"
)


@dataclass(frozen=True)
class PreviewRow:
    """One example as the model sees it; preference rows carry the rejected side too."""

    rendered: str  # for preference data: the prompt + chosen sequence
    n_tokens: int
    over_max_length: bool  # for preference data: either side is longer than max_length
    rendered_rejected: str | None = None
    n_tokens_rejected: int | None = None

    @property
    def rendered_chosen(self) -> str:
        """For preference data: the prompt + chosen sequence as the model sees it."""
        return self.rendered

    @property
    def n_tokens_chosen(self) -> int:
        """For preference data: the prompt + chosen sequence's length in tokens."""
        return self.n_tokens

    @property
    def longest(self) -> int:
        """Tokens of the longest sequence this row feeds the trainer."""
        return max(self.n_tokens, self.n_tokens_rejected or 0)


def require_chat_template(example: dict[str, Any], tokenizer, model_name: str) -> None:
    """SpecError when ``example`` is a conversation and the model's tokenizer has no chat template to render it."""
    from trl.data_utils import is_conversational

    if is_conversational(example) and not getattr(tokenizer, "chat_template", None):
        raise SpecError(
            [
                f"model.name_or_path: model {model_name} has no chat template; use a chat/instruct model "
                "or plain text data (text, or prompt/completion strings)"
            ]
        )


class Renderer:
    """Turns messages or text into (rendered text, token count) the way TRL's tokenize step does."""

    def __init__(self, tokenizer, template_kwargs: dict[str, Any]):
        self.tokenizer = tokenizer
        self.template_kwargs = template_kwargs

    def messages(
        self, messages: list[dict], add_generation_prompt: bool = False, tools: list[dict] | None = None
    ) -> tuple[str, int]:
        """A conversation through the chat template, with the row's ``tools`` (JSON schemas, as TRL passes them),
        and its token count. SpecError when the template quotes tool-call arguments given as JSON text."""
        kwargs = {"add_generation_prompt": add_generation_prompt, "tools": tools, **self.template_kwargs}
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
        as_objects = _object_arguments(messages)
        if as_objects is not None and self.tokenizer.apply_chat_template(as_objects, tokenize=False, **kwargs) != text:
            raise SpecError([TEXT_ARGUMENTS_QUOTED])
        ids = self.tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs)["input_ids"]
        return text, len(ids)

    def text(self, text: str) -> tuple[str, int]:
        """Plain text and its token count as TRL's tokenizer call gives it."""
        # TRL calls the tokenizer with its defaults, so a BOS token (Llama) counts although it is not in the text.
        return text, len(self.tokenizer(text=text)["input_ids"])

    def with_eos(self, text: str) -> str:
        """TRL appends the EOS token to non-conversational targets unless it is already there."""
        eos = self.tokenizer.eos_token
        return text if not eos or text.endswith(eos) else text + eos


def _object_arguments(messages: list[dict]) -> list[dict] | None:
    """``messages`` with every tool call's JSON-text arguments parsed into an object, or None when none has any."""
    changed, result = False, []
    for message in messages:
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        parsed_calls = []
        for call in calls or []:
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            try:
                parsed = json.loads(arguments) if isinstance(arguments, str) else None
            except ValueError:  # text that is no JSON: nothing to compare it with
                parsed = None
            if isinstance(parsed, dict) and isinstance(function, dict):  # parsed only from a function's arguments
                changed = True
                call = {**call, "function": {**function, "arguments": parsed}}
            parsed_calls.append(call)
        result.append({**message, "tool_calls": parsed_calls} if calls else message)
    return result if changed else None


def single_row(rendered: tuple[str, int], max_length: int) -> PreviewRow:
    """A row that feeds the trainer one sequence, from its (text, token count)."""
    return PreviewRow(rendered=rendered[0], n_tokens=rendered[1], over_max_length=rendered[1] > max_length)


def render_sft_row(example: dict[str, Any], renderer: Renderer, max_length: int) -> PreviewRow:
    """An SFT example: the whole conversation, prompt + completion, or text."""
    return single_row(_render_sft(example, renderer), max_length)


def render_prompt_row(example: dict[str, Any], renderer: Renderer, max_length: int) -> PreviewRow:
    """A prompt-only example (GRPO): the prompt with the generation prompt."""
    return single_row(_render_prompt_only(example, renderer), max_length)


def _render_sft(example: dict[str, Any], renderer: Renderer) -> tuple[str, int]:
    from trl.data_utils import is_conversational

    if "messages" in example:
        return renderer.messages(example["messages"], tools=row_tools(example))
    if "prompt" in example:
        # SFTTrainer templates prompt + completion as one conversation; the prompt alone only marks the loss mask.
        if is_conversational(example):
            return renderer.messages(example["prompt"] + example["completion"], tools=row_tools(example))
        return renderer.text(example["prompt"] + renderer.with_eos(example["completion"]))
    return renderer.text(renderer.with_eos(example["text"]))


def render_preference_row(example: dict[str, Any], renderer: Renderer, max_length: int) -> PreviewRow:
    """A preference pair: prompt + chosen, and prompt + rejected (a conversation with the row's ``tools``, whole agent
    episodes included)."""
    from trl.data_utils import extract_prompt, is_conversational

    tools = row_tools(example)
    if "prompt" not in example:  # implicit prompt: DPOTrainer splits off the shared leading turns
        example = extract_prompt(example)
    if is_conversational(example):
        chosen = renderer.messages(example["prompt"] + example["chosen"], tools=tools)
        rejected = renderer.messages(example["prompt"] + example["rejected"], tools=tools)
    else:
        chosen = renderer.text(example["prompt"] + renderer.with_eos(example["chosen"]))
        rejected = renderer.text(example["prompt"] + renderer.with_eos(example["rejected"]))
    return PreviewRow(
        rendered=chosen[0],
        n_tokens=chosen[1],
        over_max_length=max(chosen[1], rejected[1]) > max_length,
        rendered_rejected=rejected[0],
        n_tokens_rejected=rejected[1],
    )


def _render_prompt_only(example: dict[str, Any], renderer: Renderer) -> tuple[str, int]:
    from trl.data_utils import is_conversational

    if is_conversational(example):
        return renderer.messages(example["prompt"], add_generation_prompt=True)
    return renderer.text(example["prompt"])
