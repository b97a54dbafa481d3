"""Who is asking: the signed-in Hugging Face user on a Space, or the local user; and what they may touch.

Every facade call that reads or changes a job takes a ``User``: a user sees and acts on their own jobs only; an
admin (the Space's owner, anyone in ``STUDIO_ADMINS``, and the local user on their own machine) sees all of them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

DEFAULT_MAX_QUEUED_PER_USER = 3


@dataclass(frozen=True)
class User:
    """A person using the studio: their name, whether they are an admin or at this machine, and their Hub token."""

    name: str
    is_admin: bool = False
    # The person at this machine (``local_user()``): only they may name files and folders on it. A Space admin is not.
    local: bool = False
    # The user's Hub token (OAuth on a Space, HF_TOKEN locally): held in memory only, never stored.
    token: str | None = field(default=None, repr=False, compare=False)

    def can_access(self, owner: str) -> bool:
        """Whether this user may see and act on jobs and files that ``owner`` owns."""
        return self.is_admin or owner == self.name


def admins() -> set[str]:
    """The admins' user names: ``STUDIO_ADMINS`` (comma-separated) and the Space's author."""
    names = {n.strip() for n in os.environ.get("STUDIO_ADMINS", "").split(",") if n.strip()}
    if os.environ.get("SPACE_AUTHOR_NAME"):
        names.add(os.environ["SPACE_AUTHOR_NAME"])
    return names


def local_user() -> User:
    """The person running the app on their own machine: ``STUDIO_LOCAL_USER`` (default ``local``), an admin."""
    return User(
        os.environ.get("STUDIO_LOCAL_USER", "local"), is_admin=True, local=True, token=os.environ.get("HF_TOKEN")
    )


def hub_user(username: str, token: str | None = None) -> User:
    """A user signed in with Hugging Face on a Space."""
    return User(username, is_admin=username in admins(), token=token)


def max_queued_per_user() -> int:
    """How many queued jobs one user may have waiting (``STUDIO_MAX_QUEUED_PER_USER``)."""
    try:
        return max(1, int(os.environ.get("STUDIO_MAX_QUEUED_PER_USER", DEFAULT_MAX_QUEUED_PER_USER)))
    except ValueError:
        return DEFAULT_MAX_QUEUED_PER_USER
