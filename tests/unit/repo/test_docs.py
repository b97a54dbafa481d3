"""The paperwork stays short and current: a README a newcomer reads in minutes, docs/spec.md as the spec says."""

from __future__ import annotations

import importlib.util
import re

from tests.helpers import ROOT

README = ROOT / "README.md"


def _spec_docs_script():
    spec = importlib.util.spec_from_file_location("build_spec_docs", ROOT / "scripts" / "build_spec_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_stays_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; at most 250 (the rest belongs in docs/)"


def test_the_spec_docs_are_what_the_spec_says():
    script = _spec_docs_script()
    assert script.DOC.read_text(encoding="utf-8") == script.render(), (
        "docs/spec.md is stale: python scripts/build_spec_docs.py"
    )


def test_the_spec_docs_check_fails_when_a_field_changes(monkeypatch, capsys):
    script = _spec_docs_script()
    monkeypatch.setattr("sys.argv", ["build_spec_docs.py", "--check"])
    assert script.main() == 0
    monkeypatch.setattr(script, "spec_fields_markdown", lambda: "| `lora.r` | int | `8` | changed |")
    assert script.main() == 1
    assert "stale" in capsys.readouterr().out


def test_every_local_link_in_the_readme_and_docs_resolves():
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target or target.startswith("mailto:"):
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to missing {target}"


def test_the_docs_point_nowhere_outside_the_repository():
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        assert "../shared" not in page.read_text(encoding="utf-8"), f"{page.relative_to(ROOT)} points outside"
