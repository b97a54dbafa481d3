"""Messages in a real browser (issue 37): a file that is not a dataset, uploaded in the Train tab, is answered with
a sentence under the dataset, as any refused upload is (the browser's file-type filter said nothing)."""

from __future__ import annotations

import json

from playwright.sync_api import expect

from tests.helpers.apps import app_fixture
from tests.helpers.browser import ARTIFACTS, BROWSER_MARKS, SETTINGS_ACCORDION, open_page

pytestmark = BROWSER_MARKS


app = app_fixture()


def test_a_png_upload_is_answered_with_a_sentence(app, tmp_path):
    picture = tmp_path / "screenshot.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    with open_page(app.url) as page:
        expect(page.locator("#header-status")).to_contain_text("Device:", timeout=30_000)
        page.locator("#dataset-source").get_by_label("upload").check()
        page.locator("#dataset-upload input[type=file]").set_input_files(picture)
        expect(page.locator("#dataset-error")).to_contain_text(
            "screenshot.png is not a dataset file; upload .jsonl, .json, .csv or .parquet", timeout=30_000
        )
        page.screenshot(path=ARTIFACTS / "png-upload-refused.png", full_page=True)
    assert not list((app.data_dir / "uploads").glob("*/*.png")), "nothing kept"


def test_dpo_on_a_one_row_upload_is_told_at_held_out_rows(app, tmp_path):
    """The walk of issue 37: DPO with the arithmetic model's recipe (128 held-out rows) on one's own one-row export.
    Check passes (the recipe's count adapts to the data) and says, under *Held-out rows*, that none is held out."""
    rows = tmp_path / "my-export.jsonl"
    rows.write_text(json.dumps({"prompt": "What is 2 plus 2?", "chosen": "4", "rejected": "5"}) + "\n")
    with open_page(app.url) as page:
        expect(page.locator("#header-status")).to_contain_text("Device:", timeout=30_000)
        page.locator("#method").get_by_label("dpo").check()
        box = page.get_by_label("Held-out rows (before/after evaluation)")
        page.get_by_text(SETTINGS_ACCORDION).click()
        expect(box).to_have_value("128")  # the recipe's count, measured on its own dataset
        page.locator("#dataset-source").get_by_label("upload").check()
        expect(box).to_have_value("")  # empty: auto, the data's size decides, as the spec is sent
        page.locator("#dataset-source").get_by_label("builtin").check()
        expect(box).to_have_value("128")
        page.locator("#dataset-source").get_by_label("upload").check()
        expect(box).to_have_value("")
        page.locator("#dataset-upload input[type=file]").set_input_files(rows)
        expect(page.locator("#upload-note")).to_contain_text("my-export.jsonl: 1 row", timeout=30_000)
        page.locator("#check-button").click()
        expect(page.locator("#queue-result")).to_contain_text("Pre-flight passed", timeout=60_000)
        held = page.locator("#field-error-holdout-rows")
        expect(held).to_contain_text("Held-out rows: the dataset has 1 row, too few to hold any out")
        expect(held).to_contain_text("eval.holdout_rows")
        expect(page.locator("#settings-error")).to_have_text("")
        page.screenshot(path=ARTIFACTS / "held-out-rows-one-row.png", full_page=True)
