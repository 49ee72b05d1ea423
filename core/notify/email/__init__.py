"""The ``email`` channel: the delivery as a plain-text and HTML mail over SMTP.

The channel names where its SMTP URL is: an environment variable of the service
(``smtp_url_env``) or a stored secret of the schedule's owner (``smtp_url_secret``,
``core.secrets``), exactly one of the two. Either is read at every delivery, so a rotated
credential applies without a restart, and the URL is never stored on the channel, logged or
shown: errors name the variable or the secret, never its value. The URL forms are:

- ``smtp://[user[:password]@]host[:port]``: plain SMTP, port 25 by default, never upgraded.
  Credentials are refused on this scheme: they would cross the network in clear text.
- ``smtp+starttls://[user[:password]@]host[:port]``: port 587 by default; the server must offer
  STARTTLS and the upgrade must succeed before anything else (including AUTH) is sent.
- ``smtps://[user[:password]@]host[:port]``: port 465 by default; TLS from the first byte.

There is deliberately no opportunistic upgrade of ``smtp://``: an upgrade a man in the middle
can strip by hiding the STARTTLS capability protects nothing, and a relay whose certificate
cannot be verified would turn a working plain setup into failed deliveries. The scheme says
exactly what happens on the wire.

``user`` and ``password`` are percent-decoded (``%40`` for ``@``, ``%3A`` for ``:``). Query
parameters: ``ca_file=/path/ca.pem`` trusts the CA certificates in that PEM file instead of the
system store (TLS schemes only; for a private CA; only in the operator's URL, ``smtp_url_env``:
a stored secret may not name a file of the service's host), ``timeout=<seconds>`` bounds
connecting and each SMTP command (default 30, at most 300). Unknown parameters are refused, so
a misspelt ``ca_file`` cannot silently fall back to the system store. Certificates and host
names are always verified.

The server's host is resolved once per delivery and the connection goes to an address of that
answer (``core.notify.ssrf.vet``, ``core.notify.outbound``). A URL in a stored secret is the
owner's choice and is judged as a webhook's URL is: unless ``AGENTCRON_ALLOW_PRIVATE_WEBHOOKS``
is set, a host that is or resolves to a loopback, private, link-local or other non-public
address is refused before any connection. The operator's URL may name any address.

Outcomes, per the ``Notifier`` contract:

- ``RunPermanentError``: the variable (or secret) is missing or not a valid URL; a stored
  URL's host is not public; the CA file cannot be loaded; the server's certificate is not
  trusted; the server lacks STARTTLS, AUTH or SMTPUTF8 when needed; any 5xx reply
  (authentication refused, sender or recipient refused, message rejected).
- ``EmailDeferred`` (transient, retried with the shared ``RetryPolicy``): the host does not
  resolve, the server cannot be reached, the connection drops or times out, what answers is not
  an SMTP server (named as such, never quoted), any 4xx reply (greylisting, mailbox busy,
  temporary authentication failure, 421 on connect).

A delivery is idempotent by ``delivery_id``: the ``Message-ID`` and ``Date`` headers are
derived from the run, so every retry sends the same message and a receiver can de-duplicate.
When only some recipients are deferred, the retry in this process goes to those alone.

- ``url``: ``SmtpSettings``, the URL forms above and reading the URL from the environment or
  a secret;
- ``message``: the mail of one delivery (``compose_message``);
- ``transport``: the SMTP exchange and the classification of its failures (``classify``);
- ``notifier``: ``EmailNotifier``, the channel's validation and its deliveries.
"""
