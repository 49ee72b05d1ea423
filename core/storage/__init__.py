"""SQLAlchemy 2 async storage: engine and sessions, column types, models."""

from agentcron.core.storage.database import Capabilities, Database
from agentcron.core.storage.models import (
    ApiKey,
    Base,
    Delivery,
    Run,
    Schedule,
    Secret,
    Task,
    built,
)

__all__ = [
    "ApiKey",
    "Base",
    "Capabilities",
    "Database",
    "Delivery",
    "Run",
    "Schedule",
    "Secret",
    "Task",
    "built",
]
