"""The agent arena's behaviour: module-level handlers of ``(api, <what Gradio passes>)``, wired in ``wire``.

For a job trained in an environment, its base and tuned models play the same episode side by side (same row, same
seed), live; Play N plays N seeded episodes per side into a table whose rows open their two transcripts; "played
better" keeps the pair as a DPO row with its tools; ``?job=<id>&episode=<n>`` opens a kept pair again (its owner
only).
"""

from __future__ import annotations

import math
from typing import Any

import gradio as gr

from backend.api import JobNotFound, SpecError, StudioAPI, gpu_task
from components.chat.arena_layout import ARENA_HINT, ArenaLayout
from components.chat.arena_views import pair_note, table_rows, transcript_html
from components.chat.views import SIDES
from components.deep_links import landing, linked_episode
from components.job_pickers import finished_job_choices, job_choice_id
from components.session import as_user
from components.wiring import bind

TUNED_TITLE = "Tuned: this job's adapter"


def on_job(api: StudioAPI, user, job_choice):
    """Show the arena for a job that played an environment: what it plays, the parent's adapter as the left side for a
    staged job, and the episodes its evaluation played (the test split where it did); hide it for any other pick."""
    job_id = job_choice_id(job_choice)
    hidden = (gr.update(visible=False), ARENA_HINT, gr.update(value="base", interactive=False), gr.update(value="rows"))
    if not job_id or user is None:
        return hidden
    try:
        setup = api.arena.setup(job_id, user)
    except (JobNotFound, ValueError):
        return hidden
    where = (
        ""
        if setup.environment_job_id == setup.job_id
        else f" (from job {setup.environment_job_id}, which this job continues)"
    )
    played = f"the {setup.evaluation_split} split's tasks" if setup.evaluation_split else "the rows"
    text = (
        f"**Environment:** `{setup.environment}`{where}. Both sides play {played} and seeds of the job's "
        f"evaluation, with its chat template, tools, token budget ({setup.spec.rollout.max_completion_length} "
        f"tokens) and up to {setup.spec.environment.max_tool_calling_iterations} tool round(s)."
    )
    source = gr.update(value="test" if setup.evaluation_split else "rows")
    return gr.update(visible=True), text, gr.update(interactive=setup.parent_adapter is not None), source


def play(
    api: StudioAPI,
    user,
    job_choice,
    base,
    sampling_mode,
    first_row,
    first_message,
    episodes=1,
    source="rows",
):
    """Both sides play ``episodes`` episodes, streamed: what ``ArenaLayout.played`` shows after each turn; from the
    job's evaluation rows, or (``source`` "test") from the environment's held-out test tasks. One episode per side
    (Play, which leaves ``episodes`` out) takes the first message, if given, in place of the row's prompt; Play N
    plays ``episodes`` seeded episodes per side into the table."""
    job_id = job_choice_id(job_choice)
    if not job_id:
        raise gr.Error("Pick a finished job first.")
    try:
        stream = api.arena.play(
            job_id,
            user,
            episodes=_whole(episodes, "Episodes per side"),
            row=_whole(first_row, "Row"),
            base=base or "base",
            sampling=sampling_mode or "greedy",
            first_message=first_message if episodes == 1 else None,
            split="test" if source == "test" else None,
        )
        for state in stream:
            played = [pair.to_dict() for pair in state.pairs]
            first_pair = played[0] if played else None
            note = state.summary() + (f"\n\n{state.note}" if state.note else "")
            if state.over:
                note += f"\n\nLeft: {state.base_label}. Sampling: {state.sampling}."
            titles = {"base": f"Base: {state.base_label}", "tuned": TUNED_TITLE}
            yield (
                note,
                *(transcript_html(first_pair[side] if first_pair else None, titles[side]) for side in SIDES),
                table_rows(played),
                played,
                pair_note(first_pair, job_id) if first_pair and state.over else "",
                first_pair.get("episode") if first_pair and state.over else None,
            )
    except JobNotFound:
        raise gr.Error("That job is not yours or no longer exists.") from None
    except (SpecError, ValueError) as exc:
        raise gr.Error(str(exc)) from None


def open_row(played, job_choice, event: gr.SelectData):
    """A click on a table row opens its pair's two transcripts."""
    index = event.index[0] if isinstance(event.index, (list, tuple)) else event.index
    if not played or not isinstance(index, int) or not 0 <= index < len(played):
        return gr.update(), gr.update(), gr.update(), gr.update()
    pair = played[index]
    return (
        transcript_html(pair["base"], "Base"),
        transcript_html(pair["tuned"], TUNED_TITLE),
        pair_note(pair, job_choice_id(job_choice) or ""),
        pair.get("episode"),
    )


