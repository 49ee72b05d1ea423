"""zcbot: a FastAPI host with its own ``core`` package that schedules its agent with agentcron.

    cd examples/zcbot_host && uvicorn app:app

The engine runs in zcbot's lifespan (``ZCBOT_SCHEDULER=off`` leaves it off: the API serves,
nothing runs here), agentcron's API is mounted under ``/scheduling`` behind zcbot's own bearer
tokens (``ZCBOT_USERS=alice=token,...``: the user is the schedules' owner), and every schedule
with ``{"runner": {"type": "handler", "data": {"task": ...}}}`` runs zcbot's agent under the
task's run lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import agentcron
from fastapi import Depends, FastAPI, Header, HTTPException

import core
from core.agent import LOG, TaskLocks, run_agent
from core.settings import load

settings = load()
locks = TaskLocks()


async def handle(ctx: agentcron.HandlerContext) -> str:
    task = str(ctx.data.get("task") or ctx.schedule_id)
    async with locks.hold(task):
        return await asyncio.to_thread(
            run_agent, task, ctx.prompt, str(ctx.run_id), settings.agent_seconds
        )


engine = agentcron.Engine(
    handler=handle,
    database_url=settings.database_url,
    data_dir=settings.data_dir,
    migrate=True,
    disable_scheduler=not settings.scheduler_on,
    scheduler_tick_seconds=settings.tick_seconds,
    scheduler_concurrency=settings.concurrency,
    tenant_runners="handler",  # zcbot's users schedule its agent, nothing else
)


def current_user(authorization: str | None = Header(default=None)) -> str:
    token = (authorization or "").removeprefix("Bearer ").strip()
    user = settings.users.get(token)
    if user is None:
        raise HTTPException(status_code=401, detail="sign in to zcbot first")
    return user


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with engine:
        yield


app = FastAPI(title="zcbot", lifespan=lifespan)
engine.install(app, prefix="/scheduling", principal=current_user)


@app.get("/healthz")
def healthz() -> dict[str, Any]:
    return {
        "ok": True,
        "scheduler": "on" if engine.loop is not None else "off",
        "core": core.__file__,  # zcbot's own package, whatever agentcron installs
    }


@app.get("/tasks/{task}")
def task_status(task: str, user: str = Depends(current_user)) -> dict[str, Any]:
    return LOG.status(task)
