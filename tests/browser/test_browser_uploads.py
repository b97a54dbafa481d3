"""The Train tab's "Your uploads" panel in a real browser: an upload is listed with its size, and Delete removes it,
frees the form's dataset and says what it deleted."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.helpers.apps import app_fixture
from tests.helpers.browser import ARTIFACTS, BROWSER_MARKS, open_page
from tests.unit.api.test_access import CHAT_ROWS, write_jsonl

pytestmark = BROWSER_MARKS
SETTLE_MS = 3_000  # time for the events an answer sets off (a field it cleared fires its change) to answer too

app = app_fixture()


def test_an_upload_is_listed_in_your_uploads_and_delete_removes_it(app, tmp_path):
    rows = write_jsonl(tmp_path / "chats.jsonl", CHAT_ROWS)
    with open_page(app.url) as page:
        expect(page.locator("#header-status")).to_contain_text("Device:", timeout=30_000)
        page.locator("#dataset-source").get_by_label("upload").check()
        page.locator("#dataset-upload input[type=file]").set_input_files(rows)
        expect(page.locator("#upload-note")).to_contain_text("chats.jsonl: 12 rows", timeout=30_000)

        page.get_by_text("Your uploads").click()
        summary = page.locator("#uploads-summary")
        expect(summary).to_have_text("1 upload, 1 KB")  # no quota off a Space unless STUDIO_UPLOAD_QUOTA_MB is set
        page.locator("#uploads-pick input").click()
        page.get_by_role("option", name=re.compile(r"^chats\.jsonl \(\d+ KB, kept ")).click()
        page.screenshot(path=ARTIFACTS / "your-uploads.png", full_page=True)
        page.locator("#uploads-delete").click()
        note = page.locator("#uploads-note")
        expect(note).to_contain_text(re.compile(r"Deleted chats\.jsonl \(\d+ KB\)\."))
        expect(summary).to_have_text("No uploads kept")
        # The sentence stays: it was the form's dataset, and forgetting it there relists the panel, which once wiped
        # the note a moment after it showed (CI's stop-62 run saw an empty note).
        page.wait_for_timeout(SETTLE_MS)
        expect(note).to_contain_text(re.compile(r"Deleted chats\.jsonl \(\d+ KB\)\."), timeout=1_000)
        assert not list((app.data_dir / "uploads").glob("*/*.jsonl"))
