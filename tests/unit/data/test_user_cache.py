"""A user's file is read into memory with datasets' Arrow copy made in their own folder and removed: nothing reaches
the shared datasets cache, a read in progress counts in their quota, and what a killed read left is swept."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from backend.core.spec import SpecError
from backend.data.loading import load_file
from backend.data.user_cache import cache_root, cached_bytes, read_folder, sweep_reads
from tests.helpers import ROOT


@pytest.fixture()
def shared_cache(tmp_path, monkeypatch):
    """The shared datasets cache, watched."""
    import datasets.config

    cache = tmp_path / "hf-datasets-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    return cache


def test_a_file_is_read_into_memory_and_its_copy_is_gone_at_once(tmp_path, shared_cache):
    uploads = tmp_path / "uploads" / "ann"
    rows = uploads / "0123456789ab-sums.jsonl"
    uploads.mkdir(parents=True)
    rows.write_text("".join(json.dumps({"prompt": f"{i} + 1", "solution": str(i + 1)}) + "\n" for i in range(3000)))
    dataset = load_file(rows, "sums.jsonl", cache_root(uploads))
    assert len(dataset) == 3000 and dataset.cache_files == []  # in memory: nothing on disk backs it
    assert dataset.map(lambda row: {"n": len(row["prompt"])}).cache_files == []  # nor what is made from it
    assert sorted(p.name for p in uploads.iterdir()) == [rows.name], "the user's cache folder is removed"
    assert not shared_cache.exists() or not any(shared_cache.rglob("*.arrow"))


def test_a_bad_line_is_named_at_the_setting_that_named_the_file(tmp_path):
    rows = tmp_path / "cut.jsonl"
    rows.write_text('{"prompt": "a", "solution": "1"}\n{"prompt": "b", "solution": "2"}\n{"prompt": "c", "sol\n')
    with pytest.raises(SpecError) as caught:
        load_file(rows, "cut.jsonl", tmp_path / "cache", field="benchmarks.tasks")
    assert caught.value.problems == [
        "benchmarks.tasks: cut.jsonl could not be read as JSONL: line 3 is not valid JSON: Unterminated string "
        "starting at (column 17)"
    ]
    assert not (tmp_path / "cache").exists()


def test_a_read_in_progress_counts_and_stays_and_a_killed_ones_leftover_is_swept(tmp_path):
    root = cache_root(tmp_path / "uploads" / "ann")
    with read_folder(root) as folder:
        (folder / "data.arrow").write_bytes(b"x" * 5000)
        assert cached_bytes(tmp_path / "uploads" / "ann") == 5000
        assert sweep_reads(root, older_than_s=0) == 0 and folder.exists(), "a live read is never swept"
    assert not root.exists()
    # A process killed mid-read leaves its folder, whatever its age; its lock went with it.
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; from pathlib import Path; from backend.data.user_cache import read_folder\n"
            "with read_folder(Path(sys.argv[1])) as folder:\n"
            "    (folder / 'data.arrow').write_bytes(b'x' * 100)\n"
            "    os.kill(os.getpid(), 9)",
            str(root),
        ],
        cwd=ROOT,
    )
    assert killed.returncode == -9 and cached_bytes(tmp_path / "uploads" / "ann") == 100
    assert sweep_reads(root) == 1 and not root.exists()
