"""The Ollama Modelfile: its TEMPLATE renders conversations exactly as the tokenizer's chat template does (checked with
a Go-template renderer of the subset it emits), with its stop tokens and system prompt, and never an ADAPTER line."""

from __future__ import annotations

import copy

import pytest
from transformers import AutoTokenizer

from backend.hub.modelfile import TemplateMismatch, build_modelfile, chat_shape, go_template
from tests.helpers.go_template import render

# A Llama-3-style template (BOS once, a header per turn, <|eot_id|> after each), built here rather than downloaded.
LLAMA3_TEMPLATE = (
    "{{- bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
LLAMA3_TOKENS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
# A Qwen2.5-style template: a default system prompt where the conversation has none.
DEFAULT_SYSTEM_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message.role != 'system' %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# A Gemma-style template folds the system prompt into the first user turn: a shape the Modelfile does not translate.
FOLDED_SYSTEM_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first = messages[0]['content'] + '\\n\\n' %}"
    "{% set loop_messages = messages[1:] %}{% else %}{% set first = '' %}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + (first if loop.first else '') + message['content'] + '<end_of_turn>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)

CONVERSATIONS = {
    "system and user": [
        {"role": "system", "content": "You answer in one line."},
        {"role": "user", "content": "What is 12 + 9?"},
    ],
    "user only": [{"role": "user", "content": "Name a colour."}],
    "multi-turn": [
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello. What shall we count?"},
        {"role": "user", "content": "Count to three,\nplease."},
    ],
    "system and multi-turn": [
        {"role": "system", "content": "Be brief.\nAlways."},
        {"role": "user", "content": "What is 7 - 2?"},
        {"role": "assistant", "content": "7 - 2 = \\boxed{5}"},
        {"role": "user", "content": "And 40 + 2?"},
        {"role": "assistant", "content": "40 + 2 = \\boxed{42}"},
        {"role": "user", "content": "Thanks {{ not a template }}"},
    ],
}


def _ollama_render(template: str, messages: list[dict[str, str]]) -> str:
    """What Ollama hands its Go template for a chat: the system messages joined as .System, every message in
    .Messages (system ones included, as Ollama keeps them)."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    values = {"System": system, "Messages": [{"Role": m["role"], "Content": m["content"]} for m in messages]}
    return render(template, values)


@pytest.fixture(scope="module")
def demo_tokenizer(models_dir):
    return AutoTokenizer.from_pretrained(models_dir / "tiny-qwen3")


def _with_template(tokenizer, template: str, tokens: list[str] = (), bos: str | None = None, eos: str | None = None):
    changed = copy.deepcopy(tokenizer)
    if tokens:
        changed.add_special_tokens({"additional_special_tokens": list(tokens)})
    if bos:
        changed.bos_token = bos
    if eos:
        changed.eos_token = eos
    changed.chat_template = template
    return changed


def _tokenizers(demo):
    return {
        "demo (qwen3)": demo,
        "llama-3 style": _with_template(
            demo, LLAMA3_TEMPLATE, LLAMA3_TOKENS, bos="<|begin_of_text|>", eos="<|eot_id|>"
        ),
        "default system prompt": _with_template(demo, DEFAULT_SYSTEM_TEMPLATE),
    }


@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
@pytest.mark.parametrize("which", ["demo (qwen3)", "llama-3 style", "default system prompt"])
def test_the_modelfile_template_renders_like_the_chat_template(demo_tokenizer, which, conversation):
    tokenizer = _tokenizers(demo_tokenizer)[which]
    messages = CONVERSATIONS[conversation]
    template = go_template(chat_shape(tokenizer))
    expected = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert _ollama_render(template, messages) == expected


def test_the_demo_modelfile_names_the_file_the_stops_and_the_system_prompt(demo_tokenizer):
    text, note = build_modelfile(demo_tokenizer, "run-q8_0.gguf", system="You are terse.", eos_ids=[2])
    assert note is None
    lines = text.splitlines()
    assert lines[0] == "FROM ./run-q8_0.gguf"
    assert 'PARAMETER stop "<|im_end|>"' in lines and 'PARAMETER stop "<|im_start|>"' in lines
    assert lines[-1] == 'SYSTEM """You are terse."""'
    assert not any(line.startswith("ADAPTER") for line in lines)
    template = text.split('TEMPLATE """', 1)[1].split('"""', 1)[0]
    assert template == go_template(chat_shape(demo_tokenizer))


def test_the_llama3_shape_is_learned_around_its_special_tokens(demo_tokenizer):
    tokenizer = _tokenizers(demo_tokenizer)["llama-3 style"]
    shape = chat_shape(tokenizer)
    assert shape.start == "<|begin_of_text|>" and shape.default_system == ""
    assert shape.user_prefix == "<|start_header_id|>user<|end_header_id|>\n\n" and shape.user_suffix == "<|eot_id|>"
    assert shape.generation == "<|start_header_id|>assistant<|end_header_id|>\n\n"
    text, _ = build_modelfile(tokenizer, "x.gguf")
    assert 'PARAMETER stop "<|eot_id|>"' in text and "SYSTEM" not in text


def test_a_default_system_prompt_stands_when_the_chat_has_none(demo_tokenizer):
    shape = chat_shape(_tokenizers(demo_tokenizer)["default system prompt"])
    assert shape.default_system == "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    assert "{{ else }}" in go_template(shape)


def test_a_template_of_another_shape_is_refused_and_the_modelfile_leaves_the_template_to_ollama(demo_tokenizer):
    folded = _with_template(
        demo_tokenizer, FOLDED_SYSTEM_TEMPLATE, ["<bos>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "<end_of_turn>"
    )
    with pytest.raises(TemplateMismatch, match="folds the system message into the first user turn"):
        chat_shape(folded)
    text, note = build_modelfile(folded, "x.gguf", system="Be kind.")
    assert note.startswith("the chat template folds the system message into the first user turn")
    assert 'TEMPLATE """' not in text and f"# TEMPLATE: {note}." in text
    assert 'PARAMETER stop "<end_of_turn>"' in text and 'SYSTEM """Be kind."""' in text
    no_template = _with_template(demo_tokenizer, "")
    no_template.chat_template = None
    assert build_modelfile(no_template, "x.gguf")[1].startswith("the tokenizer has no chat template")


def test_the_go_renderer_follows_go_trim_markers_and_branches():
    template = "{{- if .A }}a{{ else if .B }}b{{ else }}c{{ end }} \n  {{- range $i, $_ := .L }}"
    template += "[{{ $i }}{{ .X }}]{{ end }}"
    assert render(template, {"A": "", "B": "y", "L": [{"X": "p"}, {"X": "q"}]}) == "b[0p][1q]"
    assert render("{{ `x\n` -}}\n  y", {}) == "x\ny"
    with pytest.raises(ValueError):
        render("{{ printf `%s` .A }}", {"A": 1})
