"""Messages in a real browser (issue 37): a file that is not a dataset, uploaded in the Train tab, is answered with
a sentence under the dataset, as any refused upload is (the browser's file-type filter said nothing)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.apps import data_dir_with_models, launch_app
from tests.browser import ARTIFACTS, BROWSER_MARKS, open_page

pytestmark = BROWSER_MARKS


@pytest.fixture(scope="module")
def app(tmp_path_factory, models_dir):
    root = data_dir_with_models(tmp_path_factory.mktemp("browser-messages") / "data", models_dir)
    with launch_app(root) as running:
        yield running


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
