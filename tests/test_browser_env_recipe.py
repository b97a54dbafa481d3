"""Picking an environment on the Train form fills in its measured recipe (issue 37), in a real browser.

The form starts on builtin:tiny-qwen3-arith; GRPO then builtin:arithmetic, picked as a user does, must show the
settings of examples/grpo-env-demo.yaml (measured to improve the success rate): the arith-env dataset, 96 tokens,
one tool round, 128 evaluation episodes, 30 steps, max length 1024. Nothing trains.
"""

from __future__ import annotations

import pytest
import yaml
from playwright.sync_api import expect

from tests.apps import data_dir_with_models, launch_app
from tests.browser import BROWSER_MARKS, SETTINGS_ACCORDION, open_page
from tests.conftest import ROOT

pytestmark = BROWSER_MARKS  # slow, as every browser test


@pytest.fixture(scope="module")
def page(tmp_path_factory, models_dir):
    root = data_dir_with_models(tmp_path_factory.mktemp("browser-env-recipe") / "data", models_dir)
    with launch_app(root) as running, open_page(running.url) as page:
        expect(page.locator("#header-status")).to_contain_text("Device:", timeout=30_000)
        yield page


def test_picking_the_arithmetic_environment_fills_in_the_examples_settings(page):
    example = yaml.safe_load((ROOT / "examples" / "grpo-env-demo.yaml").read_text(encoding="utf-8"))
    expect(page.locator("#base-model input")).to_have_value(example["model"]["name_or_path"])
    dataset = page.locator("#builtin-dataset input")
    page.locator("#method").get_by_label("grpo").check()
    expect(dataset).to_have_value("arith-prompts")
    completion = page.get_by_label("Max completion length", exact=True)
    expect(completion).to_have_value("24")

    env = page.locator("#env-name input")
    env.click()
    env.fill(example["environment"]["name"])
    page.get_by_role("option", name=example["environment"]["name"], exact=True).click()
    expect(dataset).to_have_value(example["dataset"]["name"])
    expect(completion).to_have_value(str(example["rollout"]["max_completion_length"]))
    expect(page.get_by_label("Max tool calls per episode", exact=True)).to_have_value(
        str(example["environment"]["max_tool_calling_iterations"])
    )
    expect(page.get_by_label("Evaluation episodes", exact=True)).to_have_value(
        str(example["environment"]["eval_episodes"])
    )
    page.get_by_text(SETTINGS_ACCORDION).click()
    expect(page.get_by_label("Max steps", exact=True)).to_have_value(str(example["training"]["max_steps"]))
    expect(page.get_by_label("Max length", exact=True)).to_have_value(str(example["training"]["max_length"]))
    expect(page.get_by_label("Held-out rows (before/after evaluation)")).to_have_value(
        str(example["eval"]["holdout_rows"])
    )
