"""How many runs one engine takes in hand, and when a waiting run is admitted.

The engine runs at most ``concurrency`` attempts at once (its ``SlotGate``) and holds a short
queue of claimed runs beyond them, so a slot that frees goes on to its next run while the
loop's next claim is still on its way. These are the numbers the loop decides its claims by.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from types import TracebackType

from agentcron.core.runners.base import CancelToken

# Runs taken in hand beyond the free slots (``RunEngine.room``). Without a bound a claim of
# 500 at concurrency 256 left 244 runs waiting, each admitted later in a small batch of its
# own; with a small one nearly every run is admitted by its claim, and a replica never
# sits on due runs another could start.
QUEUE_AHEAD = 32
# The queue while attempts are quick (below): a claim then brings four times the runs for
# about the same transaction (a 10,000-run burst at concurrency 4: 9.6 s with 32, 6.7 s with
# 128), and a queued run still waits only a moment. Behind slow attempts the queue stays short,
# so a replica never sits on runs an idle one could start.
QUICK_QUEUE_AHEAD = 128
# While most recent attempts took less than this, a run queued in hand is admitted before its
# slot frees (``RunEngine.admit_ahead``), so the slot goes on to it with no round trip; it then
# shows ``running`` for the short while it waits, at most a queue's worth of such attempts.
QUICK_SECONDS = 0.05
RECENT = 16  # how many recent attempts decide that


class SlotGate:
    """A first-come, first-served semaphore whose release hands the slot to the next waiter.

    ``asyncio.Semaphore`` (CPython 3.11) wakes a waiter by scanning its queue past every
    waiter already woken but not yet run, and each waiter then removes itself from the middle
    of that queue: when a batch of runs ends in one turn of the loop, hundreds of runs waiting
    at concurrency 256 made that quadratic (110 ``Future.done()`` calls per run in a 10,000-run
    burst). Here a release pops the first waiter still waiting and hands it the slot, or
    frees the slot when none is; every step is O(1) per waiter.

    Measured alone (10,000 runs at 256, a task each, one ``sleep(0)`` in its slot): 64.8 µs a
    run with the semaphore, 51.9 with the gate (docs/benchmarks.md, "The slot gate"): 0.13 s of
    that machine's 8.7 to 10.8 s burst at 256, less than the spread between its bursts.
    """

    def __init__(self, slots: int) -> None:
        self._free = slots
        # Waiting acquirers, oldest first; a cancelled one stays until a release pops it.
        self._waiters: deque[asyncio.Future[None]] = deque()

    def locked(self) -> bool:
        """Whether an acquire now would wait. A slot is only ever free with nobody waiting:
        a release hands it on rather than frees it while anyone waits."""
        return self._free == 0

    async def acquire(self) -> None:
        if self._free > 0:
            self._free -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed the slot, then cancelled before it ran: pass it on
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.release()


class Slots:
    """The slot accounting of ``web.engine.run.RunEngine``, and the sets it is kept over."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.semaphore = SlotGate(concurrency)
        self.held: set[uuid.UUID] = set()  # runs leased by this process
        self.tokens: dict[uuid.UUID, CancelToken] = {}  # attempts executing now
        # Runs the claim admitted that have not begun their attempt yet: at shutdown they are
        # given back as running attempts are (``release(started=True)``), not as queued ones.
        self.admitted: set[uuid.UUID] = set()
        # Set whenever a run leaves ``held``: the loop, out of room, waits on it to claim more.
        self.slot_freed = asyncio.Event()
        # Runs whose attempt is over and whose outcome is being written: still held (their
        # lease is renewed until it is), but no longer in the way of the next claim, and not
        # given back by a stop (their agent has done its work).
        self.recording: set[uuid.UUID] = set()
        # Whether each of the last ``RECENT`` attempts was quick.
        self.recent: deque[bool] = deque(maxlen=RECENT)

    def free_slots(self) -> int:
        """Slots no run of ours holds or waits for (a run being recorded has freed its own)."""
        return max(0, self.concurrency - (len(self.held) - len(self.recording)))

    def admittable(self) -> int:
        """How many runs the next claim may admit: the free slots, and while attempts are quick
        the queue ahead too, as ``admit_ahead`` would a moment later, minus its round trip."""
        return self.free_slots() + (self.ahead() if self.quick() else 0)

    def quick(self) -> bool:
        """Most of the last ``RECENT`` attempts took under ``QUICK_SECONDS``."""
        return len(self.recent) == RECENT and 2 * sum(self.recent) > RECENT

    def ahead(self) -> int:
        """How long the queue ahead of the slots may be: ``QUEUE_AHEAD``, or
        ``QUICK_QUEUE_AHEAD`` while attempts are quick, and never shorter than the slots."""
        return max(QUICK_QUEUE_AHEAD if self.quick() else QUEUE_AHEAD, self.concurrency)

    def room(self) -> int:
        """How many more runs the next claim may take in hand: the free slots plus the queue
        ahead (``ahead``) that lets a slot go on to its next run while a claim is still on
        its way. Runs beyond it stay in the database, unleased, for whichever replica has
        room (or for this one, once ``slot_freed`` is set)."""
        waiting_or_running = len(self.held) - len(self.recording)
        return max(0, self.concurrency + self.ahead() - waiting_or_running)

    def queued(self) -> int:
        """Runs in hand that are not executing or being recorded: the queue ahead of the
        slots (including runs the claim admitted that have not begun)."""
        return len(self.held) - len(self.recording) - len(self.tokens)

    def should_claim(self) -> bool:
        """Whether a claim is worth its transaction while due work is known to be waiting:
        once the queue ahead has run down to half. Claiming as soon as any slot frees took
        claims of a few runs each (at concurrency 4, 279 claims for 2,000 runs, ~8 ms each),
        the claims' statements outnumbering the runs'."""
        return self.room() > 0 and self.queued() <= self.ahead() // 2

    def admit_ahead(self) -> bool:
        """Admit a queued run before its slot frees: every slot is taken, and attempts are
        quick, so its wait will be short too."""
        return self.quick() and self.semaphore.locked()
