"""SIGKILL of a replica while a webhook delivery is in flight (the receiver holds its answer
back), repeated, with a survivor running throughout (docs/design.md, promise 7; README:
delivery). A kill during a claim is covered by ``test_soak.py``, a kill during a run by
``tests/e2e/test_takeover.py``.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import secrets
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import bearer
from tests.e2e.conftest import (
    Fleet,
    RunProbe,
    Server,
    create_schedule,
    engine_env,
    json_events,
    make_key,
    one_shot,
    wait_for,
)


def slot_env(pg_url: str, tmp_path: Path, slot: int, instance: str) -> dict[str, str]:
    # A 30-s delivery lease: the survivor must take the delivery because the victim's
    # session is gone (liveness), long before the lease would let it.
    return engine_env(
        pg_url,
        tmp_path / f"data-{slot}",
        instance,
        LEASE_SECONDS="30",
        SCHEDULER_TICK_SECONDS="1",
        ALLOW_PRIVATE_WEBHOOKS="1",
        LOG_RUNS="each",  # which replica recorded a run: its run_finished line says
    )


# -- a webhook receiver that holds back its first answer to each delivery -----------------------


@dataclass
class Hook:
    """Records (webhook-id, arrival) per request; the first request of each webhook-id gets no
    answer until ``hold`` seconds pass (the sender is killed meanwhile), later ones 200."""

    hold: float = 30.0
    seen: list[tuple[str, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    def start(self) -> Hook:
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                webhook_id = self.headers.get("webhook-id", "")
                with hook.lock:
                    first = all(seen != webhook_id for seen, _ in hook.seen)
                    hook.seen.append((webhook_id, time.monotonic()))
                if first:
                    time.sleep(hook.hold)
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def arrivals(self, webhook_id: str) -> list[float]:
        with self.lock:
            return [at for seen, at in self.seen if seen == webhook_id]

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


async def arrived(hook: Hook, webhook_id: str) -> bool:
    return bool(hook.arrivals(webhook_id))


async def delivered(server: Server, key: str, run_id: uuid.UUID) -> bool:
    async with httpx.AsyncClient(timeout=10, headers=bearer(key)) as http:
        answer = await http.get(f"{server.url}/api/v1/runs/{run_id}")
    deliveries = answer.json()["deliveries"]
    return bool(deliveries) and deliveries[0]["status"] == "delivered"


@pytest.fixture
def hook() -> Iterator[Hook]:
    receiver = Hook().start()
    yield receiver
    receiver.stop()


@pytest.mark.pg
@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_sigkill_during_delivery_is_delivered_by_the_survivor(
    pg_url: str, fleet: Fleet, tmp_path: Path, probe_factory: Callable[[str], RunProbe], hook: Hook
) -> None:
    probe = probe_factory(pg_url)
    taken: list[float] = []
    starts = itertools.count()

    def start(slot: int) -> Server:
        instance = f"slot{slot}-g{next(starts)}"
        return fleet.start(slot_env(pg_url, tmp_path, slot, instance), instance)

    key = await asyncio.to_thread(make_key, slot_env(pg_url, tmp_path, 0, "keys"))
    servers = [await asyncio.to_thread(start, slot) for slot in (0, 1)]
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    for round_ in range(2):
        # Seconds ahead: on a loaded machine the POST alone took more than 1.5 s.
        body = one_shot(
            {"type": "command", "argv": ["true"]},
            delay=5,
            notify=[{"type": "webhook", "url": hook.url, "secret": secret}],
        )
        schedule_id = str((await create_schedule(servers[round_ % 2], key, body))["id"])
        run = (await wait_for(partial(probe.runs, schedule_id), "the run"))[0]
        webhook_id = f"{run.id}.0"
        await wait_for(partial(arrived, hook, webhook_id), "the delivery to arrive")
        # The replica that delivers is the one that recorded the run.
        victim = next(
            i
            for i in (0, 1)
            if any(
                e.get("run_id") == str(run.id)
                for e in json_events(servers[i].log(), "run_finished")
            )
        )
        killed_at = time.monotonic()
        assert await asyncio.to_thread(servers[victim].kill) == -signal.SIGKILL

        survivor = servers[1 - victim]
        await wait_for(
            partial(delivered, survivor, key, run.id), "the survivor to deliver", within=25
        )
        # Seen twice (the victim's request, held open, and the survivor's), always with the
        # same webhook-id (receivers de-duplicate on it).
        arrivals = hook.arrivals(webhook_id)
        assert len(arrivals) == 2, arrivals
        taken.append(arrivals[1] - killed_at)
        servers[victim] = await asyncio.to_thread(start, victim)
    print(f"\ndelivery taken over after SIGKILL: {', '.join(f'{t:.2f} s' for t in taken)}")
    # The liveness bound (about 2 s) with room for a loaded machine (13.7 s seen once on a
    # CI run beside other load); the lease would be 30 s.
    assert max(taken) < 20, taken
