"""backend/jobs/lineage.py: what lies on disk for a run to continue from (the rule for the jobs a spec names is
tests/unit/training/test_named_jobs.py's)."""

from __future__ import annotations

import ast

from backend.jobs.lineage import last_checkpoint
from tests.helpers import ROOT


def test_the_facade_does_not_import_the_worker():
    imported = set()
    for path in (ROOT / "backend" / "api").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert "backend.worker" not in imported and "backend.jobs.lineage" in imported


def test_the_last_complete_checkpoint_is_the_one_to_resume(tmp_path):
    assert last_checkpoint(tmp_path) is None
    for step, complete in [(5, True), (10, True), (15, False), (7, True)]:
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if complete:
            (folder / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-x").mkdir()
    assert last_checkpoint(tmp_path) == tmp_path / "checkpoint-10"
