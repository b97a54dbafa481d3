"""The Chat tab's behaviour: module-level handlers of ``(api, <what Gradio passes>)``, wired in ``wire``.

A finished job's base model (left) and tuned model (right) answer the same message side by side, streamed at the
same time with the same system prompt, sampling settings and seed; picking the better side saves a DPO preference
row, a 👍/👎 on either answer a KTO row, and either kind exports as a dataset file. For a job that played an
environment, "Run tool calls" runs the answers' calls there and shows the tool's answers as the next turn.
"""

from __future__ import annotations

import json

import gradio as gr

from backend.api import JobNotFound, SpecError, StudioAPI, gpu_task
from components.chat import views
from components.chat.layout import EXPORT_IDS, ChatLayout
from components.chat.views import SIDES
from components.job_pickers import finished_job_choices, job_choice_id
from components.session import as_user
from components.wiring import bind

EXPORT_FORMATS = {"dpo": "export_preferences", "kto": "export_thumbs"}  # format -> the API name of its file event


def jobs(api: StudioAPI, user) -> list[str]:
    """Finished jobs the user can chat with, as ``<id> · <method> · <name>``."""
    return finished_job_choices(api, user, generates=True)


def refresh_choices(api: StudioAPI, user):
    """The job picker's choices: the user's finished jobs."""
    return gr.update(choices=finished_job_choices(api, user, generates=True))


def current_export(api: StudioAPI, user, fmt: str) -> str | None:
    """The path of the user's export of ``fmt`` ("dpo" picks, "kto" thumbs), written anew; None without rows."""
    log = api.chat.preference_log(user) if fmt == "dpo" else api.chat.thumb_log(user)
    if user is None or not log.rows():
        return None
    return str(api.chat.export_preferences(user, fmt))


def on_load(api: StudioAPI, user):
    """An empty tab says what to do; a returning user's export is ready for one click."""
    has_jobs = len(finished_job_choices(api, user, generates=True)) > 1
    hint = views.PICK_JOB_HINT if has_jobs else views.NO_JOBS_HINT
    dpo, kto = current_export(api, user, "dpo"), current_export(api, user, "kto")
    return (
        hint,
        gr.update(value=dpo, interactive=dpo is not None),
        gr.update(value=kto, interactive=kto is not None),
    )


def on_job(api: StudioAPI, user, job_choice):
    """The picked job's header: its models, verdict and evaluation."""
    return views.job_info_markdown(api, job_choice, user) if user is not None else views.PICK_JOB_HINT


def job_gates(h: ChatLayout, job_choice):
    """The buttons that act on a picked job's chat: on with a pick, off without."""
    return [gr.update(interactive=bool(job_choice_id(job_choice)))] * len(h.need_a_job)


def on_job_tools(api: StudioAPI, user, job_choice):
    """Another job: the user's tool-call environment closes; the tools row shows for a job with an environment."""
    if user is None:
        return gr.update(visible=False), ""
    api.chat.close_chat_tools(user)
    job_id, environment = job_choice_id(job_choice), None
    if job_id:
        try:
            environment = api.chat.chat_environment(job_id, user)
        except JobNotFound:
            pass
    return gr.update(visible=environment is not None), views.tools_hint(environment)


