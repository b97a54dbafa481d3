"""The README.md of a GGUF export (a folder, or a Hub repo of GGUF files): the type and size, how to run it with
llama.cpp, LM Studio and Ollama (the Modelfile beside it), and the quant check against the merged model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from backend.core.artifacts import GgufExport, QuantCheck
from backend.core.learning import change_text, shown
from backend.hub.model_card import whole_model_card_data
from backend.hub.verdict_card import learning_lines

if TYPE_CHECKING:
    from huggingface_hub import ModelCard

    from backend.jobs.records import JobRecord

# What each type is, in one phrase for the card.
TYPE_NOTES = {
    "f16": "16-bit floats: the merged weights as they are, about 2 bytes per weight",
    "q8_0": "8-bit blocks of 32 weights with one 16-bit scale each: about 8.5 bits per weight, close to lossless",
}


def _size(count: int) -> str:
    """A file size as people read it.

    >>> _size(182528), _size(3 * 2**30)
    ('178.2 KiB', '3.00 GiB')
    """
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.2f} {unit}" if unit == "GiB" else f"{count / scale:.1f} {unit}"
    return f"{count} B"


def _cell(text: str | None) -> str:
    """Text for one Markdown table cell: one line, pipes escaped, at most 120 characters."""
    flat = " ".join((text or "").split()).replace("|", "\\|")
    return (flat if len(flat) <= 120 else flat[:119] + "…") or " "


def quant_check_lines(check: QuantCheck | None, gguf_type: str) -> list[str]:
    """The card's section on the quant check: its sentence, the table, and a few answers that differ."""
    lines = ["## Checked against the merged model", ""]
    if check is None:
        return lines + ["The export was not checked.", ""]
    if check.error:
        return lines + [f"The check could not run: {check.error}.", ""]
    lines += [
        "The GGUF was loaded back with transformers' GGUF reader and answered the same rows greedily as the merged "
        "model it was converted from.",
        "",
        check.sentence,
        "",
        f"| | merged | GGUF ({gguf_type}) |",
        "| --- | --- | --- |",
    ]
    if check.scored == "accuracy":
        lines.append(
            f"| accuracy on {check.rows} {check.rows_from} rows | {shown(check.merged_accuracy, True)} | "
            f"{shown(check.gguf_accuracy, True)} ({change_text(check.difference, check.ci95, rate=True)}) |"
        )
    lines.append(f"| greedy answers that differ | | {check.differing} of {check.rows} |")
    lines.append("")
    if check.examples:
        lines += ["| prompt | merged | GGUF |", "| --- | --- | --- |"]
        lines += [f"| {_cell(e.prompt)} | {_cell(e.merged)} | {_cell(e.gguf)} |" for e in check.examples]
        lines.append("")
    return lines


def run_lines(file_name: str, repo_id: str | None, gguf_type: str) -> list[str]:
    """How to run the file: llama.cpp's server, LM Studio, Ollama with the Modelfile."""
    name = Path(file_name).stem.lower()
    lines = ["## Run it", "", "With llama.cpp's server (an OpenAI-compatible API on port 8080):", "", "```bash"]
    lines += [f"llama-server -m {file_name}"]
    if repo_id:
        lines += [f"# or straight from the Hub: llama-server -hf {repo_id}:{gguf_type.upper()}"]
    lines += ["```", ""]
    get = f"search for `{repo_id}` in Discover, or run `lms get {repo_id}`; " if repo_id else ""
    lines += [f"In LM Studio: {get}for the file itself, `lms import {file_name}`.", ""]
    lines += [
        "With Ollama, from the folder holding the file and its `Modelfile` (the chat template, stop tokens and system "
        "prompt, translated for Ollama):",
        "",
        "```bash",
        f"ollama create {name} -f Modelfile",
        f"ollama run {name}",
        "```",
        "",
    ]
    return lines


def build_gguf_card(
    job: JobRecord, export: GgufExport, repo_id: str | None = None, base_card_license: str | None = None
) -> ModelCard:
    """The card of a GGUF export of ``job`` (``repo_id``: the Hub repo it is pushed to, else a local folder)."""
    from huggingface_hub import ModelCard

    spec = job.spec
    file_name = Path(export.path).name
    place = repo_id or Path(export.path).stem
    kind = ["gguf", "llama.cpp", "ollama", export.gguf_type]
    data = whole_model_card_data(spec, place, "gguf", kind, "quantized", base_card_license)
    lines = [f"# {place.rstrip('/').split('/')[-1]}", ""]
    lines += [
        f"A GGUF of Post-Training Studio job `{job.id}`: its LoRA adapter ({spec.method.value.upper()} with "
        f"[TRL](https://github.com/huggingface/trl)) merged into `{spec.model.name_or_path}` and converted by "
        "llama.cpp's own `convert_hf_to_gguf.py`.",
        "",
        "| file | type | size |",
        "| --- | --- | --- |",
        f"| `{file_name}` | {export.gguf_type} ({TYPE_NOTES.get(export.gguf_type, export.gguf_type)}) | "
        f"{_size(export.bytes)} |",
        "",
    ]
    lines += learning_lines(job.artifacts)
    lines += quant_check_lines(export.quant_check, export.gguf_type)
    lines += run_lines(file_name, repo_id, export.gguf_type)
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines))
