"""What the browser tests share: Debian's Chromium driven by Playwright, and where failures leave screenshots."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import ROOT

# Playwright's own browser download does not work offline; CI installs Debian's chromium (see .ci/run).
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "tests" / "artifacts"

BROWSER_MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(),
                       reason=f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium; .ci/run does it)"),
]


@contextmanager
def chromium() -> Iterator:
    """A headless Chromium for a module's tests (closed after)."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()