def stream(
    api: StudioAPI,
    user,
    job_choice,
    text,
    base_hist,
    tuned_hist,
    system_prompt,
    temp,
    max_new,
    seed_value,
    sides_kept,
    chat_mode="compare",
):
    """Both sides' answers to ``text``, streamed: (base chat, tuned chat, the emptied message box, kept histories)."""
    job_id = job_choice_id(job_choice)
    if not job_id:
        raise gr.Error("Pick a finished job first.")
    if not (text or "").strip():
        raise gr.Error("Type a message.")
    chat_mode = chat_mode or "compare"
    shown = {"base": list(base_hist or []), "tuned": list(tuned_hist or [])}
    sides_kept = sides_kept or {}
    if chat_mode == "compare":  # one question on its own: the chat shows it alone, as the models see it
        shown, sides_kept = {side: [] for side in SIDES}, {}
    try:
        updates = api.chat.chat_turn(
            job_id,
            *(views.model_history(shown[side], sides_kept.get(side)) for side in SIDES),
            text,
            views.generation_settings(system_prompt, temp, max_new, seed_value),
            user,
            mode=chat_mode,
        )
    except JobNotFound:
        raise gr.Error("That job is not yours or no longer exists.") from None
    except ValueError as exc:
        raise gr.Error(str(exc)) from None
    asked = {"role": "user", "content": text}
    for update in updates:
        if update.answers is None:
            said = [[*shown[side], asked, {"role": "assistant", "content": getattr(update, side)}] for side in SIDES]
            yield (*said, "", sides_kept)
            continue
        # The final answers: tool calls as blocks on display, the answers as they streamed kept beside.
        answers = dict(zip(SIDES, update.answers))
        yield (
            *([*shown[side], asked, *views.answer_messages(answers[side])] for side in SIDES),
            "",
            {
                side: [*views.kept_or_shown(shown[side], sides_kept.get(side)), asked, views.kept_answer(answers[side])]
                for side in SIDES
            },
        )


def regenerate_turn(
    answer,
    user,
    job_choice,
    base_hist,
    tuned_hist,
    system_prompt,
    temp,
    max_new,
    seed_value,
    sides_kept,
    chat_mode="compare",
):
    """The last exchange asked again (by ``answer``, the bound ``stream``), with a new seed (so a sampled answer
    changes; greedy ones stay the same)."""
    text = views.last_user_message(base_hist)
    if text is None:
        raise gr.Error("Nothing to regenerate yet.")
    shown, sides_kept = {"base": base_hist, "tuned": tuned_hist}, sides_kept or {}
    kept_prev = {
        side: views.before_last_question(views.kept_or_shown(shown[side], sides_kept.get(side))) for side in SIDES
    }
    yield from answer(
        user,
        job_choice,
        text,
        views.before_last_question(base_hist),
        views.before_last_question(tuned_hist),
        system_prompt,
        temp,
        max_new,
        int(seed_value or 0) + 1,
        kept_prev,
        chat_mode,
    )


def judges_off(h: ChatLayout):
    """The judging buttons off while an answer streams."""
    return [gr.update(interactive=False)] * len(h.judges)


def judges_back(h: ChatLayout, job_choice):
    """The judging buttons on again once an answer ended (the "better" ones only with a job picked: a message sent
    without one ends in an error)."""
    picked = bool(job_choice_id(job_choice))
    return [gr.update(interactive=picked or button not in h.need_a_job) for button in h.judges]


def clear_chat(api: StudioAPI, user):
    """An empty chat; the user's tool-call environment closes with it."""
    if user is not None:
        api.chat.close_chat_tools(user)
    return [], [], "", {side: [] for side in SIDES}


def run_tool_calls(api: StudioAPI, user, job_choice, which, base_hist, tuned_hist, sides_kept):
    """Run the last answer's tool calls of one side (or both) in the job's environment; the tool's answers show as
    the next turn of that side."""
    job_id = job_choice_id(job_choice)
    if not job_id:
        raise gr.Error("Pick a finished job first.")
    shown = {"base": list(base_hist or []), "tuned": list(tuned_hist or [])}
    sides_kept = sides_kept or {}
    now = {side: views.kept_or_shown(shown[side], sides_kept.get(side)) for side in SIDES}
    notes, problems = [], []
    for side in SIDES if which not in SIDES else (which,):
        calls = views.pending_calls(shown[side], sides_kept.get(side))
        if not calls:
            continue
        try:
            run = api.chat.run_tool_calls(job_id, calls, side=side, user=user)
        except JobNotFound:
            raise gr.Error("That job is not yours or no longer exists.") from None
        except ValueError as exc:
            problems.append(f"The {side} side's calls did not run: {exc}")
            continue
        shown[side] += views.tool_results_shown(run)
        now[side] += views.tool_results_kept(run)
        notes.append(views.run_note(run))
    if not notes and problems:
        raise gr.Error(" ".join(problems))
    if not notes:
        whose = "either side's" if which not in SIDES else f"the {which} side's"
        return gr.update(), gr.update(), gr.update(), f"No tool calls to run: {whose} last answer made none."
    return shown["base"], shown["tuned"], now, " ".join(notes + problems)


