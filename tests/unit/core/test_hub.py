"""backend/core/hub_names.py: the one place for the Hub endpoint, the offline flag and what a name means."""

from __future__ import annotations

import doctest
import re

import pytest

from backend.core import hub_names as hub
from backend.core.spec import parse_spec
from backend.hub.hf_jobs import remote_problems
from backend.hub.trl_cli import trl_cli_yaml
from backend.jobs.access import hub_name_problem
from tests.helpers import ROOT, tiny_spec

BACKEND = ROOT / "backend"


def test_the_doctests_hold():
    result = doctest.testmod(hub)
    assert result.attempted >= 7 and result.failed == 0


def test_the_endpoint_and_offline_flag_are_read_when_asked(monkeypatch):
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert hub.hub_endpoint() == "https://huggingface.co"
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example.org/")
    assert hub.hub_endpoint() == "https://hub.example.org"
    monkeypatch.setenv("HF_ENDPOINT", "")
    assert hub.hub_endpoint() == hub.DEFAULT_ENDPOINT
    for value, offline in [("1", True), ("TRUE", True), ("on", True), ("0", False), ("", False)]:
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
        assert hub.hub_offline() is offline


def test_the_client_flag_is_what_huggingface_hub_decided_at_import(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    assert hub.hub_offline() and not hub.client_offline()


@pytest.mark.parametrize(
    "name, repo, namespaced",
    [
        ("Qwen/Qwen3-0.6B", True, True),
        ("gpt2", True, False),
        ("my_org/model.v2", True, True),
        ("owner/na--me", False, False),
        ("owner/name.", False, False),
        ("-owner/name", False, False),
        ("a/b/c", False, False),
        ("./folder", False, False),
        ("builtin:tiny-qwen3", False, False),
        ("x" * 97, False, False),
        ("", False, False),
    ],
)
def test_repo_ids_follow_the_hubs_rules(name, repo, namespaced):
    assert hub.is_repo_id(name) is repo
    assert hub.is_namespaced_repo_id(name) is namespaced


def test_a_name_that_exists_here_is_a_local_folder_not_a_hub_id(tmp_path, monkeypatch):
    (tmp_path / "org" / "model").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert hub.is_repo_id("org/model") and hub.is_local_path("org/model")
    assert hub.hub_model_id("org/model") is None
    assert hub.hub_model_id("org/other") == "org/other"


# Names the old copies judged differently: trl_cli and hf_jobs took '--', a trailing '.' or '_' first as Hub ids,
# access and spec did not. Now every site asks backend/core/hub_names.py.
@pytest.mark.parametrize("name", ["owner/na--me", "owner/name.", "_owner/name", "Qwen/Qwen3-0.6B", "gpt2"])
def test_every_site_judges_a_model_name_the_same_way(name):
    is_hub = hub.hub_model_id(name) is not None
    assert is_hub is hub.is_repo_id(name)
    assert (hub_name_problem("model.name_or_path", name, "model", "x") is None) is is_hub
    spec = parse_spec(tiny_spec(model={"name_or_path": name}, output={"push_to_hub": True}))
    remote_local = any(p.startswith("model.name_or_path") for p in remote_problems(spec))
    assert remote_local is not is_hub
    cli = trl_cli_yaml(spec)
    assert (f"model_name_or_path: {name}" in cli) and (("is a local folder" in cli) is not is_hub)


def test_only_hub_py_reads_the_endpoint_and_the_offline_flag():
    reads = re.compile(r"environ(?:\.get\(|\[)\s*[\"']HF_(?:ENDPOINT|HUB_OFFLINE)[\"']|is_offline_mode\(\)")
    offenders = [
        str(path.relative_to(BACKEND))
        for path in BACKEND.rglob("*.py")
        if path.name != "hub_names.py" and reads.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_no_other_module_writes_its_own_repo_id_pattern():
    # The old copies were regexes of owner/name parts; hub.py's HUB_NAME_PART is the only one.
    pattern = re.compile(r"re\.compile\(r?[\"'][^\"']*\[A-Za-z0-9\][^\"']*/")
    offenders = [
        str(path.relative_to(BACKEND))
        for path in BACKEND.rglob("*.py")
        if path.name != "hub.py" and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
