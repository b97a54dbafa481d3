"""Deep links: ``?job=<id>`` opens the Jobs tab on that job, and the address bar follows the tab and the job shown,
so a reload (or a shared link) lands where the user was.

The page's query string is read once per page load on the server (``gr.Request``); the address bar is kept up to date
in the browser only (``history.replaceState``: no reload, no server round trip).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # Gradio is imported only where the links are wired: the parsing and job_link stay Gradio-free
    import gradio as gr


class JobsView(Protocol):
    """What the links need of the Jobs tab (``components.jobs.JobsHandles`` has it): its job picker, and the handler
    that draws the picked job with the outputs it fills. A protocol, so this module never imports the Jobs tab."""

    picker: gr.Dropdown
    refresh: Callable[..., Any]
    refreshed: list[Any]
    timer: gr.Timer


TABS = {"train": "Train", "jobs": "Jobs", "chat": "Chat"}  # a tab's name in links, and the label of its button
_JOB_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def landing(params: dict[str, str]) -> tuple[str | None, str | None]:
    """(the tab to open, the job to show) for a page's query parameters; None where the address names none (the
    page is then left as it is: a user may already have clicked a tab). Anything malformed is ignored.

    >>> landing({"job": "20261201-abc"})
    ('jobs', '20261201-abc')
    >>> landing({"tab": "chat"}), landing({"tab": "nope", "job": "../x"}), landing({})
    (('chat', None), (None, None), (None, None))
    >>> landing({"job": "abc", "episode": "3"})  # an arena pair opens in the Chat tab
    ('chat', 'abc')
    """
    job = params.get("job") or None
    if job is not None and not _JOB_ID.match(job):
        job = None
    tab = params.get("tab")
    if tab not in TABS:
        tab = ("chat" if linked_episode(params) else "jobs") if job else None
    return tab, job


def linked_episode(params: dict[str, str]) -> int | None:
    """The arena pair an address names (``episode=<n>``, a whole number from 1), or None.

    >>> linked_episode({"episode": "12"}), linked_episode({"episode": "-1"}), linked_episode({"episode": "x" * 99})
    (12, None, None)
    """
    episode = params.get("episode") or ""
    return int(episode) if re.fullmatch(r"[0-9]{1,9}", episode) and int(episode) > 0 else None


def job_link(job_id: str) -> str:
    """The relative link that opens the Jobs tab on ``job_id`` (for Markdown answers such as Queue's).

    >>> job_link("abc")
    '?job=abc'
    """
    return f"?job={job_id}"


# Write one query parameter into the address bar without reloading (an empty value removes it).
_SET_PARAM = """
(name, value) => {
    const url = new URL(window.location.href);
    if (value) { url.searchParams.set(name, value); } else { url.searchParams.delete(name); }
    window.history.replaceState(null, "", url);
}
"""


def install(demo: gr.Blocks, tab_handles: dict[str, gr.Tab], jobs: JobsView) -> None:
    """Wire the deep links into the assembled app: on load, show the linked job and open the linked tab; then the
    address bar follows the tab and the job picked in the Jobs tab."""
    import gradio as gr

    def on_load(request):
        tab, _job = landing(dict(request.query_params) if request is not None else {})
        return TABS.get(tab or "", "")

    # Gradio hands the request to a parameter annotated gr.Request; this module imports Gradio here only, so the
    # annotation is set as the class itself (a postponed string annotation would not resolve in the module).
    on_load.__annotations__ = {"request": gr.Request}

    # In order, on page load: the linked job goes into the Jobs tab's picker in the browser (before any server
    # round trip, so no refresh can pick the newest job instead), the Jobs tab draws its first view from it, then the
    # linked tab opens. Gradio fires the first tab's select event as the page mounts, before the link is read: until
    # the landing is done (window.studioLinksReady) a tab's select is only remembered, not written to the address
    # bar. The landing then writes the tab it opened, or the one the user picked meanwhile, so that a job chosen
    # later by the Jobs tab's timer does not turn a reload of the Train tab into one of the Jobs tab.
    linked_job = f"""() => {{
        const job = new URL(window.location.href).searchParams.get("job") || "";
        return /{_JOB_ID.pattern}/.test(job) ? job : null;
    }}"""
    # The linked tab is opened by a click on its button, as a user opens it (its select event starts what that tab
    # follows), not by the Tabs as an output: Gradio's page walks every output it ever updated at each later event,
    # and the Tabs' are the whole page (issue 47).
    # (A hidden text box, not a gr.State: a State's value stays on the server, and the page's script needs it.)
    landed_tab = gr.Textbox(visible=False, elem_id="landed-tab")
    demo.load(None, None, jobs.picker, js=linked_job).then(
        jobs.refresh, jobs.picker, jobs.refreshed, api_visibility="private", queue=False, show_progress="hidden"
    ).then(on_load, None, landed_tab, api_visibility="private", queue=False, show_progress="hidden").then(
        None,
        landed_tab,
        None,
        js=f"""(label) => {{
            const button = label && [...document.querySelectorAll('button[role="tab"]')]
                .find((b) => b.textContent.trim() === label);
            if (button && button.getAttribute("aria-selected") !== "true") button.click();
            const params = new URL(window.location.href).searchParams;
            const linked = /{_JOB_ID.pattern}/.test(params.get("job") || "");
            if (!{list(TABS)!r}.includes(params.get("tab"))) {{
                const landed = params.get("episode") ? "chat" : "jobs";
                ({_SET_PARAM})("tab", linked ? landed : (window.studioTab || "train"));
            }}
            window.studioLinksReady = true;
        }}""",
    )
    for name, tab in tab_handles.items():
        tab.select(
            None,
            None,
            None,
            js=f"""() => {{
            window.studioTab = {name!r};
            if (window.studioLinksReady) ({_SET_PARAM})('tab', {name!r});
        }}""",
        )
    job_of_choice = "(choice || '').split(' · ')[0].trim()"  # a picker choice reads "<id> · <method> · …"
    jobs.picker.change(
        None,
        jobs.picker,
        None,
        js=f"(choice) => {{ if (window.studioLinksReady) ({_SET_PARAM})('job', {job_of_choice}); }}",
    )
