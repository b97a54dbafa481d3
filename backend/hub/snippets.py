"""The "Use this model" code that loads a job's adapter or merged model: one builder for the card and the Jobs tab.

Each snippet names the exact place the model is: the pushed repo id when it was pushed, else the local folder. The
adapter is loaded with transformers + peft or served by vLLM with ``--enable-lora``; the merged model needs neither
peft nor ``--enable-lora``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from backend.core.hub_names import hub_model_id, slug
from backend.core.spec import JobSpec
from backend.methods.table import support

CHAT_LINES = """
messages = [{"role": "user", "content": "What is 7 + 5?"}]
inputs = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
).to(model.device)
output = model.generate(**inputs, max_new_tokens=128)
print(tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))"""


@dataclass(frozen=True)
class UseSnippet:
    """One way to use the model: a title, the fenced block's language and the code."""

    title: str
    language: str
    code: str

    def markdown(self) -> str:
        """The snippet as a titled, fenced Markdown block."""
        return f"**{self.title}**\n\n```{self.language}\n{self.code}\n```"


def _base_line(spec: JobSpec) -> str:
    base = hub_model_id(spec.model.name_or_path)
    if base:
        return f'base_model_id = "{base}"'
    return f'base_model_id = "path/to/base-model"  # trained on {spec.model.name_or_path}, which is not on the Hub'


def _quant_note(spec: JobSpec) -> str:
    if spec.quantization.mode == "4bit":
        return (
            "\n# Trained on a 4-bit base: to save memory, also pass\n# quantization_config=BitsAndBytesConfig("
            'load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)'
        )
    if spec.quantization.mode == "8bit":
        return (
            "\n# Trained on an 8-bit base: to save memory, also pass "
            "quantization_config=BitsAndBytesConfig(load_in_8bit=True)"
        )
    return ""


# A reward model scores a conversation (its last answer): one number, higher for the answer it prefers.
SCORE_LINES = """
messages = [{"role": "user", "content": "What is 7 + 5?"}, {"role": "assistant", "content": "12"}]
inputs = tokenizer.apply_chat_template(messages, return_tensors="pt", return_dict=True).to(model.device)
print(model(**inputs).logits[0, 0].item())  # higher: the answer the reward model prefers"""


def usage_snippet(spec: JobSpec, repo_id: str) -> str:
    """Python that loads the tuned model (base + this adapter, or the full model) and chats through its template; a
    reward model's (a score head, ``num_labels=1``) scores an answer instead."""
    if not spec.lora.enabled:
        return merged_snippet(repo_id)
    head = support(spec.method).head
    auto_class, extra, lines = (
        ("AutoModelForCausalLM", "", CHAT_LINES) if head.generates else (head.auto_class, ", num_labels=1", SCORE_LINES)
    )
    tokenizer_line = "tokenizer = AutoTokenizer.from_pretrained(adapter_id)"
    return f'''from peft import PeftModel
from transformers import {auto_class}, AutoTokenizer

{_base_line(spec)}
adapter_id = "{repo_id}"

{tokenizer_line}  # the tokenizer and chat template used in training{_quant_note(spec)}
model = {auto_class}.from_pretrained(base_model_id{extra}, dtype="auto", device_map="auto")
model = PeftModel.from_pretrained(model, adapter_id)
{lines}'''


def merged_snippet(model_id: str) -> str:
    """Python that loads a whole model (a merged export) with plain transformers, no peft, and chats with it."""
    return f'''from transformers import AutoModelForCausalLM, AutoTokenizer

model_id = "{model_id}"

tokenizer = AutoTokenizer.from_pretrained(model_id)
model = AutoModelForCausalLM.from_pretrained(model_id, dtype="auto", device_map="auto")
{CHAT_LINES}'''


def lora_name(spec: JobSpec, job_id: str) -> str:
    """The name vLLM serves the adapter under (the ``model`` field of a request): the run's repo-safe name."""
    return slug(spec.output.run_name or f"{spec.method.value}-{job_id}")


def vllm_adapter_command(spec: JobSpec, job_id: str, adapter: str) -> str:
    """The ``vllm serve`` command that serves the base with this adapter as a LoRA module."""
    base = hub_model_id(spec.model.name_or_path) or "path/to/base-model"
    return (
        f"vllm serve {shlex.quote(base)} --enable-lora --max-lora-rank {max(spec.lora.r, 16)} \\\n"
        f"  --lora-modules {shlex.quote(f'{lora_name(spec, job_id)}={adapter}')}"
    )


def use_snippets(spec: JobSpec, job_id: str, adapter: str | None, merged: str | None = None) -> list[UseSnippet]:
    """Every way to use the job's model, exact to where it is: ``adapter`` and ``merged`` are repo ids (pushed) or
    local folders (not pushed); None leaves that model's snippets out.

    >>> from backend.core.spec import parse_spec
    >>> spec = parse_spec({"method": "sft", "model": {"name_or_path": "Qwen/Qwen3-0.6B"},
    ...                    "dataset": {"source": "builtin", "name": "chat-demo"}, "output": {"run_name": "r1"}})
    >>> [s.title for s in use_snippets(spec, "j1", "me/r1", "me/r1-merged")]  # doctest: +NORMALIZE_WHITESPACE
    ['Adapter with transformers + peft', 'Adapter with vLLM',
     'Merged model with transformers', 'Merged model with vLLM']
    >>> print(use_snippets(spec, "j1", None, "me/r1-merged")[1].code)
    vllm serve me/r1-merged
    """
    snippets: list[UseSnippet] = []
    if adapter and spec.lora.enabled:
        snippets.append(UseSnippet("Adapter with transformers + peft", "python", usage_snippet(spec, adapter)))
        if support(spec.method).head.generates:  # vLLM serves LoRA adapters of language models
            snippets.append(UseSnippet("Adapter with vLLM", "bash", vllm_adapter_command(spec, job_id, adapter)))
    if merged:
        snippets += [
            UseSnippet("Merged model with transformers", "python", merged_snippet(merged)),
            UseSnippet("Merged model with vLLM", "bash", f"vllm serve {shlex.quote(merged)}"),
        ]
    return snippets


def snippets_markdown(snippets: list[UseSnippet]) -> str:
    """The snippets as one Markdown text (the Jobs tab's "Use this model" and the card's section)."""
    return "\n\n".join(snippet.markdown() for snippet in snippets)
