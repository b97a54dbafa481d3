"""Scoring a finished arithmetic job from the outside: the Chat tab's own path (api.chat.chat_pair, one base model
with the adapter on for one side), greedy, on problems that neither pre-training nor the demo datasets hold. It shares
no code with any method's metric or the held-out evaluation, so it can tell when a verdict was gamed."""

from __future__ import annotations

import json


def chat_tab_scores(data_dir, job_id: str, count: int = 96) -> tuple[dict[str, int], dict[str, int]]:
    """(right answers, readable answers) per side (``base``, ``tuned``) on ``count`` unseen problems."""
    from backend.api import GenerationSettings, StudioAPI
    from backend.data import arith as arith_data
    from backend.data.builtin import BUILTIN_DATASETS

    seen = {json.loads(line)["messages"][-1]["content"] for line in BUILTIN_DATASETS["arith-sft"].path.open()}
    problems = [p for p in arith_data.sample("studio", 800, seed=7) if p.reply not in seen][:count]
    assert len(problems) == count
    api = StudioAPI(data_dir, scheduler="none")
    try:
        right = {"base": 0, "tuned": 0}
        readable = {"base": 0, "tuned": 0}
        greedy = GenerationSettings(temperature=0, max_new_tokens=24)
        for p in problems:
            *_, answers = api.chat.chat_pair(job_id, [], [], p.question, greedy)
            for side, text in zip(("base", "tuned"), answers):
                readable[side] += arith_data.parse_answer(text) is not None
                right[side] += arith_data.parse_answer(text) == p.answer
    finally:
        api.close()
    return right, readable
