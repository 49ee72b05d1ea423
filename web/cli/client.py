"""The HTTP side of the command line: where the service is, which key to send, and how an
answer becomes either a JSON document or an ``agentcron: ...`` message with an exit code.

Nothing here imports ``core``: these commands are a client of a running service, usable on a
machine that has no access to its database.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import httpx
import typer

DEFAULT_URL = "http://127.0.0.1:8000"
TIMEOUT = httpx.Timeout(30.0, connect=5.0)
# A query string: a list value repeats its name (?status=failed&status=timed_out).
Params = dict[str, str | int | list[str]]

# Exit codes: the README's "Command line" section lists the same.
FAILED = 1  # the service said no (any non-2xx), could not be reached, or a waited run failed
USAGE = 2  # the command line itself is wrong (also what typer answers for bad options)

UrlOption = Annotated[
    str,
    typer.Option(
        "--url", envvar="AGENTCRON_URL", help="base URL of the agentcron service", metavar="URL"
    ),
]
KeyOption = Annotated[
    str | None,
    typer.Option(
        "--key",
        envvar="AGENTCRON_KEY",
        help="API key, sent as Authorization: Bearer",
        metavar="KEY",
        show_default=False,
    ),
]
JsonOption = Annotated[
    bool,
    typer.Option("--json", help="print the API's JSON answer unchanged, nothing else"),
]


class CliError(Exception):
    """A failure to report as ``agentcron: <message>`` on stderr, exiting with ``code``."""

    def __init__(self, message: str, code: int = FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def error_line(error: dict[str, Any]) -> str:
    """The ``error`` of an error body (docs/api.md) in one line: ``Type: message (field: name)``."""
    line = f"{error['type']}: {error['message']}"
    return line + (f" (field: {error['field']})" if error.get("field") else "")


def error_summary(response: httpx.Response) -> str | None:
    """``error_line`` of the answer's error body, or None when the answer is not one (a proxy
    in between, or not an agentcron service at that URL)."""
    try:
        return error_line(response.json()["error"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def describe_error(response: httpx.Response) -> str:
    """The one-line message for a non-2xx answer: status, and the error body's ``type``,
    ``message`` and ``field`` (docs/api.md) when it has one; else the start of the body."""
    status = f"HTTP {response.status_code}"
    summary = error_summary(response)
    if summary is None:
        text = " ".join(response.text.split())[:200] or response.reason_phrase
        return f"{status} from {response.request.url}: {text}"
    described = f"{status} {summary}"
    if response.status_code == 401:
        described += "; check --key or AGENTCRON_KEY"
    return described


def unreachable(url: str, exc: Exception) -> CliError:
    """What to say when a request to the service at ``url`` got no HTTP answer (``exc``, an
    httpx error or ``httpx.InvalidURL``)."""
    if isinstance(exc, httpx.TimeoutException):
        return CliError(f"no answer from {url} within {TIMEOUT.read:g} s")
    if isinstance(exc, httpx.ConnectError):
        return CliError(
            f"cannot connect to {url} ({_reason(exc)}): is `agentcron serve` running"
            " there? (--url or AGENTCRON_URL)"
        )
    if isinstance(exc, httpx.InvalidURL):
        return CliError(f"invalid --url {url!r}: {exc}", USAGE)
    return CliError(f"request to {url} failed: {_reason(exc)}")


def require_json(response: httpx.Response) -> None:
    """``CliError`` for a 2xx answer with a body that is not JSON: the URL reaches some other
    web server."""
    if not response.content:
        return
    try:
        response.json()
    except ValueError:
        raise CliError(
            f"HTTP {response.status_code} from {response.request.url} is not JSON:"
            " is --url an agentcron service?"
        ) from None


@dataclass(frozen=True)
class Api:
    """A running service at ``url`` called with ``key``. Every method returns a 2xx answer or
    raises ``CliError``; none raises an httpx exception."""

    url: str
    key: str

    @classmethod
    def connect(cls, url: str, key: str | None) -> Api:
        """Check the connection options before any request; ``CliError`` (usage) when the URL
        is not http(s) or there is no key."""
        if not url.startswith(("http://", "https://")):
            raise CliError(f"--url must be an http:// or https:// URL, not {url!r}", USAGE)
        if not key:
            raise CliError(
                "no API key: pass --key or set AGENTCRON_KEY"
                " (make one on the server with `agentcron keys create --owner NAME`)",
                USAGE,
            )
        return cls(url.rstrip("/"), key)

    @property
    def headers(self) -> dict[str, str]:
        """What every request carries: the key."""
        return {"Authorization": f"Bearer {self.key}"}

    def async_client(self) -> httpx.AsyncClient:
        """An asyncio client of the service, the key set, for a long-lived caller making many
        requests (``agentcron mcp``); the same timeouts and redirect rule as ``request``."""
        return httpx.AsyncClient(
            base_url=self.url, headers=self.headers, timeout=TIMEOUT, follow_redirects=False
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Params | None = None,
    ) -> httpx.Response:
        """``method`` on ``path`` (``/api/v1/...``), with a JSON ``body`` when not None; the
        answer is a 2xx whose body, if any, is JSON."""
        try:
            # One short-lived client per request: a command makes a handful at most.
            with httpx.Client(timeout=TIMEOUT, follow_redirects=False) as http:
                response = http.request(
                    method, f"{self.url}{path}", json=body, params=params, headers=self.headers
                )
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise unreachable(self.url, exc) from None
        if not response.is_success:
            raise CliError(describe_error(response))
        require_json(response)
        return response

    def get(self, path: str, params: Params | None = None) -> httpx.Response:
        """GET ``path``; see ``request``."""
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> httpx.Response:
        """POST ``path`` with a JSON ``body`` (none when None); see ``request``."""
        return self.request("POST", path, body=body)

    def pages(
        self, path: str, limit: int, follow: bool, filters: Params | None = None
    ) -> tuple[list[Any], list[str]]:
        """The items of a paginated list (docs/api.md ``?limit=&cursor=``): one page, or with
        ``follow`` every page through ``next_cursor``, sending ``filters`` with each. Returns
        the items and each page's raw JSON text."""
        items: list[Any] = []
        texts: list[str] = []
        params: Params = {**(filters or {}), "limit": limit}
        while True:
            response = self.get(path, params)
            page = response.json()
            items.extend(page["items"])
            texts.append(response.text)
            if not follow or not page.get("next_cursor"):
                return items, texts
            params["cursor"] = page["next_cursor"]


def hint_more_pages(texts: list[str], shown: int, what: str) -> None:
    """Say on stderr, after a table of one page, that the list goes on (the last page read had
    a ``next_cursor``), and how to see it all: a table alone cannot tell a full list from the
    first ``--limit`` of a longer one. Stderr, so the table on stdout stays what it was."""
    if not texts or not json.loads(texts[-1]).get("next_cursor"):
        return
    sys.stderr.write(
        f"agentcron: the first {shown} {what} shown; there are more: --all lists every page, "
        "or raise --limit (at most 500)\n"
    )
    sys.stderr.flush()


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def print_json(text: str) -> None:
    """Write one JSON document to stdout as the API sent it."""
    sys.stdout.write(text if text.endswith("\n") else f"{text}\n")
    sys.stdout.flush()


def answer(response: httpx.Response, as_json: bool, show: Callable[[dict[str, Any]], None]) -> None:
    """Print one answer of the API: unchanged with ``--json``, else as ``show`` renders it."""
    if as_json:
        print_json(response.text)
    else:
        show(response.json())
