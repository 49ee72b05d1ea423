"""``AGENTCRON_TENANT_ENDPOINTS`` (core/policy.py): each entry is a URL, and a tenant's
``openai`` ``base_url`` is one of the operator's endpoints only when its scheme, host and port
are the entry's and its path is the entry's path or below it, on a ``/`` boundary."""

from __future__ import annotations

from typing import Any

import pytest

from agentcron.core.config import Settings
from agentcron.core.errors import InvalidSchedule
from agentcron.core.policy import ExecutionPolicy, PolicyConfigError
from agentcron.core.runners import validate_runner

ENDPOINTS = (
    "http://127.0.0.1:5000, http://10.0.0.5, https://models.example.org/v1, http://[::1]:8080/"
)
ALLOWED = True  # the operator's endpoint: may be private, not judged at each attempt
JUDGED = False  # a name of the tenant's: resolved and judged at each attempt
REFUSED = "refused"  # a non-public literal host that is no endpoint of the operator's


def policy(endpoints: str = ENDPOINTS) -> ExecutionPolicy:
    return ExecutionPolicy.from_settings(
        Settings(database_url="sqlite+aiosqlite:///unused.db", tenant_endpoints=endpoints)
    )


def judge(base_url: str) -> bool | str:
    runner = validate_runner(
        {"type": "openai", "base_url": base_url, "model": "m", "api_key_secret": "k"}
    )
    try:
        stored: dict[str, Any] | None = policy().check_tenant(runner, None)
    except InvalidSchedule as exc:
        assert exc.field == "runner.base_url", exc.field
        return REFUSED
    assert stored is not None
    return bool(stored["private_endpoints"])


@pytest.mark.parametrize(
    ("base_url", "verdict"),
    [
        ("http://127.0.0.1:5000", ALLOWED),
        ("http://127.0.0.1:5000/v1", ALLOWED),
        ("http://127.0.0.1:50000/v1", REFUSED),  # another port that starts the same
        ("http://127.0.0.1:500/v1", REFUSED),
        ("https://127.0.0.1:5000/v1", REFUSED),  # another scheme
        ("http://10.0.0.5/v1", ALLOWED),
        ("http://10.0.0.5:80/v1", ALLOWED),  # the scheme's port, spelt out
        ("http://10.0.0.50/v1", REFUSED),  # another host that starts the same
        ("http://10.0.0.5:8080/v1", REFUSED),
        ("http://10.0.0.5.attacker.example/v1", JUDGED),  # a name the tenant's DNS answers for
        ("https://models.example.org/v1", ALLOWED),
        ("https://MODELS.example.org/v1/", ALLOWED),  # names are case-insensitive
        ("https://models.example.org/v1/chat", ALLOWED),
        ("https://models.example.org:443/v1", ALLOWED),
        ("https://models.example.org/v10", JUDGED),  # not below /v1
        ("https://models.example.org/v1/../admin", JUDGED),  # sent as /admin
        ("https://models.example.org/v1/%2e%2e/admin", JUDGED),  # a server may decode it
        ("https://models.example.org", JUDGED),
        ("https://models.example.org.attacker.example/v1", JUDGED),
        ("http://models.example.org/v1", JUDGED),
        ("http://[::1]:8080/v1", ALLOWED),
        ("http://[0:0:0:0:0:0:0:1]:8080", ALLOWED),  # the same address, spelt out
        ("http://[::1]:8081/v1", REFUSED),
        ("http://localhost/v1", REFUSED),  # a name that is loopback whatever it resolves to
        ("http://169.254.169.254/", REFUSED),  # cloud metadata
    ],
)
def test_an_endpoint_is_matched_by_scheme_host_port_and_path(
    base_url: str, verdict: bool | str
) -> None:
    assert judge(base_url) == verdict


@pytest.mark.parametrize(
    "entry",
    [
        "127.0.0.1:5000",  # no scheme
        "ftp://10.0.0.5",
        "http://",
        "http://10.0.0.5:99999",
        "http://10.0.0.5:port",
        "http://[::1",
        "http://user:secret@10.0.0.5",
        "http://10.0.0.5/v1?key=1",
        "http://10.0.0.5/v1#top",
        "http://10.0.0.5/v1/%2e%2e/x",
    ],
)
def test_a_malformed_entry_refuses_the_start_in_one_line(entry: str) -> None:
    with pytest.raises(PolicyConfigError) as caught:
        policy(f"http://127.0.0.1:5000, {entry}")
    message = caught.value.message
    assert message.startswith("AGENTCRON_TENANT_ENDPOINTS: ") and "\n" not in message
    assert "secret" not in message  # an entry's credentials are never repeated