def record_preference(api: StudioAPI, side: str, user, job_choice, base_hist, tuned_hist, system_prompt, sides_kept):
    """``side``'s answer is the better one: a DPO row for this turn (a second pick replaces the first)."""
    log = api.chat.preference_log(user)
    sides_kept = sides_kept or {}
    try:
        row = log.record_turn(
            views.judged_history(base_hist, sides_kept.get("base")),
            views.judged_history(tuned_hist, sides_kept.get("tuned")),
            system_prompt or "",
            side,
            job_choice_id(job_choice),
        )
    except ValueError as exc:
        raise gr.Error(str(exc)) from None
    done = "Changed your pick for this turn" if row["replaced"] else "Saved"
    text = f"{done}: the {side} answer is better ({views.rows_text(len(log.rows()))} so far; one per turn)."
    return text, gr.update(value=current_export(api, user, "dpo"), interactive=True)


def record_thumb(
    api: StudioAPI, side: str, label: bool, user, job_choice, base_hist, tuned_hist, system_prompt, sides_kept
):
    """A 👍/👎 on one side's last answer, kept as a KTO row; with no answer yet the note says so instead."""
    log = api.chat.thumb_log(user)
    try:
        row = log.record_turn(
            views.judged_history(base_hist if side == "base" else tuned_hist, (sides_kept or {}).get(side)),
            system_prompt or "",
            label,
            side,
            job_choice_id(job_choice),
        )
    except ValueError as exc:
        return f"Nothing recorded: {exc}.", gr.update()
    return views.thumb_note(row, log.rows()), gr.update(value=current_export(api, user, "kto"), interactive=True)


def export_ready(api: StudioAPI, fmt: str, user):
    """An export button is on when it holds a file: when the user has rows of its kind."""
    log = api.chat.preference_log(user) if fmt == "dpo" else api.chat.thumb_log(user)
    return gr.update(interactive=user is not None and bool(log.rows()))


def export_now(api: StudioAPI, fmt: str, user):
    """The user's picks (DPO) or thumbs (KTO) as a .jsonl (for scripts; the buttons download the files kept
    ready)."""
    try:
        return str(api.chat.export_preferences(user, fmt))
    except ValueError as exc:
        raise gr.Error(str(exc)) from None


def reward_jobs(api: StudioAPI, user):
    """The reward jobs the user can score answers with (finished, a score head)."""
    return gr.update(choices=finished_job_choices(api, user, generates=False))


def score_answers(api: StudioAPI, user, reward_choice, base_hist, tuned_hist, kept) -> str:
    """The picked reward job's scores of each side's last answer, or the sentence that says why not."""
    job_id = job_choice_id(reward_choice)
    if not job_id:
        return "Pick a finished reward job to score the answers with."
    kept = kept or {}
    conversations = [
        views.judged_history(hist or [], kept.get(side)) for side, hist in zip(SIDES, (base_hist, tuned_hist))
    ]
    try:
        return views.scores_markdown(job_id, api.chat.score_answers(job_id, conversations, user))
    except JobNotFound:
        return f"Job {job_id} is not among your jobs."
    except SpecError as exc:
        said = str(exc)
        return said[:1].upper() + said[1:] + ("" if said.endswith(".") else ".")


def on_mode(h: ChatLayout, mode):
    """The mode's note, and the temperature and seed on only where the mode samples with them."""
    sampled = gr.update(interactive=views.samples(mode))
    return {h.mode_info: views.mode_note(mode), h.temperature: sampled, h.seed: sampled}


