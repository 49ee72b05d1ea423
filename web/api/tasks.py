"""Task endpoints: see a task (working directory, run lock, conversation) or delete it."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from agentcron.core.tasks import delete_task, get_task
from agentcron.web.api.deps import AuthDep, OwnerDep
from agentcron.web.api.schedules import ERRORS
from agentcron.web.api.schemas import TaskOut

router = APIRouter(prefix="/api/v1/tasks", tags=["tasks"], responses=ERRORS, dependencies=[AuthDep])


@router.get("/{task_id}")
async def read_task(task_id: str, request: Request, owner: OwnerDep) -> TaskOut:
    return TaskOut.model_validate(await get_task(request.app.state.db, task_id, owner))


@router.delete("/{task_id}", status_code=status.HTTP_204_NO_CONTENT)
async def remove_task(task_id: str, request: Request, owner: OwnerDep) -> Response:
    """Delete a task; a persistent schedule bound to it gets a new one at its next run."""
    await delete_task(request.app.state.db, task_id, owner)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
