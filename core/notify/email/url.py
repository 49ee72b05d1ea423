"""The SMTP URL of an ``email`` channel: ``SmtpSettings`` and the parsing that refuses a bad one.

It owns the URL forms described in ``core.notify.email`` (the scheme, the credentials, the
``ca_file`` and ``timeout`` parameters) and reading the URL from the service's environment or
from a resolved stored secret. Every error names the variable or the secret and says what is
wrong, never quoting the value, which may hold a password.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

from agentcron.core.errors import RunPermanentError

_DEFAULT_PORTS = {"smtp": 25, "smtp+starttls": 587, "smtps": 465}
DEFAULT_TIMEOUT = 30.0
MAX_TIMEOUT = 300.0


@dataclass(frozen=True)
class SmtpSettings:
    """A parsed SMTP URL. ``password`` is kept out of ``repr`` so it cannot reach a log."""

    scheme: str
    host: str
    port: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    timeout: float = DEFAULT_TIMEOUT

    @property
    def address(self) -> str:
        """``host:port`` as shown in errors (brackets around an IPv6 literal)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_smtp_url(url: str, *, files: bool = True) -> SmtpSettings:
    """Parse one of the SMTP URL forms in the docstring of ``core.notify.email``.

    Raises ``ValueError`` whose message says what is wrong without quoting any part of the
    URL (which may hold a password), so the caller can show it next to the variable's name.
    ``files=False`` refuses ``ca_file`` (a URL that is not the operator's may not name a file
    of the service's host), with the same words whatever the path is, and never touches it.
    """
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise ValueError("it is not a URL with a valid host and port") from None
    if port == 0:
        raise ValueError("it is not a URL with a valid host and port")
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError("the scheme must be smtp, smtp+starttls or smtps")
    if not parts.hostname:
        raise ValueError("it names no host")
    if parts.path not in ("", "/") or parts.fragment:
        raise ValueError("it must not have a path or a fragment")
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    if password is not None and not username:
        raise ValueError("a password needs a user name")
    if username is not None and scheme == "smtp":
        raise ValueError(
            "credentials need smtp+starttls:// or smtps:// (smtp:// would send them in clear)"
        )
    try:
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise ValueError("its query string is malformed") from None
    if set(query) - {"ca_file", "timeout"}:
        # Not named: even a parameter's name is part of the value, which is never shown.
        raise ValueError("unknown query parameter (only ca_file and timeout are known)")
    if any(len(values) > 1 for values in query.values()):
        raise ValueError("a query parameter is given twice")
    ca_file = query.get("ca_file", [None])[0]
    if ca_file is not None and not files:
        raise ValueError(
            "ca_file names a file on the service's host, which only the operator's URL "
            "(smtp_url_env) may do"
        )
    if ca_file is not None and (not ca_file or scheme == "smtp"):
        raise ValueError("ca_file needs a path and a TLS scheme (smtp+starttls or smtps)")
    timeout = DEFAULT_TIMEOUT
    if "timeout" in query:
        try:
            timeout = float(query["timeout"][0])
        except ValueError:
            raise ValueError("timeout must be a number of seconds") from None
        if not 0 < timeout <= MAX_TIMEOUT:  # also refuses NaN
            raise ValueError(f"timeout must be more than 0 and at most {MAX_TIMEOUT:g} seconds")
    return SmtpSettings(
        scheme=scheme,
        host=parts.hostname,
        port=port if port is not None else _DEFAULT_PORTS[scheme],
        username=username,
        password=password,
        ca_file=ca_file,
        timeout=timeout,
    )


def smtp_settings_from_env(env: str, environ: Mapping[str, str]) -> SmtpSettings:
    """The parsed SMTP URL held by ``environ[env]``.

    Raises ``RunPermanentError`` naming ``env`` (never quoting its value) when the variable
    is unset, empty or not one of the URL forms.
    """
    value = environ.get(env, "").strip()
    if not value:
        raise RunPermanentError(f"environment variable {env} (the SMTP URL) is not set")
    try:
        return parse_smtp_url(value)
    except ValueError as exc:
        raise RunPermanentError(
            f"environment variable {env} does not hold a valid SMTP URL: {exc}"
        ) from None  # the cause could carry the value


def smtp_settings_from_secret(name: str, secrets: Mapping[str, str]) -> SmtpSettings:
    """The parsed SMTP URL held by the stored secret ``name`` (resolved into ``secrets``).

    Raises ``RunPermanentError`` naming the secret (never quoting its value) when it was not
    resolved or is not one of the URL forms, or names a ``ca_file``: a stored secret is the
    owner's, and an owner may not make the service open a path of its host.
    """
    value = secrets.get(name, "").strip()
    if not value:
        raise RunPermanentError(f"secret {name!r} (the SMTP URL) was not resolved or is empty")
    try:
        return parse_smtp_url(value, files=False)
    except ValueError as exc:
        raise RunPermanentError(
            f"secret {name!r} does not hold a valid SMTP URL: {exc}"
        ) from None  # the cause could carry the value