def wire(api: StudioAPI, h: ChatLayout) -> None:
    """Every event of the Chat tab."""
    h.mode.change(bind(on_mode, h), h.mode, [h.mode_info, h.temperature, h.seed], api_name=False, queue=False)
    gr.api(as_user(bind(jobs, api), signed_in=False), api_name="chat_jobs")
    refresh = as_user(bind(refresh_choices, api), signed_in=False)
    h.refresh.click(refresh, None, h.job, api_name=False)
    h.job.focus(refresh, None, h.job, api_name=False)
    exports = list(h.exports.values())
    gr.on(None, as_user(bind(on_load, api), signed_in=False), None, [h.job_info, *exports], api_name=False)
    h.job.change(as_user(bind(on_job, api), signed_in=False), h.job, h.job_info, api_name=False)
    h.job.change(bind(job_gates, h), h.job, h.need_a_job, api_name=False, queue=False)
    h.job.change(as_user(bind(on_job_tools, api), signed_in=False), h.job, [h.tools_row, h.tools_info], api_name=False)
    settings = [h.system, h.temperature, h.max_tokens, h.seed, h.kept, h.mode]
    inputs = [h.job, h.message, *h.histories, *settings]
    # Wrapped last: on ZeroGPU the chat borrows a GPU per message (the facade stays in this process).
    answer = gpu_task(duration=120)(as_user(bind(stream, api)))
    _answering(h, h.send.click, answer, inputs, "chat_send")
    _answering(h, h.message.submit, answer, inputs, False)
    again = as_user(bind(regenerate_turn, gpu_task(duration=120)(bind(stream, api))))
    _answering(h, h.regenerate.click, again, [h.job, *h.histories, *settings], "chat_regenerate")
    scorers = as_user(bind(reward_jobs, api), signed_in=False)
    h.score_job.focus(scorers, None, h.score_job, api_name=False)
    h.refresh.click(scorers, None, h.score_job, api_name=False)
    h.score_button.click(
        as_user(bind(score_answers, api)),
        [h.score_job, *h.histories, h.kept],
        h.scores,
        api_name="chat_score",
    )
    clear = as_user(bind(clear_chat, api), signed_in=False)
    h.clear.click(clear, None, [*h.histories, h.note, h.kept], api_name="chat_clear")
    h.run_tools.click(
        as_user(bind(run_tool_calls, api)),
        [h.job, h.tool_side, *h.histories, h.kept],
        [*h.histories, h.kept, h.note],
        api_name="chat_run_tools",
    )
    judged = [h.job, *h.histories, h.system, h.kept]
    for side in SIDES:
        preferred = as_user(bind(record_preference, api, side))
        _arm(api, h, h.better[side].click, preferred, judged, "dpo", f"prefer_{side}")
    for side in SIDES:
        for label, button in ((True, h.ups[side]), (False, h.downs[side])):
            name = f"thumb_{side}_{'up' if label else 'down'}"
            _arm(api, h, button.click, as_user(bind(record_thumb, api, side, label)), judged, "kto", name)
    # For gradio_client: events whose output is a file, so the client downloads it (the buttons need no event).
    for fmt, api_name in EXPORT_FORMATS.items():
        api_export, api_file = gr.Button(visible=False), gr.File(visible=False)
        api_export.click(as_user(bind(export_now, api, fmt)), None, api_file, api_name=api_name)


def _answering(h: ChatLayout, trigger, handler, handler_inputs, api_name) -> None:
    """``trigger`` runs ``handler`` (a streaming answer) with the judging buttons off until it ends, however."""
    trigger(bind(judges_off, h), None, h.judges, api_name=False, queue=False).then(
        handler, handler_inputs, [*h.histories, h.message, h.kept], api_name=api_name
    ).then(bind(judges_back, h), h.job, h.judges, api_name=False, queue=False)


def _arm(api: StudioAPI, h: ChatLayout, trigger, handler, inputs, fmt: str, api_name: str) -> None:
    """A pick or a thumb writes the export anew. From the click (in the browser, at once) until the new file is on
    the button, whether the pick was saved or refused, a click on the button is held and then replayed
    (EXPORT_HOLD_JS): it once downloaded the file as it was before the pick (issue 24), then, with the button
    switched off meanwhile, nothing at all (issue 37)."""
    held = json.dumps(EXPORT_IDS[fmt])
    button = h.exports[fmt]
    ready = as_user(bind(export_ready, api, fmt), signed_in=False)
    trigger(None, None, None, js=f"() => window.studioExportSaving({held})").then(
        handler, inputs, [h.note, button], api_name=api_name
    ).then(ready, None, button, api_name=False, queue=False).then(
        None, None, None, js=f"() => window.studioExportSaved({held})"
    )
