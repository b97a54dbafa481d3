"""Deep links: ``?job=<id>`` opens the Jobs tab on that job, and the address bar follows the tab and the job shown,
so a reload (or a shared link) lands where the user was.

The page's query string is read once per page load on the server (``gr.Request``); the address bar is kept up to date
in the browser only (``history.replaceState``: no reload, no server round trip).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Gradio is imported only where the links are wired: the parsing and job_link stay Gradio-free
    import gradio as gr

TABS = ("train", "jobs", "chat")
_JOB_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def landing(params: dict[str, str]) -> tuple[str, str | None]:
    """(the tab to open, the job to show) for a page's query parameters; anything malformed is ignored.

    >>> landing({"job": "20261201-abc"})
    ('jobs', '20261201-abc')
    >>> landing({"tab": "chat"}), landing({"tab": "nope", "job": "../x"}), landing({})
    (('chat', None), ('train', None), ('train', None))
    """
    job = params.get("job") or None
    if job is not None and not _JOB_ID.match(job):
        job = None
    tab = params.get("tab")
    if tab not in TABS:
        tab = "jobs" if job else "train"
    return tab, job


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


def install(demo: gr.Blocks, tabs: gr.Tabs, tab_handles: dict[str, gr.Tab], picker: gr.Dropdown) -> None:
    """Wire the deep links into the assembled app: on load, open the linked tab and job; then follow both."""
    import gradio as gr

    def on_load(request: gr.Request):
        tab, job = landing(dict(request.query_params) if request is not None else {})
        return gr.Tabs(selected=tab), (job if job else gr.update())

    # Gradio fires the first tab's select event as the page mounts, before the load below has read the link: the
    # address bar is only written once the landing is done (window.studioLinksReady), and then gets its tab too, so
    # that a job chosen later by the Jobs tab's timer does not turn a reload of the Train tab into one of the Jobs tab.
    demo.load(on_load, None, [tabs, picker], api_name=False, show_progress="hidden").then(
        None, None, None, js=f"""() => {{
            const params = new URL(window.location.href).searchParams;
            if (!{list(TABS)!r}.includes(params.get("tab"))) {{
                const linked = /{_JOB_ID.pattern}/.test(params.get("job") || "");
                ({_SET_PARAM})("tab", linked ? "jobs" : "train");
            }}
            window.studioLinksReady = true;
        }}""")
    for name, tab in tab_handles.items():
        tab.select(None, None, None, js=f"() => {{ if (window.studioLinksReady) ({_SET_PARAM})('tab', {name!r}); }}")
    job_of_choice = "(choice || '').split(' · ')[0].trim()"  # a picker choice reads "<id> · <method> · …"
    picker.change(None, picker, None,
                  js=f"(choice) => {{ if (window.studioLinksReady) ({_SET_PARAM})('job', {job_of_choice}); }}")
