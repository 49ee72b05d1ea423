"""agentcron: a scheduler for AI-agent work.

The installed package: ``agentcron.core`` (the service layer, no HTTP) and ``agentcron.web``
(the FastAPI app, the engine's loop, the CLI), with the database migrations inside it. In the
repository they are the top-level ``core/``, ``web/`` and ``migrations/`` folders, which this
directory links to.
"""

from __future__ import annotations

__version__ = "0.1.0"
