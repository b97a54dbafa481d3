"""The environment's task splits beside the Environment field: which splits it offers through OpenEnv's Task API,
and whether the job's evaluation will play held-out test tasks (asked of the facade when the field changes)."""

from __future__ import annotations

from typing import Any

from backend.api import SpecError, StudioAPI
from components.session import as_user
from components.wiring import bind


def splits_markdown(catalog: Any) -> str:
    """What the form says of an environment's splits (``api.environments.splits``'s answer)."""
    if catalog is None:
        return (
            "Task splits: none. The evaluation plays the dataset's rows (the hold-out rows if set), so its "
            "episodes are not held out by the environment."
        )
    test = catalog.test_split()
    said = f"Task splits: {catalog.summary()}."
    if test is None:
        return said + " No test split: the evaluation plays the dataset's rows, not held-out tasks."
    return said + f" The evaluation plays the {test.name!r} split's tasks, held out from training."


def show_splits(api: StudioAPI, user, env_name) -> str:
    """The splits of the environment the field names (nothing while it names none)."""
    name = (env_name or "").strip()
    if not name:
        return ""
    if user is None and not name.startswith("builtin:"):
        return "Sign in to list this environment's task splits."
    try:
        return splits_markdown(api.environments.splits(name, user))
    except SpecError as exc:
        return f"Task splits could not be listed: {'; '.join(exc.problems)}"
    except Exception as exc:  # noqa: BLE001 - a rate limit or a server's failure: a sentence beside the field
        return f"Task splits could not be listed: {exc}"


def wire(api: StudioAPI, env_name, note) -> None:
    """Ask for the splits each time the Environment field changes."""
    env_name.change(
        as_user(bind(show_splits, api), signed_in=False), [env_name], note, api_name=False, show_progress="hidden"
    )
