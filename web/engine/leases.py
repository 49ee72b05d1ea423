"""Keeping the leases of this process's runs, and stopping an attempt that may have lost one.

The heartbeat renews the leases this process holds: on executing attempts often (that is also
how a cancel requested on another replica arrives), on the claimed backlog and on deliveries
every third of a lease.

A run is never executing in two places at once. An attempt whose lease could not be confirmed
until shortly before it runs out (``fence_margin`` ahead of it: the database is unreachable, or
the renewal is stuck) is frozen before any other replica may take it over: a ``command``
agent's process group gets SIGSTOP (``CancelToken.suspend``), and SIGCONT once a renewal
confirms the lease is still ours, so a database outage costs no work; a runner that cannot
freeze is stopped instead. An attempt whose lease was taken over (a renewal no longer finds it
ours) is stopped at once, frozen or not: ``CancelToken.cancel(..., at_once=True)``, SIGKILL of
the process group, no grace period.

With liveness (PostgreSQL, ``core.storage.liveness``) the engine's session lock is what other
replicas judge it by: once it is lost they may take its runs within a second, lease or not.
So the loss fences every attempt at once (``unvouched``), a new attempt is fenced as it
starts, nothing thaws while the lock is not ours, and taking it again prompts a renewal at
once: it thaws the attempts still ours and stops those taken over.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from agentcron.core.clock import Clock
from agentcron.core.ledger.store import RunStore
from agentcron.core.logging import get_logger
from agentcron.core.runners.base import CancelToken
from agentcron.core.storage.models import Run
from agentcron.web.engine.supervisor import wait_set

log = get_logger("agentcron.engine")

# Cancel reasons of an attempt stopped because its lease is, or is about to be, another's.
LEASE_LOST = "lease_lost"  # the renewal no longer found the run ours: taken over
LEASE_UNCONFIRMED = "lease_unconfirmed"  # no renewal confirmed before the lease runs out


class LeaseKeeper:
    """The heartbeat and the fences of one engine's runs. It shares the engine's collections:
    ``tokens`` (attempts executing now), ``held`` (runs leased here), ``delivering`` (runs
    whose deliveries are made here) and ``suspendable`` (attempts whose runner can freeze)."""

    def __init__(
        self,
        ledger: RunStore,
        clock: Clock,
        *,
        tokens: dict[uuid.UUID, CancelToken],
        held: set[uuid.UUID],
        delivering: set[uuid.UUID],
        suspendable: set[uuid.UUID],
        on_error: Callable[[BaseException], None],
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.tokens, self.held, self.delivering = tokens, held, delivering
        self.suspendable = suspendable
        self.on_error = on_error  # a renewal failed: the engine reports itself unhealthy
        # Each executing attempt's stop, armed ``fence_margin`` before its confirmed lease runs
        # out and moved on by every renewal: the instant, and one timer per instant with the
        # attempts it stops. The runs of one claim, or of one renewal, share their lease's end,
        # so a burst arms a timer per batch rather than one per run.
        self.fences: dict[uuid.UUID, datetime] = {}
        self._timers: dict[datetime, tuple[asyncio.TimerHandle, set[uuid.UUID]]] = {}
        # The latest lease end a renewal confirmed, per run held: a run admitted before its
        # slot freed (``web.engine.slots``) starts under it, not under its admission's older one.
        self.confirmed: dict[uuid.UUID, datetime] = {}
        lease = ledger.lease_seconds
        self.fence_margin = min(max(1.0, lease / 6), lease / 4)
        # Whether this engine may vouch for its leases now (its liveness lock is held); always
        # True without liveness.
        self.vouched: Callable[[], bool] = lambda: True
        self.prompt = asyncio.Event()  # renew executing attempts now, not at the next beat

    def unvouched(self) -> None:
        """The liveness lock was lost: fence every executing attempt now."""
        for run_id in list(self.tokens):
            self.disarm(run_id)
            self._lease_running_out(run_id)

    def vouch(self) -> None:
        """The liveness lock is ours again: confirm the leases now (``heartbeat``)."""
        self.prompt.set()

    def disarm(self, run_id: uuid.UUID) -> None:
        """The attempt of ``run_id`` ended: nothing to stop any more."""
        at = self.fences.pop(run_id, None)
        if at is None:
            return
        timer, runs = self._timers[at]
        runs.discard(run_id)
        if not runs:
            timer.cancel()
            del self._timers[at]

    def disarm_all(self) -> None:
        for timer, _ in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self.fences.clear()

    async def heartbeat(self) -> None:
        # Executing attempts are renewed often, since that is also how a cancel requested on
        # another replica arrives. The claimed backlog waiting for a slot (thousands of rows
        # after a burst) is renewed only every third of a lease: rewriting every row of it
        # every couple of seconds would load the database and lock rows the starts need.
        interval = max(0.2, min(self.ledger.lease_seconds / 3, 2.0))
        backlog_every = max(interval, self.ledger.lease_seconds / 3)
        clock = asyncio.get_running_loop().time
        backlog_renewed = clock()
        # Not bound to the stop event: runs draining at shutdown keep their leases renewed
        # until ``stop()`` cancels this task, or a replica would take them over mid-run.
        while True:
            await wait_set(self.prompt, interval)
            prompted = self.prompt.is_set()
            self.prompt.clear()
            if prompted:
                ids = list(self.tokens)
            elif clock() - backlog_renewed >= backlog_every - 0.05:
                ids, backlog_renewed = list(self.held), clock()
                self.confirmed = {r: u for r, u in self.confirmed.items() if r in self.held}
                # Delivery leases go with the backlog: a third of a lease is plenty of margin,
                # and a slow receiver after a burst can hold thousands of deliveries open.
                if self.delivering:
                    try:
                        await self.ledger.deliveries.renew(self.clock(), list(self.delivering))
                    except Exception as exc:
                        self.on_error(exc)
            else:
                ids = list(self.tokens)
            if not ids:
                continue
            renewed_at = self.clock()
            try:
                leases = await self.ledger.renew_leases(renewed_at, ids)
            except Exception as exc:
                self.on_error(exc)
                continue
            until = renewed_at + timedelta(seconds=self.ledger.lease_seconds)
            # Only the runs asked about: an attempt that started while the renewal was awaited
            # is not in the answer, and not lost (its admission wrote its lease).
            for run_id in ids:
                if run_id in leases:
                    self.confirmed[run_id] = until
                token = self.tokens.get(run_id)
                if token is None:  # not executing (backlog), or its attempt ended meanwhile
                    continue
                if run_id not in leases:
                    token.cancel(LEASE_LOST, at_once=True)
                    continue
                self.fence(run_id, until)
                if token.suspended and not token.cancelled and self.vouched():
                    token.resume()
                    log.info("run_resumed", run_id=str(run_id), instance_id=self.ledger.owner)
                if leases[run_id]:
                    token.cancel("cancel")

    async def confirm(self, run: Run) -> bool:
        """Before an admitted run starts: True if its lease (the admission's, or the latest a
        renewal confirmed) has at least half a lease left, else after renewing it now; False
        if the renewal finds the run is not ours any more."""
        assert run.lease_expires_at is not None
        until = self._latest(run.id, run.lease_expires_at)
        if (until - self.clock()).total_seconds() >= self.ledger.lease_seconds / 2:
            return True
        renewed_at = self.clock()
        if run.id not in await self.ledger.renew_leases(renewed_at, [run.id]):
            return False
        self.confirmed[run.id] = renewed_at + timedelta(seconds=self.ledger.lease_seconds)
        return True

    def _latest(self, run_id: uuid.UUID, until: datetime) -> datetime:
        """``until``, or the later lease end a renewal confirmed for ``run_id`` since."""
        confirmed = self.confirmed.get(run_id)
        return until if confirmed is None else max(until, confirmed)

    @contextlib.contextmanager
    def executing(self, run: Run) -> Iterator[CancelToken]:
        """Hold the attempt of an admitted ``run`` while it executes: its cancel token in
        ``tokens`` (where renewals, cancels and a drain find it) and its fence armed on the
        admission's lease; both go when the attempt ends."""
        assert run.lease_expires_at is not None  # set by the admission
        token = self.tokens[run.id] = CancelToken()
        self.fence(run.id, run.lease_expires_at)
        try:
            yield token
        finally:
            self.tokens.pop(run.id, None)
            self.disarm(run.id)

    def fence(self, run_id: uuid.UUID, until: datetime) -> None:
        """Arm (again) the stop of the attempt of ``run_id``, ``fence_margin`` before ``until``,
        the end of the lease last confirmed for it."""
        self.disarm(run_id)
        if run_id not in self.tokens:
            return
        now = self.clock()
        at = self._latest(run_id, until) - timedelta(seconds=self.fence_margin)
        if not self.vouched():
            at = now  # no liveness lock: the run may be another's in a second
        self.fences[run_id] = at
        if at in self._timers:
            self._timers[at][1].add(run_id)
            return
        delay = max(0.0, (at - now).total_seconds())
        timer = asyncio.get_running_loop().call_later(delay, self._fence_reached, at)
        self._timers[at] = (timer, {run_id})

    def _fence_reached(self, at: datetime) -> None:
        _, runs = self._timers.pop(at)
        for run_id in runs:
            del self.fences[run_id]
        for run_id in runs:
            self._lease_running_out(run_id)

    def _lease_running_out(self, run_id: uuid.UUID) -> None:
        token = self.tokens.get(run_id)
        if token is None:
            return
        cause = "renewal not confirmed in time" if self.vouched() else "liveness lock lost"
        if run_id in self.suspendable and not token.cancelled:
            if not token.suspended:  # already frozen: said once
                token.suspend()
                log.warning(
                    "run_suspended", run_id=str(run_id), instance_id=self.ledger.owner, cause=cause
                )
        else:
            # A graceful stop already under way (a timeout's SIGTERM) is hurried too.
            token.cancel(LEASE_UNCONFIRMED, at_once=True)
