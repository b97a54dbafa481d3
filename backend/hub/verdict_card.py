"""The top of a model card's results: the learning verdict, the table of what it checked (its guards and the drift
from the start), and what the rollout's signal watch and learnability forecast said."""

from __future__ import annotations

from typing import TYPE_CHECKING

from backend.core.learning import change_text, drift_table_row, shown

if TYPE_CHECKING:
    from backend.core.artifacts import JobArtifacts


def learning_lines(artifacts: JobArtifacts) -> list[str]:
    """The top of the card's results: the learning verdict (its word and sentence) and, for a GRPO run that had
    nothing to learn from on its last logged steps or was stopped for it, a sentence saying so."""
    lines: list[str] = []
    learning = artifacts.learning
    if learning is not None:
        lines += [f"**Verdict: {learning.word}.** {learning.sentence}", ""]
        drift = learning.drift if learning.drift is not None and learning.drift.mean is not None else None
        if learning.guards or drift is not None:
            lines += [
                "| what the verdict checked | start | tuned | change (95% interval) | |",
                "| --- | --- | --- | --- | --- |",
            ]
            for check in learning.guards:
                before, after = shown(check.before, check.rate), shown(check.after, check.rate)
                change = change_text(check.delta, check.ci95, check.rate)
                lines.append(f"| {check.label} | {before} | {after} | {change} | {'fell' if check.fell else 'kept'} |")
            if drift is not None:
                lines.append(drift_table_row(drift))
            lines.append("")
    signal = artifacts.signal
    if signal is not None and signal.shown:
        details = [f"none since step {signal.since_step}"] if signal.since_step is not None else []
        if signal.steps_logged:
            details.append(f"a learning signal on {signal.steps_with_signal} of {signal.steps_logged} logged steps")
        text = (
            "> **Training stopped early: no learning signal**"
            if signal.stopped_early
            else "> **No learning signal as training ended**"
        )
        text += f" ({'; '.join(details)})." if details else "."
        if signal.warning:
            text += f" {signal.warning}"
        lines += [text, ""]
    if artifacts.forecast is not None:  # what a few rollouts of the starting model foretold, beside the verdict
        lines += [f"> {artifacts.forecast.sentence()}", ""]
    return lines
