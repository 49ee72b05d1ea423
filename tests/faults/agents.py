"""In-process agents for fault tests (``python`` runner targets): cheap enough for thousands of
runs a minute, and they die with their replica on SIGKILL, as a real in-process agent would.

The server must have ``AGENTCRON_FAULT_LOG`` (a file path) and the repository on PYTHONPATH.
"""

from __future__ import annotations

import os

from core.runners import RunContext

LOG_ENV = "AGENTCRON_FAULT_LOG"


async def append_run(ctx: RunContext) -> str:
    """Append "<instance> <run id> <attempt>" to the fault log, in one O_APPEND write."""
    request = ctx.request
    line = f"{os.environ.get('AGENTCRON_INSTANCE_ID', '?')} {request.run_id} {request.attempt}\n"
    fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return "ok"
