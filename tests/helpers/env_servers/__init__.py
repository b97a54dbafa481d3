"""Test-only environment servers, started by the tests on 127.0.0.1 (each module's docstring says how)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

COUNTER_SERVER = Path(__file__).with_name("counter_server.py")


def write_counter_rows(path: Path, targets: Iterable[int] = range(3, 11)) -> Path:
    """A dataset file for the counter server (``COUNTER_SERVER``): one conversational prompt per target, the target
    in a ``target`` column (what its reset reads)."""
    path.write_text(
        "".join(
            json.dumps({"prompt": [{"role": "user", "content": f"Reach {t} with the counter tool."}], "target": t})
            + "\n"
            for t in targets
        )
    )
    return path
