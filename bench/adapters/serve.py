"""agentcron as deployed: a real ``agentcron serve`` process (uvicorn, the FastAPI app, the
scheduler loop in its lifespan) on the scratch database, and an HTTP client reading the
schedule list while the burst runs.

- ``populate``: ``agentcron migrate`` (a deployment's schema path, in its own process), then
  the burst's one-shots exactly as the in-process adapter writes them.
- ``fire``: an API key of owner ``local`` made by ``core.keys.create_key`` (what ``agentcron
  keys create`` calls); each schedule's task directory, as a create through the API makes
  it; ``agentcron serve`` on a free loopback port with info logging (JSON, to a file in a
  temporary data directory), the harness's ``AGENTCRON_*`` settings and the
  ``bench`` modules admitted for the ``python`` runner; once ``/readyz`` answers 200, one
  schedule created through the API whose target imports ``bench.inside`` in the service
  (the loop-lag heartbeat there, and the no-op's spans written at exit). From T0 until the
  ledger records every run ``succeeded``: ``GET /api/v1/schedules?limit=50`` every 50 ms
  (latency p50/p99/max, how many, how many not answered 200), and the ledger polled every
  50 ms. Then SIGINT (the service drains and exits) and the figures the in-process adapter
  reports, read from the same ledger columns; the slot gap from the spans the service's
  no-op noted.

Statements are not counted (the service's engine is in another process), and commits per fire
include the service's start-up, the probe schedule and the API requests' transactions.
``cpu_s`` is the service process's CPU (``/proc/<pid>/stat``, every thread) from T0 until the
ledger records every run: the runs, their log lines, the API requests read meanwhile and the
heartbeat of ``bench.inside``.

One adapter for every served contender: the harness's environment picks the variant, the
concurrency (``AGENTCRON_SCHEDULER_CONCURRENCY``, which the service inherits) and the no-op
the schedules run (``BENCH_NOOP_TARGET``: ``bench.noop:arun`` on the service's event loop, or
``bench.noop:run``, a plain function the python runner calls in a worker thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from agentcron.core.config import Settings
from agentcron.core.keys import LOCAL_OWNER, create_key
from agentcron.core.logging import configure_logging
from agentcron.core.storage.database import Database
from bench import inside
from bench.adapters.agentcron import (
    POLL_SECONDS,
    engine_url,
    ledger,
    made_as_created,
    populate,
    shaped_rows,
    succeeded,
)
from bench.adapters.common import (
    burst_done,
    emit,
    mark_ready,
    parse_args,
    percentile,
    process_cpu_seconds,
    result,
    sleep_until,
    slot_gap_figures,
)

NAME = os.environ.get("BENCH_CONTENDER", "agentcron-serve")  # the harness names its variants
ROOT = Path(__file__).resolve().parents[2]
AGENTCRON = Path(sys.executable).with_name("agentcron")
HOST = "127.0.0.1"
API_PATH = "/api/v1/schedules"
API_PARAMS = {"limit": 50}  # the list's default page (docs/api.md, Pagination)
API_EVERY_SECONDS = 0.05
# A request slower than this counts as an error, not as a latency: the sample must go on.
API_TIMEOUT_SECONDS = 30.0
READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 60.0
PROBE_TARGET = "bench.inside:run"
LOG_TAIL_LINES = 20
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def command() -> list[str]:
    """``agentcron`` of this interpreter's environment: its console script, or the same CLI as
    a module where the script is not installed."""
    return [str(AGENTCRON)] if AGENTCRON.exists() else [sys.executable, "-m", "agentcron.web.cli"]


def service_env(url: str, **settings: str) -> dict[str, str]:
    """The environment of an ``agentcron`` process on database ``url``: the harness's own
    (``AGENTCRON_*`` settings such as the concurrency pass through), the repository on the
    path so ``bench`` imports, and ``settings`` on top."""
    return dict(os.environ, AGENTCRON_DATABASE_URL=url, PYTHONPATH=str(ROOT), **settings)


def migrate(url: str) -> None:
    """``agentcron migrate``, as a deployment prepares its database."""
    done = subprocess.run(
        [*command(), "migrate"], env=service_env(url), cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"agentcron migrate failed (exit {done.returncode}): {done.stderr}")


def _die_with_parent() -> None:
    """In the service's process before it runs: Linux sends it SIGINT should this adapter
    die without stopping it (killed), so no server outlives a benchmark."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGINT)


