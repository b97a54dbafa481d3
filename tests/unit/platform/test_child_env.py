"""Secrets stay in the app: a child process (an upload's check, later an environment server) starts with an
allow-listed environment, never the owner's HF_TOKEN or OAuth client secret."""

from __future__ import annotations

import json
import os
from pathlib import Path

from backend.core.users import User
from backend.data import uploads as upload_module
from backend.platform.child_env import child_environment
from tests.unit.api.test_access import CHAT_ROWS, write_jsonl

ANN = User("ann")


def test_the_child_environment_is_an_allow_list(monkeypatch):
    for name, value in {
        "HF_TOKEN": "hf_owner",
        "OAUTH_CLIENT_SECRET": "oauth",
        "AWS_SECRET_ACCESS_KEY": "aws",
        "STUDIO_API_KEY": "k",
        "SOMETHING_ELSE": "x",
        "HF_HUB_OFFLINE": "1",
        "STUDIO_DATA_DIR": "/data/studio",
        "LC_ALL": "C.UTF-8",
    }.items():
        monkeypatch.setenv(name, value)
    env = child_environment({"PYTHONUNBUFFERED": "1"})
    assert not {"HF_TOKEN", "OAUTH_CLIENT_SECRET", "AWS_SECRET_ACCESS_KEY", "STUDIO_API_KEY", "SOMETHING_ELSE"} & set(
        env
    )
    assert env["HF_HUB_OFFLINE"] == "1" and env["STUDIO_DATA_DIR"] == "/data/studio" and env["LC_ALL"] == "C.UTF-8"
    assert env["PATH"] == os.environ["PATH"] and env["PYTHONUNBUFFERED"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(upload_module.__file__).resolve().parents[2])


def test_an_upload_check_process_never_sees_the_owners_secrets(api, tmp_path, monkeypatch):
    """The real check's child records its environment at start (a sitecustomize on its PYTHONPATH) and still reads
    the file with what it is given."""
    hook = tmp_path / "hook"
    hook.mkdir()
    dump = tmp_path / "child-env.json"
    (hook / "sitecustomize.py").write_text(
        "import json, os, sys\n"
        "if 'backend.data.uploads' in sys.orig_argv and os.environ.get('STUDIO_TEST_ENV_DUMP'):\n"
        "    open(os.environ['STUDIO_TEST_ENV_DUMP'], 'w').write(json.dumps(dict(os.environ)))\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(hook))
    monkeypatch.setenv("STUDIO_TEST_ENV_DUMP", str(dump))
    monkeypatch.setenv("HF_TOKEN", "hf_the_space_owners_token")
    monkeypatch.setenv("OAUTH_CLIENT_SECRET", "the-oauth-client-secret")
    upload_id, summary = api.datasets.upload_dataset(
        write_jsonl(tmp_path / "gradio" / "f00d" / "chats.jsonl", CHAT_ROWS), "chats.jsonl", "sft", ANN
    )
    assert "12 rows" in summary
    seen = json.loads(dump.read_text())
    assert "HF_TOKEN" not in seen and "OAUTH_CLIENT_SECRET" not in seen
    assert "hf_the_space_owners_token" not in json.dumps(seen)
    assert seen["STUDIO_TEST_ENV_DUMP"] == str(dump)  # the studio's own settings do reach it
