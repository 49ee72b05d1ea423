"""Tenants' stored secrets: write-only values, encrypted at rest, referenced by name.

An owner stores a secret (an LLM key, a webhook signing secret, an SMTP URL) under a name; its
runner and notify configurations refer to it as ``{"secret": NAME}`` (a command's ``env``
value, a webhook's ``secret``) or through ``api_key_secret`` (openai runner) and
``smtp_url_secret`` (email channel). The value is never returned by the API, never in a run's
payload, output or error, and never in a log line; the engine resolves the references of one
attempt or delivery with one query and hands the values to the runner or notifier alone.

Encryption: Fernet (``cryptography``: AES-128-CBC with HMAC-SHA256, a versioned token with
its own IV), through ``MultiFernet`` so the operator can rotate: ``AGENTCRON_SECRETS_KEY`` is a
comma-separated list of keys, the first encrypts and every one decrypts. Fernet has no
associated data, so the owner and the name are encrypted with the value
(``v1 NUL owner NUL name NUL value``) and checked on decryption: the HMAC makes them
unforgeable, so a row copied to another owner or renamed does not decrypt. Owner names, secret
names and values cannot hold NUL, so the split is unambiguous. (AES-GCM with associated data
would bind them without the prefix, but then nonces, the token format and key rotation would
be ours to write; Fernet and MultiFernet give all three, audited.)

What the key protects: a copy of the database (a backup, a dump, a replica, SQL read access)
reveals no value. What it does not: the service process holds the key, so code running as the
service's user (a ``command`` or ``python`` agent included) can read it.

- ``references``: names, values and references, and the check that a referenced secret exists;
- ``keyring``: ``Keyring``, the operator's keys and the token format above;
- ``store``: put, list, delete and re-encrypt the stored secrets;
- ``resolution``: ``load`` and ``resolve``, the values of one attempt or delivery;
- ``redaction``: ``redact`` and ``redact_json``, the values taken out of what is recorded.
"""
