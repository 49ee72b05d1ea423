"""In-process agents for fault tests (``python`` runner targets): cheap enough for thousands of
runs a minute, and they die with their replica on SIGKILL, as a real in-process agent would.

The server must have ``AGENTCRON_FAULT_LOG`` (a file path) and the repository on PYTHONPATH.
"""

from __future__ import annotations

import os
import time

from agentcron.core.runners.base import RunContext

LOG_ENV = "AGENTCRON_FAULT_LOG"


async def append_run(ctx: RunContext) -> str:
    """Log a START and an END line, in the format of ``tests.e2e.conftest.TIMED_AGENT``
    ("<START|END> <run id> <attempt> <instance> <epoch ns>"), to the fault log in one O_APPEND
    write, so one reader checks these agents and the command agents of the same soak."""
    request = ctx.request
    instance = os.environ.get("AGENTCRON_INSTANCE_ID", "?")
    tail = f"{request.run_id} {request.attempt} {instance} {time.time_ns()}\n"
    fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"START {tail}END {tail}".encode())
    finally:
        os.close(fd)
    return "ok"
