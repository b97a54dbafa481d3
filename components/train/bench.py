"""The reward test bench in the Train tab: typed completions scored with the editor's rewards, against a typed
dataset row or the picked dataset's first row."""

from __future__ import annotations

from backend.api import SpecError, StudioAPI, generates, methods
from components.session import as_user
from components.train import views
from components.train.fields import FormError, parse_rewards
from components.train.form import bench_table, form_to_spec
from components.train.layout import TrainLayout
from components.wiring import bind

# What the reward bench reads its first row with: the dataset fields, and the (online) method the rewards are for.
ONLINE_METHOD = next(m for m in methods() if generates(m))  # the bench's method when the caller gives none
BENCH_DATASET = ("dataset_source", "builtin_dataset", "hub_dataset", "hub_split", "upload_id", "column_map", "method")


def on_bench(
    api: StudioAPI,
    ui: TrainLayout,
    user,
    rewards_yaml,
    completions,
    row_json,
    dataset_source=None,
    builtin_dataset=None,
    hub_dataset=None,
    hub_split=None,
    upload_id=None,
    column_map=None,
    method=None,
):
    """Scores per reward as a table, and a sentence: which row was scored against, or what to fix (shown next to the
    bench; an exception would leave only a bare "Error" in the table's frame). The dataset fields are optional for
    scripts (gradio_client treats a None default as optional): the form's defaults then."""
    dataset_args = (
        dataset_source or "builtin",
        builtin_dataset or "math-demo",
        hub_dataset or "",
        hub_split or "train",
        upload_id or "",
        column_map or "",
        method if method and generates(method) else ONLINE_METHOD,  # the rewards score an online method's rows
    )
    empty = {"headers": ["completion", "total", "notes"], "data": []}
    lines = [c for c in (completions or "").splitlines() if c.strip()]
    if not lines:
        return {ui.bench_out: empty, ui.bench_note: "⚠️ Type at least one completion, one per line."}
    try:
        rewards = parse_rewards(rewards_yaml)
        row, where = views.bench_row(row_json), "the row typed above"
        if row is not None and not isinstance(row, dict):
            raise FormError("method", 'the dataset row must be a JSON object, e.g. {"solution": "$4$"}')
        if row is None and dataset_args:  # the picked dataset's first row, as the trainer would see it
            row, where = bench_first_row(api, user, dict(zip(BENCH_DATASET, dataset_args)))
        scored = api.datasets.score_rewards(rewards, lines, row, user=user)
    except (FormError, ValueError, SpecError) as exc:
        return {ui.bench_out: empty, ui.bench_note: "⚠️ " + str(exc)[:500]}
    return {ui.bench_out: bench_table(scored), ui.bench_note: f"Scored against {where}."}


def bench_first_row(api: StudioAPI, user, dataset_values) -> tuple[dict | None, str]:
    """The picked dataset's first row for the bench, and where it came from (None without a readable dataset)."""
    try:  # batch size "auto": any group size divides it, and only the dataset matters here
        row = api.datasets.first_row(form_to_spec({**dataset_values, "batch_size": None}), user=user)
    except Exception:  # noqa: BLE001 - no readable dataset (offline Hub, no upload): score without a row
        return None, "no dataset row (type one above for rewards that read a column)"
    return row, views.first_row_note(row)


def wire(api: StudioAPI, ui: TrainLayout) -> None:
    """The reward test bench: score typed completions with the editor's rewards, against a dataset row."""
    inputs = ui.inputs
    ui.bench_button.click(
        as_user(bind(on_bench, api, ui)),
        [inputs["rollout_rewards"], ui.bench_completions, ui.bench_row, *(inputs[name] for name in BENCH_DATASET)],
        [ui.bench_out, ui.bench_note],
        api_name="score_rewards",
    )