def record(api: StudioAPI, side: str, user, job_choice, episode):
    """Keep the shown pair as a DPO row: the side that played better is chosen, with both whole episodes."""
    job_id = job_choice_id(job_choice)
    if not job_id or not episode:
        return (
            "Play an episode first (or open one from the table); then say which side played better.",
            gr.update(),
        )
    try:
        row = api.arena.prefer(job_id, int(episode), side, user)
        path = api.chat.export_preferences(user, "episodes")
    except JobNotFound:
        raise gr.Error("That job is not yours or no longer exists.") from None
    except ValueError as exc:
        return f"Nothing recorded: {exc}.", gr.update()
    done = "Changed your pick for" if row.get("replaced") else "Saved"
    said = f"{done} episode {episode}: the {side} side played better (a DPO row with both episodes and tools)."
    return said, gr.update(value=str(path), interactive=True)


def open_link(api: StudioAPI, user, request: gr.Request):
    """``?job=<id>&episode=<n>``: the kept pair, read-only, for its owner; anyone else is told it is not theirs."""
    params = dict(request.query_params) if request is not None else {}
    _, job_id = landing(params)
    episode = linked_episode(params)
    if not job_id or episode is None:
        return [gr.skip()] * 9
    try:
        if user is None:
            raise JobNotFound(job_id)
        pair = api.arena.pair(job_id, episode, user)
    except (JobNotFound, ValueError):
        said = f"Episode {episode} of job {job_id} is not among your arena episodes (it may be someone else's)."
        return [gr.update(visible=True), gr.skip(), said, *[gr.skip()] * 6]
    choices = finished_job_choices(api, user, generates=True)
    choice = next((c for c in choices if job_choice_id(c) == job_id), gr.skip())
    return (
        gr.update(visible=True),
        gr.update(choices=choices, value=choice),
        f"Opened from its link: {pair.get('environment')}; left: {pair.get('base_label')}; "
        f"sampling: {pair.get('sampling')}.",
        transcript_html(pair["base"], f"Base: {pair.get('base_label')}"),
        transcript_html(pair["tuned"], TUNED_TITLE),
        table_rows([pair]),
        [pair],
        pair_note(pair, job_id),
        episode,
    )


def wire(api: StudioAPI, h: ArenaLayout, job: gr.Dropdown) -> None:
    """Every event of the arena; ``job`` is the Chat tab's job picker."""
    job.change(
        as_user(bind(on_job, api), signed_in=False), job, [h.panel, h.info, h.base_choice, h.source], api_name=False
    )
    play_inputs = [job, h.base_choice, h.sampling, h.row, h.first]
    # One handler, two endpoints: Play leaves ``episodes`` out (its default, one), Play N gives it before the source.
    # Wrapped last: on ZeroGPU a play borrows a GPU (the facade stays in this process).
    played = as_user(bind(play, api))
    common = {"outputs": h.played, "inputs_kwargs": {"source": h.source}, "concurrency_limit": None}
    h.play_one.click(
        gpu_task(duration=300)(played),
        play_inputs,
        api_name="arena_play",
        api_description="One episode per side (the first message, if given, replaces the row's prompt).",
        **common,
    )
    h.play_many.click(
        gpu_task(duration=600)(played),
        [*play_inputs, h.count],
        api_name="arena_play_n",
        api_description="``episodes`` seeded episodes per side, into the table.",
        **common,
    )
    h.table.select(open_row, [h.pairs, job], [*h.panes.values(), h.shown, h.current], api_name=False)
    for side in SIDES:
        h.better[side].click(
            as_user(bind(record, api, side)), [job, h.current], [h.judged, h.export], api_name=f"arena_prefer_{side}"
        )
    opened = as_user(bind(open_link, api), signed_in=False)
    gr.on(None, opened, None, [h.panel, job, *h.played], api_name=False)


def _whole(value: Any, label: str) -> int:
    """A whole number from a Number field, or a sentence naming the field."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise gr.Error(f"{label} must be a whole number.") from None
    if not math.isfinite(number) or number != int(number) or number < 0:
        raise gr.Error(f"{label} must be a whole number of 0 or more, not {value}.")
    return int(number)
