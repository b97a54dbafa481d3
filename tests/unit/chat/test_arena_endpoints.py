"""Play and Play N: one handler behind the two endpoints scripts call, ``/arena_play`` and ``/arena_play_n``, each with
its inputs as before (Play's has no episodes: one each side), the user and the source reaching the handler through
Gradio's own call (``Blocks.process_api``)."""

from __future__ import annotations

import asyncio

import gradio as gr
import pytest
from gradio.state_holder import SessionState

from backend.api import StudioAPI, local_user

PLAY = ["job_choice", "base", "sampling_mode", "first_row", "first_message"]


def test_play_and_play_n_are_one_handler_behind_their_two_endpoints(paths, monkeypatch):
    from app import build_app

    api = StudioAPI(paths.root, scheduler="none")
    try:
        demo = build_app(api)
        named = demo.get_api_info()["named_endpoints"]
        assert [p["parameter_name"] for p in named["/arena_play"]["parameters"]] == [*PLAY, "source"]
        assert [p["parameter_name"] for p in named["/arena_play_n"]["parameters"]] == [*PLAY, "episodes", "source"]
        asked = []

        def play(job_id, user, **settings):
            asked.append((job_id, user, settings))
            raise ValueError("played")  # said as gr.Error

        monkeypatch.setattr(api.arena, "play", play)
        fns = {f.api_name: f for f in demo.fns.values()}
        assert fns["arena_play"].fn.__name__ == fns["arena_play_n"].fn.__name__ == "play"
        calls = {
            "arena_play": ["j1 · grpo · x", "base", "greedy", 2, "hi", "test"],
            "arena_play_n": ["j1", "base", "greedy", 0, "hi", 3, "rows"],
        }
        for api_name, inputs in calls.items():
            with pytest.raises(gr.Error, match="played"):
                asyncio.run(demo.process_api(fns[api_name], inputs, state=SessionState(demo)))
        settings = {"base": "base", "sampling": "greedy"}
        assert asked == [
            ("j1", local_user(), {**settings, "episodes": 1, "row": 2, "first_message": "hi", "split": "test"}),
            ("j1", local_user(), {**settings, "episodes": 3, "row": 0, "first_message": None, "split": None}),
        ]
    finally:
        api.close()
