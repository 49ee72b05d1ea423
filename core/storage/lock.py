"""The single-engine guard for SQLite: one scheduler loop per database file."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from sqlalchemy.engine import make_url

from agentcron.core.errors import StartupError


class EngineLock:
    """An exclusive ``flock`` on ``<database>.engine.lock`` held while the loop runs.

    SQLite cannot give several processes row locks or cross-process wake-ups, so a second
    engine on the same file is refused at start instead of quietly racing the first.
    """

    def __init__(self, url: str) -> None:
        database = make_url(url).database
        self.path: Path | None = None
        if database and database != ":memory:" and not database.startswith("file:"):
            self.path = (
                Path(database)
                .expanduser()
                .resolve()
                .with_name(Path(database).name + ".engine.lock")
            )
        self._fd: int | None = None

    def acquire(self) -> None:
        if self.path is None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StartupError(
                f"another agentcron engine already runs on this SQLite database ({self.path}). "
                "Several replicas need PostgreSQL: set AGENTCRON_DATABASE_URL="
                "postgresql+asyncpg://USER@HOST/DB, or run this process with "
                "AGENTCRON_DISABLE_SCHEDULER=1 to serve only the API"
            ) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
