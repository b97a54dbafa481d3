"""transformers' generation code imports without scikit-learn in the studio's processes
(backend/platform/lean_imports.py), and nothing else about scikit-learn or transformers changes."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import ROOT

PROBE = """
import json, sys
import backend
from transformers import AutoTokenizer, GenerationConfig
import transformers.generation.candidate_generator as generator
import transformers.utils
found = {
    "sklearn_imported": "sklearn" in sys.modules,
    "generator_sees_sklearn": generator.is_sklearn_available(),
    "transformers_sees_sklearn": transformers.utils.is_sklearn_available(),
}
from sklearn.metrics import roc_curve  # lm_eval's tasks still import it themselves
found["importable_after"] = callable(roc_curve)
print(json.dumps(found))
"""


def test_the_candidate_generator_imports_without_scikit_learn_which_stays_importable():
    """It imported scikit-learn (and scipy) for assisted generation's calibration, which the studio never runs: about
    a second of an app's first submit, of each CLI submit and of each fresh worker (benchmarks/imports.py)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found == {
        "sklearn_imported": False,  # by transformers: the import above is after this was read
        "generator_sees_sklearn": False,  # the one module that asked imports as on a machine without it
        "transformers_sees_sklearn": True,  # everyone else gets the true answer
        "importable_after": True,
    }, found