def free_port() -> int:
    """A TCP port of the loopback free right now (the service binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


class Service:
    """One ``agentcron serve`` process on a free loopback port; its log in ``data_dir``."""

    def __init__(self, url: str, data_dir: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://{HOST}:{self.port}"
        self.log_path = data_dir / "serve.log"
        self.inside_path = data_dir / "inside.json"
        self.env = service_env(
            url,
            AGENTCRON_DATA_DIR=str(data_dir),
            AGENTCRON_LOG_LEVEL="INFO",
            AGENTCRON_LOG_FORMAT="json",
            AGENTCRON_PYTHON_MODULES="bench",
            **{inside.FILE_VARIABLE: str(self.inside_path)},
        )
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        # A file, not a pipe: info logging writes lines per run, and a pipe nobody reads
        # would fill and block the service.
        with self.log_path.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *command(),
                "serve",
                "--host",
                HOST,
                "--port",
                str(self.port),
                env=self.env,
                cwd=ROOT,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )

    def check(self) -> None:
        """Fail (with the log's end) if the service has exited."""
        assert self.process is not None
        if self.process.returncode is not None:
            raise self.failed(f"exited with {self.process.returncode}")

    async def ready(self, client: httpx.AsyncClient) -> None:
        """Wait until ``/readyz`` answers 200 (database reachable, engine started)."""
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            self.check()
            with contextlib.suppress(httpx.TransportError):
                if (await client.get("/readyz")).status_code == 200:
                    return
            await asyncio.sleep(POLL_SECONDS)
        raise self.failed(f"not ready within {READY_TIMEOUT_SECONDS:g} s")

    async def watch_inside(self, client: httpx.AsyncClient) -> None:
        """Create the probe schedule (``bench.inside``): validating its target imports that
        module on the service's loop. Due in a day, so it never runs during the burst."""
        due = datetime.now(UTC) + timedelta(days=1)
        body = {
            "name": "bench-inside",
            "prompt": "noop",
            "trigger": {"at": due.isoformat()},
            "runner": {"type": "python", "target": PROBE_TARGET},
        }
        response = await client.post(API_PATH, json=body)
        if response.status_code != 201:
            answer = f"{response.status_code}: {response.text}"
            raise self.failed(f"refused the probe schedule ({answer})")

    async def stop(self) -> int:
        """Ctrl-C: the service drains and exits; killed if it has not within a minute. Its exit
        code. SIGINT rather than SIGTERM (uvicorn shuts down the same on either): uvicorn
        raises the signal it handled again once done, still on the loop; SIGTERM's default
        action then ends the process on the spot, where SIGINT's KeyboardInterrupt unwinds
        through ``asyncio.run``, which cancels ``bench.inside``'s task and lets it write."""
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGINT)
        try:
            return await asyncio.wait_for(self.process.wait(), STOP_TIMEOUT_SECONDS)
        except TimeoutError:
            self.process.kill()
            return await self.process.wait()

    def cpu_seconds(self) -> float:
        """User plus system CPU time of the service's process so far (every thread)."""
        assert self.process is not None
        return process_cpu_seconds(self.process.pid) or 0.0

    def inside(self) -> dict[str, Any]:
        """What ``bench.inside`` wrote at the service's exit (``{}`` if it wrote nothing)."""
        try:
            seen: dict[str, Any] = json.loads(self.inside_path.read_text())
        except (OSError, ValueError):
            return {}
        return seen

    def failed(self, what: str) -> RuntimeError:
        lines = self.log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        return RuntimeError(f"agentcron serve {what}; its log ends:\n" + "\n".join(lines))


