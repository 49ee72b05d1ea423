"""PostgreSQL's own cost of a burst, read from outside the contender: WAL bytes and the CPU
time of the database's backends, from T0 until the adapter says every run is recorded.

- WAL, cluster: ``pg_wal_lsn_diff`` of ``pg_current_wal_lsn()`` at the end and at T0. The
  WAL is the server's, not one database's: whatever else the server writes meanwhile (other
  databases, autovacuum, checkpoints' full-page images) counts too.
- WAL, database: the same range read back with ``pg_waldump`` (the server's own tool, when it
  can be run and can read the server's ``pg_wal``): the records that touch a relation of the
  scratch database, and every record of a transaction that did (its commit). Records a
  checkpoint or another database wrote are left out; padding between records is not counted.
  None when ``pg_waldump`` is missing or could not read the range (a checkpoint meanwhile,
  another session's on a shared server, may have recycled its first segments).
- Backend CPU: user plus system time (``/proc/<pid>/stat``; the server runs on this machine)
  of every client backend connected to the scratch database, read at T0 and then every
  100 ms until the end; a backend that appears later counts from zero (it connected within
  the window). Left out: backends whose ``application_name`` is ``bench-probe`` (the
  adapters' own progress queries), autovacuum, the server's background processes (WAL
  writer, checkpointer), and what a backend spent in its last 100 ms if it exited before
  the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

from bench.adapters.common import PROBE_APPLICATION, process_cpu_seconds

SAMPLE_SECONDS = 0.1
BACKENDS = (
    "SELECT pid, application_name FROM pg_stat_activity"
    " WHERE datname = $1 AND backend_type = 'client backend'"
)
RECORD = re.compile(r"len \(rec/tot\):\s*\d+/\s*(\d+), tx:\s*(\d+),")
RELATION = re.compile(r"rel \d+/(\d+)/\d+")
WALDUMP_TIMEOUT_SECONDS = 120.0


class PgCost:
    """The readings of one burst on database ``name``, through the admin connection."""

    def __init__(self, admin: str, name: str) -> None:
        self.admin = admin
        self.name = name
        self.conn: asyncpg.Connection | None = None
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.probes: set[int] = set()
        self.lsn: list[str] = []
        self.db_wal: int | None = None
        self.done = asyncio.Event()

    async def _sample(self) -> None:
        assert self.conn is not None
        for pid, application in await self.conn.fetch(BACKENDS, self.name):
            if application == PROBE_APPLICATION:
                self.probes.add(pid)
            cpu = process_cpu_seconds(pid)
            if cpu is not None:
                self.last[pid] = cpu
                self.first.setdefault(pid, 0.0 if self.lsn else cpu)

    async def _lsn(self) -> None:
        assert self.conn is not None
        self.lsn.append(str(await self.conn.fetchval("SELECT pg_current_wal_lsn()::text")))

    async def watch(self, t0: datetime) -> None:
        """From T0 until ``end`` is called: the first readings, then backend CPU every 100 ms.
        Run as a task; cancelling it closes its connection."""
        self.conn = await asyncpg.connect(self.admin)
        try:
            await asyncio.sleep(max(0.0, t0.timestamp() - time.time()))
            await self._sample()  # backends present at T0: counted from here
            await self._lsn()
            while not self.done.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.done.wait(), SAMPLE_SECONDS)
                await self._sample()
            await self._lsn()
            await self._waldump()
        finally:
            await self.conn.close()

    def end(self) -> None:
        """The adapter said the burst is over: take the last readings."""
        self.done.set()

    async def _waldump(self) -> None:
        """The database's own WAL bytes of the range, by ``pg_waldump`` (None if not)."""
        assert self.conn is not None
        try:
            oid = await self.conn.fetchval(
                "SELECT oid FROM pg_database WHERE datname = $1", self.name
            )
            directory = await self.conn.fetchval("SHOW data_directory")
            backend = await self.conn.fetchval("SELECT pg_backend_pid()")
        except asyncpg.PostgresError:
            return
        tool = waldump(int(backend))
        if len(self.lsn) < 2 or self.lsn[0] == self.lsn[1] or tool is None:
            return
        argv = [tool, "-p", str(Path(directory) / "pg_wal"), "-s", self.lsn[0], "-e", self.lsn[1]]
        try:
            done = await asyncio.to_thread(
                subprocess.run,
                argv,
                capture_output=True,
                text=True,
                timeout=WALDUMP_TIMEOUT_SECONDS,
            )
        except (OSError, subprocess.SubprocessError):
            return
        if done.returncode != 0 and not done.stdout:
            return
        self.db_wal = database_wal_bytes(done.stdout, int(oid))

    def figures(self, count: int) -> dict[str, Any]:
        """Per run of a burst of ``count``: WAL bytes (cluster, database), backend CPU (µs)."""
        cpu = sum(self.last[pid] - self.first[pid] for pid in self.last if pid not in self.probes)
        cluster = None
        if len(self.lsn) == 2:
            cluster = wal_diff(self.lsn[1], self.lsn[0])
        db_wal = self.db_wal
        done = len(self.lsn) == 2 and count > 0
        return {
            "pg_backends": len(set(self.last) - self.probes),
            "pg_backend_cpu_s": round(cpu, 3) if done else None,
            "pg_cpu_us_per_run": round(cpu * 1e6 / count, 1) if done else None,
            "wal_bytes": cluster,
            "wal_bytes_per_run": round(cluster / count, 1)
            if done and cluster is not None
            else None,
            "db_wal_bytes": db_wal,
            "db_wal_bytes_per_run": (
                round(db_wal / count, 1) if done and db_wal is not None else None
            ),
        }


def waldump(backend: int) -> str | None:
    """``pg_waldump`` of the running server: next to the postmaster's executable (the parent
    of backend ``backend``), else the one on the PATH; None if neither is there."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        parent = Path(f"/proc/{backend}/stat").read_text().rpartition(")")[2].split()[1]
        beside = Path(f"/proc/{parent}/exe").resolve().with_name("pg_waldump")
        if beside.exists():
            return str(beside)
    return shutil.which("pg_waldump")


def wal_diff(end: str, start: str) -> int:
    """``pg_wal_lsn_diff(end, start)``, computed here: an LSN is ``hi/lo`` in hexadecimal."""

    def number(lsn: str) -> int:
        high, low = lsn.split("/")
        return (int(high, 16) << 32) + int(low, 16)

    return number(end) - number(start)


def database_wal_bytes(dump: str, oid: int) -> int:
    """The total length of the records of ``pg_waldump``'s output that belong to database
    ``oid``: those naming one of its relations, and those of a transaction that did."""
    records: list[tuple[int, int, bool]] = []
    ours: set[int] = set()
    for line in dump.splitlines():
        match = RECORD.search(line)
        if match is None:
            continue
        length, xid = int(match.group(1)), int(match.group(2))
        mine = any(int(db) == oid for db in RELATION.findall(line))
        if mine and xid:
            ours.add(xid)
        records.append((length, xid, mine))
    return sum(length for length, xid, mine in records if mine or (xid and xid in ours))
