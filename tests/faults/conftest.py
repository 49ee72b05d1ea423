"""Fixtures for fault tests: the e2e fixtures (real processes, per-test PostgreSQL databases)
and a fault proxy between the service and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.engine import make_url

from tests.conftest import PG_URL
from tests.e2e.conftest import fleet, pg_url, probe_factory  # noqa: F401 (fixtures)
from tests.faults.proxy import ThreadedProxy, running_proxy


def through(proxy: ThreadedProxy, database_url: str) -> str:
    """``database_url`` with its host and port replaced by the proxy's."""
    url = make_url(database_url).set(host="127.0.0.1", port=proxy.port)
    return url.render_as_string(hide_password=False)


@pytest.fixture
def pg_proxy() -> Iterator[ThreadedProxy]:
    """A fault proxy in front of the test PostgreSQL server."""
    upstream = make_url(PG_URL)
    with running_proxy(upstream.host or "127.0.0.1", upstream.port or 5432) as proxy:
        yield proxy
