"""zcbot's settings, from its own environment variables."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ZcbotSettings:
    database_url: str
    data_dir: Path
    scheduler_on: bool  # ZCBOT_SCHEDULER=off: the API serves, nothing runs in this process
    tick_seconds: float
    concurrency: int
    users: dict[str, str]  # bearer token -> user name
    agent_seconds: float  # how long the stand-in agent works on a prompt


def load() -> ZcbotSettings:
    env = os.environ
    users = dict(
        pair.split("=", 1)[::-1] for pair in env.get("ZCBOT_USERS", "alice=dev-token").split(",")
    )
    return ZcbotSettings(
        database_url=env.get("ZCBOT_DATABASE_URL", "sqlite:///var/zcbot.db"),
        data_dir=Path(env.get("ZCBOT_DATA_DIR", "var")),
        scheduler_on=env.get("ZCBOT_SCHEDULER", "on").lower() != "off",
        tick_seconds=float(env.get("ZCBOT_SCHEDULER_TICK_SECONDS", "10")),
        concurrency=int(env.get("ZCBOT_SCHEDULER_CONCURRENCY", "4")),
        users=users,
        agent_seconds=float(env.get("ZCBOT_AGENT_SECONDS", "0")),
    )
