"""Resolution at run time: the values of the secrets one attempt or delivery refers to.

It owns reading and decrypting the referenced secrets of an owner (or of a schedule's owner)
with one query, and saying why each secret that cannot be read is missing: ``Resolution``
keeps the values and the problems apart, and the values out of its ``repr``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from agentcron.core.errors import RunPermanentError, TargetUnavailable
from agentcron.core.secrets.keyring import KEY_SETTING, Keyring, SecretUnreadable
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Schedule, Secret


@dataclass(frozen=True)
class Resolution:
    """The values of the secrets that could be read, and why each of the others could not.
    ``values`` is kept out of ``repr`` so a resolution can never reach a log line whole."""

    values: dict[str, str] = field(default_factory=dict, repr=False)
    problems: dict[str, RunPermanentError] = field(default_factory=dict)

    def check(self) -> dict[str, str]:
        """``values`` when every secret was read; else raise the first problem by name."""
        if self.problems:
            raise self.problems[min(self.problems)]
        return self.values


async def load(
    db: Database,
    owner: str | None,
    names: Iterable[str],
    *,
    keyring: Keyring | None,
    schedule_id: uuid.UUID | None = None,
) -> Resolution:
    """Read and decrypt the secrets ``names`` of ``owner``, or of the owner of schedule
    ``schedule_id`` (one query either way, the owner found by a subquery), without raising for
    the ones that cannot be read: they are in ``problems``. A secret that does not exist is a
    ``TargetUnavailable`` (every later run would fail the same way); one that does not
    decrypt, or any secret without a keyring, a ``RunPermanentError``."""
    wanted = set(names)
    if not wanted:
        return Resolution()
    if owner is not None:
        who: Any = owner
    elif schedule_id is not None:
        who = select(Schedule.owner).where(Schedule.id == schedule_id).scalar_subquery()
    else:
        raise ValueError("load needs an owner or a schedule id")
    query = select(Secret.owner, Secret.name, Secret.ciphertext).where(
        Secret.owner == who, Secret.name.in_(wanted)
    )
    async with db.session(write=False) as session:
        rows = (await session.execute(query)).all()
    values: dict[str, str] = {}
    problems: dict[str, RunPermanentError] = {}
    for row_owner, name, token in rows:
        if keyring is None:
            problems[name] = RunPermanentError(
                f"secret {name!r} cannot be read: {KEY_SETTING} is not set on this replica"
            )
            continue
        try:
            values[name] = keyring.decrypt(row_owner, name, token)
        except SecretUnreadable as exc:
            problems[name] = exc
    for name in wanted - values.keys() - problems.keys():
        problems[name] = TargetUnavailable(
            f"secret {name!r} no longer exists: store it again "
            f"(`agentcron secrets set {name}`) or change the schedule"
        )
    return Resolution(values, problems)


async def resolve(
    db: Database, owner: str, names: Iterable[str], *, keyring: Keyring | None
) -> dict[str, str]:
    """The values of ``owner``'s secrets ``names`` (name -> value), one query. Raises the
    first problem by name (see ``load``) when any cannot be read."""
    return (await load(db, owner, names, keyring=keyring)).check()
