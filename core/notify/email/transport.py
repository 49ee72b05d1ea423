"""The SMTP exchange of an ``email`` channel: the TLS context, handing a message to the
server, and the classification of what went wrong.

It owns the wire (``aiosmtplib``, over a connection to an address judged by
``core.notify.ssrf.vet``) and the mapping of every failure to the ``Notifier`` contract listed
in ``core.notify.email``: ``RunPermanentError`` for what retrying the same server cannot mend,
``EmailDeferred`` for the rest. A server's words reach an error only when they are an SMTP
reply, and only through ``safe_text``, with the password blanked out: a service that does not
speak SMTP is named as such, never quoted.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable
from email.message import EmailMessage

import aiosmtplib

from agentcron.core.errors import RunPermanentError
from agentcron.core.notify.email.url import SmtpSettings
from agentcron.core.notify.outbound import open_pinned, os_failure
from agentcron.core.notify.ssrf import IPAddress

_ERROR_TEXT_MAX = 300


class EmailDeferred(Exception):
    """The mail could not be handed over now (SMTP says "deferred"); a later attempt may succeed.

    Transient by the ``Notifier`` contract (it is not a ``RunPermanentError``). The message
    names the server and the reply, never the credentials; the driver exception is the
    ``__cause__``.
    """


async def tls_context(settings: SmtpSettings, env: str) -> ssl.SSLContext | None:
    """The verifying TLS context for a TLS scheme, None for plain ``smtp://``."""
    if settings.scheme == "smtp":
        return None
    try:
        # Off the loop: loading the system store or a CA bundle reads files.
        return await asyncio.to_thread(ssl.create_default_context, cafile=settings.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise RunPermanentError(
            f"the ca_file given in {env} cannot be loaded ({type(exc).__name__})"
        ) from exc


async def send(
    settings: SmtpSettings,
    addresses: list[IPAddress],
    context: ssl.SSLContext | None,
    message: EmailMessage,
    sender: str,
    recipients: list[str],
) -> dict[str, tuple[int, str]]:
    """Hand ``message`` to the server at the first of ``addresses`` (the server's host,
    resolved and judged) that accepts a connection; return the refused recipients with their
    replies. TLS verifies the certificate against ``settings.host``, not the address.

    Raises the driver's exception (or the connection's ``OSError``) when the whole transaction
    fails (every recipient refused included); the caller classifies it.
    """
    sock = await open_pinned(addresses, settings.port, settings.timeout)
    try:
        client = aiosmtplib.SMTP(
            # The name is what TLS checks the certificate against; the socket is already
            # connected to the address that was judged, so aiosmtplib resolves nothing.
            hostname=settings.host,
            sock=sock,
            username=settings.username,
            password=settings.password,
            use_tls=settings.scheme == "smtps",
            # True makes a missing STARTTLS an error instead of a silent plain session.
            start_tls=settings.scheme == "smtp+starttls",
            tls_context=context,
            timeout=settings.timeout,
        )
    except BaseException:
        sock.close()
        raise
    # From here the socket is the connection's transport's, which closes it (on any failure
    # of the connection too): closing it under a transport still closing would leak that.
    async with client:  # connect, STARTTLS, AUTH; QUIT on the way out
        errors, _ = await client.send_message(message, sender=sender, recipients=recipients)
    return {to: (reply.code, reply.message) for to, reply in errors.items()}


def classify(
    exc: BaseException, settings: SmtpSettings, secrets: Iterable[str] = ()
) -> RunPermanentError | EmailDeferred:
    """Map a failure of the SMTP exchange to the ``Notifier`` contract (``core.notify.email``).

    The returned error's message names the server and what it said, with every string in
    ``secrets`` blanked out; raise it ``from exc``.
    """
    where = settings.address
    verify = _untrusted_certificate(exc)
    if verify is not None:
        reason = verify.verify_message or "verification failed"
        return RunPermanentError(f"the TLS certificate of {where} is not trusted: {reason}")
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        codes = [refusal.code for refusal in exc.recipients]
        detail = "; ".join(
            f"{r.recipient} ({safe_text(f'{r.code} {r.message}', secrets)})" for r in exc.recipients
        )
        if all(500 <= code < 600 for code in codes):
            return RunPermanentError(f"{where} refused every recipient: {detail}")
        return EmailDeferred(f"{where} deferred or refused every recipient: {detail}")
    if isinstance(exc, aiosmtplib.SMTPResponseException) and not 200 <= exc.code < 600:
        # Not an SMTP reply (aiosmtplib's code -1): whatever answered is some other service,
        # and its banner is its own business.
        return EmailDeferred(f"{where} did not answer as an SMTP server")
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        stage = _stage(exc)
        said = safe_text(f"{exc.code} {exc.message}", secrets)
        text = f"{where} answered {said} to {stage}"
        if 500 <= exc.code < 600:
            return RunPermanentError(text)
        return EmailDeferred(text)  # 4xx, or a reply too garbled to carry a code
    if isinstance(exc, TimeoutError):  # aiosmtplib's timeouts are TimeoutErrors too
        return EmailDeferred(f"timed out talking to {where} (after {settings.timeout:g} s)")
    # aiosmtplib's connect and disconnect errors are ConnectionErrors; a TLS failure other
    # than an untrusted certificate (checked above) is an OSError as well.
    if isinstance(exc, OSError):
        root = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
        said = safe_text(os_failure(root), secrets)
        return EmailDeferred(f"cannot reach or lost the connection to {where}: {said}")
    if isinstance(exc, aiosmtplib.SMTPException):
        # What is left is a capability the URL needs and the server lacks (STARTTLS, AUTH,
        # SMTPUTF8): retrying the same server cannot help.
        said = safe_text(str(exc), secrets)
        return RunPermanentError(f"{where} cannot take this mail: {said}")
    # Unknown failures stay transient by contract, with the type only: their text is unknown.
    return EmailDeferred(f"unexpected {type(exc).__name__} while sending to {where}")


def _stage(exc: aiosmtplib.SMTPResponseException) -> str:
    """The SMTP step a reply answered, for a readable error."""
    stages: tuple[tuple[type[Exception], str], ...] = (
        (aiosmtplib.SMTPAuthenticationError, "AUTH"),
        (aiosmtplib.SMTPSenderRefused, "MAIL FROM"),
        (aiosmtplib.SMTPRecipientRefused, "RCPT TO"),
        (aiosmtplib.SMTPDataError, "DATA"),
        (aiosmtplib.SMTPHeloError, "EHLO"),
        (aiosmtplib.SMTPConnectResponseError, "the connection"),
    )
    return next((name for kind, name in stages if isinstance(exc, kind)), "a command")


def _untrusted_certificate(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate failure in ``exc``'s cause/context chain, or None.

    aiosmtplib wraps it in ``SMTPConnectError`` for ``smtps`` and lets it through as is after
    STARTTLS; either way it is a configuration problem, not a passing one.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLCertVerificationError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def safe_text(text: str, secrets: Iterable[str]) -> str:
    """Server or driver text fit for a delivery record: secrets blanked, one line, bounded."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = " ".join(text.split())
    return text if len(text) <= _ERROR_TEXT_MAX else text[: _ERROR_TEXT_MAX - 1] + "…"
