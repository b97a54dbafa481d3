"""While one user's request reads a dataset in the app's process, every other thread still reads the Space's settings.

The settings that guard a Space are read from os.environ when they are used: ``SPACE_ID`` (``on_space``), the
owner's ``STUDIO_ENVIRONMENT_HOSTS``, the token. datasets wrapped each of its downloads (a local file's too) in
``unittest.mock.patch.dict(os.environ)``, whose exit deletes every key and puts them back: for that instant another
user's chat tool run read no allow-list and was refused its environment (the hostile-environments test, in CI), and
could as well have read no ``SPACE_ID`` and been let through to a private address. Nothing the facade does may take a
key away from os.environ, even for an instant.
"""

from __future__ import annotations

import json
import os

import pytest

GUARDS = ("SPACE_ID", "STUDIO_ENVIRONMENT_HOSTS")


@pytest.fixture
def taken_away(monkeypatch) -> list[str]:
    """The keys anything deletes from os.environ while the test runs (each deletion, even one put back at once)."""
    for name in GUARDS:
        monkeypatch.setenv(name, os.environ.get(name) or "kept")
    taken: list[str] = []
    environ_type = type(os.environ)
    delete = environ_type.__delitem__

    def spy(self, key):
        if self is os.environ:
            taken.append(key)
        delete(self, key)

    monkeypatch.setattr(environ_type, "__delitem__", spy)
    return taken


def spec(method: str, dataset: dict) -> dict:
    return {"method": method, "model": {"name_or_path": "builtin:tiny-qwen3-arith"}, "dataset": dataset}


def test_submitting_checking_and_previewing_never_takes_a_setting_away(api, paths, tmp_path, taken_away):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"{i} + 1 =", "completion": f" {i + 1}"}) + "\n" for i in range(8)))
    builtin = spec("sft", {"source": "builtin", "name": "arith-sft"})
    api.jobs.submit(builtin)  # pre-flight reads the rows in the app's process
    api.jobs.check(spec("dpo", {"source": "builtin", "name": "arith-preferences"}))
    api.datasets.preview(spec("sft", {"source": "file", "name": str(rows)}))
    assert api.jobs.list_jobs(), "the submit was queued"
    assert taken_away == [], f"os.environ lost {sorted(set(taken_away))} for an instant: other threads read nothing"
