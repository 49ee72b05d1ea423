"""The operator's endpoints for tenants: the entries of ``AGENTCRON_TENANT_ENDPOINTS``.

An entry is an http(s) URL: ``http://127.0.0.1:11434`` (a whole local model server) or
``https://gateway.internal/tenants/v1`` (one path of it). A tenant's ``openai`` ``base_url``
is one of them when its scheme, host and port are the entry's (the port defaulting to the
scheme's) and its path is the entry's path or below it, on a ``/`` boundary. Text prefixes
are not enough: ``http://127.0.0.1:5000`` is a prefix of ``http://127.0.0.1:50000`` and
``http://10.0.0.5`` of ``http://10.0.0.5.attacker.example``.

A path is compared as the request will send it: dot segments removed, as httpx does, and a
path that still holds a ``.`` or ``..`` segment once percent-decoded (``/v1/%2e%2e/admin``,
which a server may decode) is below no entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from agentcron.core.notify.ssrf import parse_ip_literal

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Endpoint:
    """One entry: the scheme, host and port a ``base_url`` must have exactly, and the path it
    must be at or below. ``host`` is a lower-case name without a trailing dot or an IP
    address's canonical text; ``path`` has no trailing slash (``""``: the whole server)."""

    scheme: str
    host: str
    port: int
    path: str

    @classmethod
    def parse(cls, entry: str) -> Endpoint:
        """The endpoint an entry names; ``ValueError`` saying what is wrong (never quoting
        the entry, which may carry credentials)."""
        scheme, host, port, path = _locate(entry)
        parts = urlsplit(entry)
        if parts.username is not None or parts.password is not None:
            raise ValueError("must not carry credentials")
        if parts.query or parts.fragment:
            raise ValueError("must not have a query or a fragment")
        if path is None:
            raise ValueError("has a '.' or '..' segment in its path")
        return cls(scheme, host, port, path)

    def admits(self, url: str) -> bool:
        """Whether ``url`` is this endpoint or below it (see the module docstring)."""
        try:
            scheme, host, port, path = _locate(url)
        except ValueError:
            return False
        if (scheme, host, port) != (self.scheme, self.host, self.port) or path is None:
            return False
        return not self.path or path == self.path or path.startswith(self.path + "/")


def _locate(url: str) -> tuple[str, str, int, str | None]:
    """``(scheme, host, port, path)`` of an http(s) URL; the path is None when it holds a dot
    segment once decoded. ``ValueError`` for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
        path = httpx.URL(url).path  # percent-decoded, dot segments removed
    except (ValueError, httpx.InvalidURL):
        raise ValueError("is not a URL with a valid host and port") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError("is not an http or https URL with a host")
    literal = parse_ip_literal(parts.hostname)
    host = str(literal) if literal is not None else parts.hostname.lower().rstrip(".")
    segments = path.split("/")
    dotted = "." in segments or ".." in segments
    return (
        scheme,
        host,
        port if port is not None else _DEFAULT_PORTS[scheme],
        None if dotted else path.rstrip("/"),
    )


def parse_endpoints(value: str) -> tuple[Endpoint, ...]:
    """The endpoints of a comma-separated setting, in its order. ``ValueError`` naming the
    entry that is wrong (by its text, unless it may carry credentials)."""
    endpoints = []
    for entry in (part.strip() for part in value.split(",")):
        if not entry:
            continue
        try:
            endpoints.append(Endpoint.parse(entry))
        except ValueError as exc:
            shown = "an entry" if "@" in entry else repr(entry)
            raise ValueError(f"{shown} {exc}") from None
    return tuple(endpoints)


__all__ = ["Endpoint", "parse_endpoints"]
