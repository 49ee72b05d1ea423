"""``EmailNotifier``: the ``email`` channel type, as the notify registry knows it.

It owns the channel's configuration (its keys, their validation, the ``target`` shown) and a
delivery from start to end: reading the SMTP URL at each delivery, judging the server's host
(a URL from a stored secret is the owner's choice, judged like a webhook's), composing the
message, sending it to the recipients still pending, and remembering which recipients accepted
a partly deferred delivery so that its retry goes to the others alone.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from agentcron.core.errors import InvalidSchedule, RunPermanentError
from agentcron.core.extras import have, missing
from agentcron.core.logging import get_logger
from agentcron.core.notify.base import ENV_NAME, DeliveryRequest, check_keys, required_string
from agentcron.core.notify.email.message import compose_message
from agentcron.core.notify.email.url import (
    SmtpSettings,
    smtp_settings_from_env,
    smtp_settings_from_secret,
)
from agentcron.core.notify.ssrf import (
    ALLOW_HINT,
    IPAddress,
    PrivateDestination,
    Resolver,
    resolve,
    vet,
)
from agentcron.core.secrets.references import check_name

log = get_logger(__name__)

# A channel's own keys, besides the "type" and "notify_on" every channel has.
FIELDS = frozenset({"to", "smtp_url_env", "smtp_url_secret", "from"})
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
# Deliveries whose recipients were only partly accepted, remembered so that the retry of the
# same delivery goes to the deferred recipients alone. Bounded: an entry outlives its retries
# only when the process stops retrying (a permanent error pops it too), so a few hundred
# suffice; the oldest is dropped first.
_PARTIAL_MEMORY = 512


class EmailNotifier:
    """``{"type": "email", "to": [addr], "smtp_url_env": "ENV_NAME", "from": addr}``, or with
    ``"smtp_url_secret": "NAME"`` (a stored secret holding the URL) instead of ``smtp_url_env``.

    See the docstring of ``core.notify.email`` for the URL forms, the classification of
    failures and the idempotency of ``deliver``. ``resolver`` maps ``(host, port)`` to
    addresses (``core.notify.ssrf.resolve``); tests pass one to give a name an address.
    """

    name = "email"

    def __init__(self, *, resolver: Resolver = resolve) -> None:
        self.resolver = resolver
        # delivery id -> recipients that already accepted the message (see _PARTIAL_MEMORY).
        self._accepted: OrderedDict[str, frozenset[str]] = OrderedDict()

    def validate(
        self, channel: Mapping[str, Any], field: str, *, allow_private: bool
    ) -> dict[str, Any]:
        """The normalised channel, or ``InvalidSchedule`` naming ``<field>.<key>``; without
        the email extra (aiosmtplib), ``<field>.type``, saying which extra to install."""
        if not have("email"):
            raise InvalidSchedule(missing("email", "an email channel"), field=f"{field}.type")
        check_keys(channel, FIELDS, field)
        to = channel.get("to")
        if not isinstance(to, list) or not to or len(to) > 50:
            raise InvalidSchedule("to must be a list of 1-50 addresses", field=f"{field}.to")
        for index, address in enumerate(to):
            if not isinstance(address, str) or not _EMAIL.match(address):
                raise InvalidSchedule("not an email address", field=f"{field}.to.{index}")
        source: dict[str, str]
        if "smtp_url_secret" in channel:
            if "smtp_url_env" in channel:
                raise InvalidSchedule(
                    "give smtp_url_env or smtp_url_secret, not both",
                    field=f"{field}.smtp_url_secret",
                )
            name = check_name(channel["smtp_url_secret"], f"{field}.smtp_url_secret")
            source = {"smtp_url_secret": name}
        else:
            env = required_string(channel, "smtp_url_env", field, max_len=200)
            if not ENV_NAME.match(env):
                raise InvalidSchedule(
                    "must name an environment variable", field=f"{field}.smtp_url_env"
                )
            source = {"smtp_url_env": env}
        sender = required_string(channel, "from", field, max_len=320)
        if not _EMAIL.match(sender):
            raise InvalidSchedule("not an email address", field=f"{field}.from")
        return {"type": self.name, "to": list(to), **source, "from": sender}

    def target(self, channel: Mapping[str, Any]) -> str:
        """``mailto:`` and the recipients: where the mail goes, without the server's URL."""
        return "mailto:" + ",".join(channel["to"])

    async def deliver(self, request: DeliveryRequest) -> None:
        """Send the run as one mail to every recipient of the channel.

        After a normal return every recipient's server accepted the message. Raises
        ``RunPermanentError`` or ``EmailDeferred`` as listed in ``core.notify.email``. The
        password is used for AUTH only: it is in no message, log line or exception text.

        The server's host is resolved once and the connection goes to an address of that
        answer. A URL from a stored secret is the owner's choice: unless
        ``request.allow_private``, a host that is or resolves to a non-public address is
        refused (``RunPermanentError``) before any connection, as a webhook's is. The
        operator's URL (``smtp_url_env``) may name any address, a relay on loopback included.
        """
        if not have("email"):  # a channel saved where the extra was installed
            raise RunPermanentError(missing("email", "an email channel"))
        # Imported here: the SMTP client is the email extra's (aiosmtplib).
        from agentcron.core.notify.email.transport import (
            EmailDeferred,
            classify,
            safe_text,
            send,
            tls_context,
        )

        # Read at each delivery (not at start-up) so a rotated secret applies to the next one.
        if "smtp_url_secret" in request.channel:
            name = str(request.channel["smtp_url_secret"])
            env = f"secret {name!r}"
            settings = smtp_settings_from_secret(name, request.secrets)
            judged = not request.allow_private
        else:
            env = str(request.channel["smtp_url_env"])
            settings = smtp_settings_from_env(env, os.environ)
            judged = False
        sender = str(request.channel["from"])
        recipients = list(dict.fromkeys(str(to) for to in request.channel["to"]))
        already = self._accepted.get(request.delivery_id, frozenset())
        pending = [to for to in recipients if to not in already]
        if not pending:  # every recipient took it on an earlier attempt
            self._accepted.pop(request.delivery_id, None)
            return
        message = compose_message(request.body, request.delivery_id, sender, recipients)
        context = await tls_context(settings, env)  # a bad ca_file is final: said first
        addresses = await self._addresses(settings, env, judged)
        secrets = [settings.password] if settings.password else []
        try:
            refused = await send(settings, addresses, context, message, sender, pending)
        except Exception as exc:
            failure = classify(exc, settings, secrets)
            if isinstance(failure, RunPermanentError):
                self._accepted.pop(request.delivery_id, None)
            raise failure from exc
        accepted = already | {to for to in pending if to not in refused}
        if not refused:
            self._accepted.pop(request.delivery_id, None)
            log.info(
                "email_sent",
                delivery_id=request.delivery_id,
                server=settings.address,
                recipients=len(pending),
            )
            return
        detail = "; ".join(
            f"{to} ({safe_text(f'{code} {text}', secrets)})" for to, (code, text) in refused.items()
        )
        summary = f"{len(accepted)} of {len(recipients)} recipients accepted the mail"
        if any(not 500 <= code < 600 for code, _ in refused.values()):
            self._remember(request.delivery_id, frozenset(accepted))
            raise EmailDeferred(f"{summary}; deferred or refused by {settings.address}: {detail}")
        self._accepted.pop(request.delivery_id, None)
        raise RunPermanentError(f"{summary}; refused by {settings.address}: {detail}")

    async def _addresses(self, settings: SmtpSettings, env: str, judged: bool) -> list[IPAddress]:
        """The addresses of the server's host (``vet``): judged when the URL is the owner's."""
        from agentcron.core.notify.email.transport import EmailDeferred

        try:
            return await vet(
                settings.host, settings.port, allow_private=not judged, resolver=self.resolver
            )
        except PrivateDestination as exc:
            raise RunPermanentError(
                f"the SMTP server of {env} is refused: {exc}; {ALLOW_HINT}"
            ) from None
        except OSError as exc:
            raise EmailDeferred(f"cannot resolve {settings.host} ({exc})") from exc

    def _remember(self, delivery_id: str, accepted: frozenset[str]) -> None:
        self._accepted[delivery_id] = accepted
        self._accepted.move_to_end(delivery_id)
        while len(self._accepted) > _PARTIAL_MEMORY:
            self._accepted.popitem(last=False)