class ApiSampler:
    """``GET /api/v1/schedules?limit=50`` every 50 ms, one at a time, until told to stop."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.latencies: list[float] = []
        self.errors = 0

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while not stop.is_set():
            began = time.perf_counter()
            try:
                response = await self.client.get(API_PATH, params=API_PARAMS)
            except httpx.TransportError:
                self.errors += 1
            else:
                self.latencies.append(time.perf_counter() - began)
                self.errors += response.status_code != 200
            # The next request at the next 50 ms mark: a request that overran skips the marks
            # it covered instead of sending them back to back (which would measure a queue of
            # our own making).
            now = loop.time()
            due += API_EVERY_SECONDS * max(1, math.ceil((now - due) / API_EVERY_SECONDS))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, due - now))

    def figures(self) -> dict[str, Any]:
        def ms(value: float | None) -> float | None:
            return None if value is None else round(value * 1000, 2)

        return {
            "api_requests": len(self.latencies) + self.errors,
            "api_errors": self.errors,
            "api_p50_ms": ms(percentile(self.latencies, 0.5)),
            "api_p99_ms": ms(percentile(self.latencies, 0.99)),
            "api_max_ms": ms(max(self.latencies, default=None)),
        }


def max_lag_ms(beats: list[list[float]], until: float) -> float | None:
    """The largest heartbeat lag (ms) of the beats up to ``until`` (epoch s): the window the
    in-process adapters probe, from before T0 to the end of the burst."""
    lags = [lag for at, lag in beats if at <= until]
    return round(max(lags) * 1000, 1) if lags else None


async def fire(url: str, count: int, t0: datetime, give_up_after: float) -> dict[str, Any]:
    """Serve from before ``t0`` until every run succeeded (or ``t0 + give_up_after``), reading
    the schedule list all along."""
    settings = Settings()
    probe = Database(url, pool_size=1)  # the adapter's own queries
    own = 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            token, _ = await create_key(probe, LOCAL_OWNER)
            own += 1
            await made_as_created(probe, Path(tmp))
            service = Service(url, Path(tmp))
            await service.start()
            headers = {"Authorization": f"Bearer {token}"}
            try:
                async with httpx.AsyncClient(
                    base_url=service.base_url, headers=headers, timeout=API_TIMEOUT_SECONDS
                ) as client:
                    await service.ready(client)
                    await service.watch_inside(client)
                    mark_ready()
                    await sleep_until(t0)
                    cpu = service.cpu_seconds()
                    sampler, stop = ApiSampler(client), asyncio.Event()
                    sampling = asyncio.create_task(sampler.run(stop))
                    deadline = t0.timestamp() + give_up_after
                    try:
                        while time.time() < deadline:
                            service.check()
                            own += 1
                            if (await succeeded(probe)) >= count:
                                break
                            await asyncio.sleep(POLL_SECONDS)
                        done_at = time.time()
                        cpu = service.cpu_seconds() - cpu
                    finally:
                        stop.set()
                        await sampling
                    await burst_done()
            finally:
                exit_code = await service.stop()
            seen = service.inside()
            own += 2
            shown = await ledger(probe)
    finally:
        await probe.dispose()
    spans = [(start, end) for start, end in seen.get("spans", [])]
    return result(
        contender=NAME,
        count=count,
        t0=t0,
        **shown,
        max_lag_ms=max_lag_ms(seen.get("beats", []), done_at),
        own_transactions=own,
        extra={
            "statements_per_fire": None,  # counted inside the service's process: not here
            # The service's CPU from T0 until the ledger recorded every run: the runs, their
            # log lines, and the API requests read meanwhile (``api_requests``).
            "cpu_s": round(cpu, 3),
            "executed_here": seen.get("calls", 0),
            "peak_rss_mb": seen.get("peak_rss_mb"),  # the service's, not this client's
            **slot_gap_figures(spans, settings.scheduler_concurrency),
            **sampler.figures(),
            "concurrency": settings.scheduler_concurrency,
            "tick_s": settings.scheduler_tick_seconds,
            "exit_code": exit_code,
        },
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure_logging("json", "WARNING")
    url = engine_url(args.dsn)
    if args.command == "populate":
        rows = shaped_rows("burst", args.count, args.at, args.every)
        asyncio.run(populate(url, rows, 0, migrate=migrate))
    else:
        emit(asyncio.run(fire(url, args.count, args.at, args.give_up_after)))


if __name__ == "__main__":
    main(sys.argv[1:])
