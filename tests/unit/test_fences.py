"""The fences of ``web.engine.leases``: an attempt is stopped ``fence_margin`` before the end of the
lease last confirmed for it, whichever other attempts share that end."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta
from pathlib import Path

from agentcron.core.clock import utcnow
from agentcron.core.ledger.memory import MemoryRunStore
from agentcron.core.runners.base import CancelToken
from agentcron.web.engine.leases import LEASE_UNCONFIRMED, LeaseKeeper

LEASE = 1.2  # a fence margin of 0.3 s (a quarter of the lease)


def _keeper(tmp_path: Path, tokens: dict[uuid.UUID, CancelToken]) -> LeaseKeeper:
    store = MemoryRunStore(owner="engine-a", lease_seconds=LEASE, data_dir=tmp_path)
    return LeaseKeeper(
        store,
        utcnow,
        tokens=tokens,
        held=set(tokens),
        delivering=set(),
        suspendable=set(),
        on_error=lambda exc: None,
    )


def _fenced(
    tmp_path: Path, attempts: int
) -> tuple[LeaseKeeper, dict[uuid.UUID, CancelToken], datetime]:
    """``attempts`` executing attempts whose leases all end 0.5 s from now (fenced 0.2 s from
    now), and that end."""
    tokens = {uuid.uuid4(): CancelToken() for _ in range(attempts)}
    keeper = _keeper(tmp_path, tokens)
    until = utcnow() + timedelta(seconds=0.5)
    for run_id in tokens:
        keeper.fence(run_id, until)
    return keeper, tokens, until


async def test_attempts_sharing_a_lease_end_are_stopped_together_and_alone_when_moved(
    tmp_path: Path,
) -> None:
    keeper, tokens, until = _fenced(tmp_path, 4)
    ids = list(tokens)
    assert len(keeper._timers) == 1  # one timer for the four
    keeper.disarm(ids[0])  # its attempt ended
    keeper.fence(ids[1], until + timedelta(seconds=5))  # a renewal moved its lease on
    await asyncio.sleep(0.4)
    assert not tokens[ids[0]].cancelled and not tokens[ids[1]].cancelled
    for run_id in ids[2:]:
        assert tokens[run_id].cancelled and tokens[run_id].reason == LEASE_UNCONFIRMED
        assert tokens[run_id].at_once
    assert set(keeper.fences) == {ids[1]}
    keeper.disarm_all()
    assert not keeper.fences and not keeper._timers


async def test_the_last_attempt_of_a_lease_end_to_go_takes_its_timer_along(
    tmp_path: Path,
) -> None:
    keeper, tokens, _ = _fenced(tmp_path, 2)
    ids = list(tokens)
    ((timer, _),) = keeper._timers.values()
    keeper.disarm(ids[0])
    assert not timer.cancelled()
    keeper.disarm(ids[1])
    assert timer.cancelled() and not keeper._timers


async def test_without_its_liveness_lock_an_engine_fences_a_new_attempt_at_once(
    tmp_path: Path,
) -> None:
    run_id = uuid.uuid4()
    tokens = {run_id: CancelToken()}
    keeper = _keeper(tmp_path, tokens)
    keeper.vouched = lambda: False
    keeper.fence(run_id, utcnow() + timedelta(seconds=60))
    await asyncio.sleep(0.05)
    assert tokens[run_id].cancelled and tokens[run_id].reason == LEASE_UNCONFIRMED
