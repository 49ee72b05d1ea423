"""The HTTP side of the command line: where the service is, which key to send, and how an
answer becomes either a JSON document or an ``agentcron: ...`` message with an exit code.

Nothing here imports ``core``: these commands are a client of a running service, usable on a
machine that has no access to its database.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import httpx
import typer

DEFAULT_URL = "http://127.0.0.1:8000"
TIMEOUT = httpx.Timeout(30.0, connect=5.0)

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


def describe_error(response: httpx.Response) -> str:
    """The one-line message for a non-2xx answer: status, and the error body's ``type``,
    ``message`` and ``field`` (docs/api.md) when it has one; else the start of the body."""
    status = f"HTTP {response.status_code}"
    try:
        error = response.json()["error"]
        kind, message, field = error["type"], error["message"], error.get("field")
    except (ValueError, KeyError, TypeError):
        # Not our error body: a proxy in between, or not an agentcron service at that URL.
        text = " ".join(response.text.split())[:200] or response.reason_phrase
        return f"{status} from {response.request.url}: {text}"
    described = f"{status} {kind}: {message}"
    if field:
        described += f" (field: {field})"
    if response.status_code == 401:
        described += "; check --key or AGENTCRON_KEY"
    return described


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

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str | int] | None = None,
    ) -> httpx.Response:
        """``method`` on ``path`` (``/api/v1/...``), with a JSON ``body`` when not None; the
        answer is a 2xx whose body, if any, is JSON."""
        target = f"{self.url}{path}"
        try:
            # One short-lived client per request: a command makes a handful at most.
            with httpx.Client(timeout=TIMEOUT, follow_redirects=False) as http:
                response = http.request(
                    method,
                    target,
                    json=body,
                    params=params,
                    headers={"Authorization": f"Bearer {self.key}"},
                )
        except httpx.TimeoutException:
            raise CliError(f"no answer from {self.url} within {TIMEOUT.read:g} s") from None
        except httpx.ConnectError as exc:
            raise CliError(
                f"cannot connect to {self.url} ({_reason(exc)}): is `agentcron serve` running"
                " there? (--url or AGENTCRON_URL)"
            ) from None
        except httpx.InvalidURL as exc:
            raise CliError(f"invalid --url {self.url!r}: {exc}", USAGE) from None
        except httpx.HTTPError as exc:
            raise CliError(f"request to {self.url} failed: {_reason(exc)}") from None
        if not response.is_success:
            raise CliError(describe_error(response))
        if response.content:
            try:
                response.json()
            except ValueError:
                # A 2xx that is not JSON: the URL reaches some other web server.
                raise CliError(
                    f"HTTP {response.status_code} from {target} is not JSON:"
                    " is --url an agentcron service?"
                ) from None
        return response

    def get(self, path: str, params: dict[str, str | int] | None = None) -> httpx.Response:
        """GET ``path``; see ``request``."""
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> httpx.Response:
        """POST ``path`` with a JSON ``body`` (none when None); see ``request``."""
        return self.request("POST", path, body=body)

    def pages(self, path: str, limit: int, follow: bool) -> tuple[list[Any], list[str]]:
        """The items of a paginated list (docs/api.md ``?limit=&cursor=``): one page, or with
        ``follow`` every page through ``next_cursor``. Returns the items and each page's raw
        JSON text."""
        items: list[Any] = []
        texts: list[str] = []
        params: dict[str, str | int] = {"limit": limit}
        while True:
            response = self.get(path, params)
            page = response.json()
            items.extend(page["items"])
            texts.append(response.text)
            if not follow or not page.get("next_cursor"):
                return items, texts
            params["cursor"] = page["next_cursor"]


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
