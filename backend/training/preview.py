"""Dataset preview: the first rows rendered exactly as TRL will tokenize them, with token counts against max_length."""

from __future__ import annotations

from dataclasses import dataclass

from backend.core.spec import JobSpec
from backend.data.loading import JobData
from backend.methods.rendering import PreviewRow, Renderer, require_chat_template
from backend.methods.table import support


@dataclass(frozen=True)
class PreviewSummary:
    """Token lengths of the previewed rows: the longest, the mean, and how many exceed max_length."""

    max_tokens: int
    mean_tokens: float
    over_max_length: int  # previewed rows with a sequence longer than max_length
    max_length: int


@dataclass(frozen=True)
class DatasetPreview:
    """The first rows of a job's dataset as the trainer will see them, with its format, columns and a summary."""

    format: str
    columns: list[str]
    total_rows: int
    rows: list[PreviewRow]
    summary: PreviewSummary


def preview_dataset(spec: JobSpec, tokenizer, data: JobData, rows: int = 3) -> DatasetPreview:
    """The first ``rows`` examples of the job's ``data`` (its rows as ``load_training_dataset`` loaded them: the
    prepared job's, or the Preview button's) rendered through ``tokenizer`` as training will render them.

    GRPO rows show the prompt only (with the generation prompt); the sampled completions add up to
    ``rollout.max_completion_length`` tokens on top during training.
    """
    dataset, fmt = data
    examples = [dataset[i] for i in range(min(rows, len(dataset)))]
    if examples:
        require_chat_template(examples[0], tokenizer, spec.model.name_or_path)
    method = support(spec.method)
    renderer = Renderer(tokenizer, method.template_kwargs(spec, fmt, tokenizer))
    max_length = spec.training.max_length
    rendered = [method.render(example, renderer, max_length) for example in examples]
    return DatasetPreview(
        format=fmt,
        columns=list(dataset.column_names),
        total_rows=len(dataset),
        rows=rendered,
        summary=summarize(rendered, max_length),
    )


def summarize(rows: list[PreviewRow], max_length: int) -> PreviewSummary:
    """The summary of previewed rows against the job's max_length."""
    lengths = [row.longest for row in rows]
    return PreviewSummary(
        max_tokens=max(lengths, default=0),
        mean_tokens=sum(lengths) / len(lengths) if lengths else 0.0,
        over_max_length=sum(row.over_max_length for row in rows),
        max_length=max_length,
    )
