"""What a sweep's later children stand on: the rights its submitter had (so a TPE child, queued by the scheduler's
tick long after the request, passes the same door as a submit, as the same user). The places a TPE sweep holds in
the queue for its trials not queued yet are counted in ``queue_places``.

The door itself is the facade's (``StudioCore.prepare``: authorization, lineage); the scheduler is handed it as a
callable (``ChildDoor``), since the facade stands above this package.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from backend.core.spec import JobSpec
from backend.core.users import User, admins

# Who submitted a sweep, as it is stored: a trusted caller in this process (the CLI, a script: ``user=None``), the
# person at this machine, a Space admin, or any other signed-in user.
Rights = Literal["trusted", "local", "admin", "user"]
# The door a child passes before it is stored: the spec as ``user`` may run it, or SpecError naming the field.
ChildDoor = Callable[[JobSpec, User | None], JobSpec]


def rights_of(user: User | None) -> Rights:
    """What a sweep records of its submitter's rights."""
    if user is None:
        return "trusted"
    if user.local:
        return "local"
    return "admin" if user.is_admin else "user"


def user_of(owner: str, rights: str) -> User | None:
    """The user a sweep's later child is judged as: the owner, with no more than the rights recorded at submit. An
    admin counts as one only while still among the admins (a right taken away since is gone); the user's Hub token
    is never stored, so none is held. Anything unknown (a row written before rights were recorded) is a plain user,
    the least reach."""
    if rights == "trusted":
        return None
    if rights == "local":
        return User(owner, is_admin=True, local=True)
    return User(owner, is_admin=rights == "admin" and owner in admins())
