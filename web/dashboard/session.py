"""Who is looking at the dashboard, and whether a form post really comes from it.

Sign-in keeps the API key in a cookie (HttpOnly, SameSite=Strict) and every request checks it
again with ``core.keys.authenticate``, so a revoked key loses the dashboard at its next click,
exactly as it loses the API. State-changing posts must also come from a page of this host
(``Origin``, else ``Referer``): a second CSRF defence beside SameSite, for browsers and set-ups
where SameSite alone does not hold (an older browser, a sibling subdomain).
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qs, urlsplit

from fastapi import Depends, Request, Response

from agentcron.core.keys import Principal, authenticate
from agentcron.core.storage.database import Database

COOKIE = "agentcron_key"
# The longest form body read. The prompt may hold 100,000 characters, and a CJK character is
# 3 UTF-8 bytes, each percent-encoded as 3 characters: 900 KB for the largest valid prompt.
MAX_FORM_BYTES = 1024 * 1024
MAX_FORM_FIELDS = 100


class SignInRequired(Exception):
    """No key cookie, or its key is unknown or revoked: the page sends the viewer to /login."""


class Forbidden(Exception):
    """A state-changing request that does not come from a dashboard page (CSRF check)."""


class FormTooLarge(Exception):
    """A form body past ``MAX_FORM_BYTES`` (or with too many fields)."""


async def viewer(request: Request) -> Principal:
    """The principal of the key in the sign-in cookie; ``SignInRequired`` without a valid one.

    Raises ``SchedulerUnavailable`` when the database cannot be read, as the API does.
    """
    key = request.cookies.get(COOKIE)
    if not key:
        raise SignInRequired
    db: Database = request.app.state.db
    principal = await authenticate(db, key)
    if principal is None:
        raise SignInRequired
    return principal


ViewerDep = Annotated[Principal, Depends(viewer)]


async def check_origin(request: Request) -> None:
    """Refuse (``Forbidden``) a non-GET request whose ``Origin`` (or, without one, ``Referer``)
    is not this host. A request carrying neither is refused too: every current browser sends
    ``Origin`` on a POST, and scripts have the API."""
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    source = request.headers.get("origin") or request.headers.get("referer")
    host = request.headers.get("host")
    if not source or not host or source == "null":
        raise Forbidden
    parts = urlsplit(source)
    if parts.scheme not in ("http", "https") or parts.netloc.lower() != host.lower():
        raise Forbidden


async def read_form(request: Request) -> dict[str, str]:
    """The ``application/x-www-form-urlencoded`` body as ``{name: last value}``.

    Reads at most ``MAX_FORM_BYTES`` (``FormTooLarge`` past it), so a huge body is refused
    without being held in memory. Blank values are kept: an emptied field means "empty".
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        raise FormTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            raise FormTooLarge
        chunks.append(chunk)
    try:
        parsed = parse_qs(
            b"".join(chunks).decode("utf-8", errors="replace"),
            keep_blank_values=True,
            max_num_fields=MAX_FORM_FIELDS,
        )
    except ValueError:  # more fields than max_num_fields
        raise FormTooLarge from None
    return {name: values[-1] for name, values in parsed.items()}


def sign_in(response: Response, request: Request, key: str) -> None:
    """Keep ``key`` in the sign-in cookie of ``response`` (a browser-session cookie)."""
    response.set_cookie(
        COOKIE,
        key,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


def sign_out(response: Response, request: Request) -> None:
    """Clear the sign-in cookie."""
    response.delete_cookie(
        COOKIE, httponly=True, samesite="strict", secure=request.url.scheme == "https", path="/"
    )


def local_path(target: str | None, default: str = "/") -> str:
    """``target`` if it is a path on this site (no scheme, host or ``//``), else ``default``:
    where a redirect after sign-in or an action may go without becoming an open redirect."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return default
    if any(ord(char) < 0x20 for char in target):
        return default
    return target
