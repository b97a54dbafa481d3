"""Post-Training Studio: assembles the header and the tabs and launches the Gradio app; nothing else.

`python app.py` honours GRADIO_SERVER_NAME / GRADIO_SERVER_PORT and the storage settings (STUDIO_DATA_DIR,
STUDIO_LOCAL_DIR, STUDIO_DATA_FS: backend/platform/storage.py).
"""

from __future__ import annotations

import logging
import os
import signal
import sys

# Gradio switches matplotlib to its "agg" backend around every event; named here, matplotlib need not import pyplot
# to find its default first (0.65 CPU s of the app's first event, benchmarks/page_load.py). A server draws no window.
os.environ.setdefault("MPLBACKEND", "agg")

import gradio as gr  # noqa: E402 - after MPLBACKEND

from backend.api import StorageError, StoreError, StudioAPI, hub_status
from components import chat, deep_links, header, jobs, train

JOBS_TAB_ID = "jobs-tab"
# Gradio hides an inactive tab with display: none, which zeroes every plot's size: each plot then draws itself anew
# when hidden and again when shown (Gradio's LinePlot redraws on a size change over 100 px), about a second of the
# browser's time per opening. Skipped from rendering instead, the tab keeps its layout and takes no space.
JOBS_HIDDEN_CSS = f'#{JOBS_TAB_ID}[style*="display: none"] {{ display: flex !important; content-visibility: hidden; }}'
CSS = (
    ".field-error p { color: #b91c1c; margin: 0; }"
    + train.FIELD_MARK_CSS
    + chat.ARENA_CSS
    + jobs.JOBS_CSS
    + chat.EXPORT_CSS
    + JOBS_HIDDEN_CSS
    # In a group, a short field beside a tall one (Loss on completions only beside Packing) left the group's grey
    # background showing under it as an empty block: its column fills the row, in the fields' own colour.
    + ".gr-group .row > .column { align-self: stretch; background: var(--block-background-fill); }"
)
log = logging.getLogger("studio.app")


class StudioBlocks(gr.Blocks):
    """gr.Blocks whose user errors log one line: Gradio prints the traceback of every gr.Error it meets (unless
    raised with print_exception=False), though a gr.Error is a sentence for the user, not a bug. Other exceptions
    (real bugs) keep their traceback."""

    async def process_api(self, block_fn, *args, **kwargs):
        try:
            return await super().process_api(block_fn, *args, **kwargs)
        except gr.Error as exc:
            if exc.print_exception:
                fn = self.fns[block_fn] if isinstance(block_fn, int) else block_fn
                log.warning(
                    "%s refused: %s",
                    getattr(fn, "api_name", None) or getattr(fn, "name", "a handler"),
                    " ".join(str(exc.message).split()),
                )
                exc.print_exception = False
            raise


def build_app(api: StudioAPI) -> gr.Blocks:
    with StudioBlocks(title="Post-Training Studio") as demo:
        top = header.build(api)
        with gr.Tabs():
            with gr.Tab("Train", id="train") as train_page:
                train_handles = train.build(api)
            # Mounted once, then shown and hidden (an inactive tab is unmounted by default: every opening drew the
            # whole tab afresh), and kept laid out while hidden (JOBS_HIDDEN_CSS), so showing it again redraws nothing.
            with gr.Tab("Jobs", id="jobs", elem_id=JOBS_TAB_ID, render_children=True) as jobs_page:
                jobs_handles = jobs.build(api, train_handles)
            with gr.Tab("Chat", id="chat") as chat_page:
                chat.build(api)  # the chat, and the agent arena under it
        # The Jobs tab follows its jobs on a timer only while it is open (it starts the timer itself).
        for page in (train_page, chat_page):
            page.select(jobs.pause, None, jobs_handles.timer, api_visibility="private", queue=False)
        demo.load(top.refresh, None, top.status, api_name="status")
        deep_links.install(demo, {"train": train_page, "jobs": jobs_page, "chat": chat_page}, jobs_handles)
    return demo


def main() -> None:
    try:
        api = StudioAPI(scheduler="thread")
    except (StoreError, StorageError) as exc:  # a damaged store, a bad storage setting: one sentence, no traceback
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    for line in [api.core.storage.describe(), *api.mirror_status.notes]:  # the Space's log says where data lives
        print(line, file=sys.stderr, flush=True)
    hub_status()  # start the Hub check now, so the first page load has an answer
    demo = build_app(api)
    # A Space restarts with SIGTERM: stop serving, then let the API take its last snapshot (network storage).
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        _launch(demo, api)
    finally:
        api.close()


def _exit_on_sigterm(*_) -> None:
    raise SystemExit(0)


# Words Gradio's status tracker announces to screen readers but its English strings lack: without them a screen
# reader said "common.complete" after every answer.
SCREEN_READER_WORDS = gr.I18n(en={"common.complete": "Done"})


# Gradio's queue looks for a new event every 1 ms while it has none, and for progress to send every 10 ms even with
# no event running: 1.17 CPU s in 20 s, 6% of a core, for an app nobody uses (benchmarks/idle_page.py), on a Space
# and beside every job training on its CPU. At 20 ms and 50 ms it takes 0.46 CPU s; an event waits at most 20 ms more
# to start, and a progress bar moves 20 times a second.
QUEUE_POLL_S = 0.02
PROGRESS_POLL_S = 0.05


def _launch(demo: gr.Blocks, api: StudioAPI) -> None:
    demo.queue(default_concurrency_limit=8)
    demo._queue.sleep_when_free = QUEUE_POLL_S  # Gradio 6.31 offers no setting for either
    demo._queue.progress_update_sleep_when_free = PROGRESS_POLL_S
    demo.launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        theme=gr.themes.Soft(),
        css=CSS,
        js=f"() => {{ ({train.FREE_TEXT_JS})(); ({chat.EXPORT_HOLD_JS})(); }}",
        i18n=SCREEN_READER_WORDS,
        # On a Space the data dir is /data/studio, outside the working directory and the temp folder, the only
        # places Gradio serves files from by default: the downloads folder (and only it) must be allowed.
        allowed_paths=[str(api.core.paths.downloads)],
        # Gradio's run history copies every event's inputs and outputs (plots, logs, samples) into the browser's
        # localStorage, up to 100 runs, re-read and re-written whole on each event: writing it took 14 ms of the
        # Jobs tab's third pick and 154 ms of its twenty-first (benchmarks/picks.py). The Jobs tab is the studio's
        # history; and what a user typed stays out of the browser's storage (off also deletes what was saved).
        run_history=False,
    )


if __name__ == "__main__":
    main()
