"""The operator's key: ``Keyring``, the encryption of a value bound to its owner and name.

It owns ``AGENTCRON_SECRETS_KEY`` (parsing the comma-separated list, refusing a malformed key
without quoting it), making a fresh key, and the token format described in ``core.secrets``:
encrypting under the first key, decrypting under any, rotating to the first, and
``SecretUnreadable`` when a token was not made for that owner and name under any key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import SecretStr

from agentcron.core.errors import RunPermanentError, StartupError
from agentcron.core.extras import require

if TYPE_CHECKING:
    from cryptography.fernet import MultiFernet

# Stored secrets are the secrets extra's (cryptography): imported in the functions that use
# it, after ``require``, so an install without it starts (and says so when a key is set).
_FEATURE = "stored secrets (AGENTCRON_SECRETS_KEY)"

KEY_SETTING = "AGENTCRON_SECRETS_KEY"
KEY_HINT = "make one with `agentcron secrets-key`"
_PLAINTEXT_VERSION = b"v1"
_SEP = b"\x00"


class SecretUnreadable(RunPermanentError):
    """A stored token does not decrypt under the configured keys for its owner and name."""


def generate_key() -> str:
    """A fresh random key for ``AGENTCRON_SECRETS_KEY``."""
    require("secrets", _FEATURE)
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode("ascii")


class Keyring:
    """The operator's keys: the first encrypts, every one decrypts (rotation).

    Tokens bind the value to its owner and name (see the module docstring). The keys are not
    in ``repr`` and no error message quotes them.
    """

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise ValueError("a keyring needs at least one key")
        require("secrets", _FEATURE)
        from cryptography.fernet import Fernet, MultiFernet

        self._fernet: MultiFernet = MultiFernet([Fernet(key.encode("ascii")) for key in keys])
        self.size = len(keys)

    def __repr__(self) -> str:
        return f"Keyring(keys={self.size})"

    @classmethod
    def from_setting(cls, setting: SecretStr | str | None) -> Keyring | None:
        """The keyring of ``AGENTCRON_SECRETS_KEY``; None when it is unset or blank.

        Raises ``StartupError`` saying which key of the list is malformed, never quoting it,
        or that the secrets extra is missing (``ExtraMissing``) when a key is set without it.
        """
        text = setting.get_secret_value() if isinstance(setting, SecretStr) else setting
        if text is None or not text.strip():
            return None
        keys = [part.strip() for part in text.split(",") if part.strip()]
        if not keys:
            raise StartupError(f"{KEY_SETTING} lists no key ({KEY_HINT})")
        require("secrets", _FEATURE)
        from cryptography.fernet import Fernet

        for position, key in enumerate(keys, start=1):
            try:
                Fernet(key.encode("ascii"))
            except (ValueError, UnicodeEncodeError):
                raise StartupError(
                    f"{KEY_SETTING} is not valid: key {position} of {len(keys)} is not a "
                    f"Fernet key (32 url-safe base64-encoded bytes; {KEY_HINT})"
                ) from None  # the cause would carry the key
        return cls(keys)

    def encrypt(self, owner: str, name: str, value: str) -> str:
        """The token stored for ``value`` as ``owner``'s secret ``name``."""
        plain = _SEP.join(
            (_PLAINTEXT_VERSION, owner.encode(), name.encode(), value.encode("utf-8"))
        )
        return self._fernet.encrypt(plain).decode("ascii")

    def decrypt(self, owner: str, name: str, token: str) -> str:
        """The value of ``token`` if it was made for ``owner``'s secret ``name`` under one of
        the keys; ``SecretUnreadable`` otherwise (wrong key, altered or moved row)."""
        from cryptography.fernet import InvalidToken

        try:
            plain = self._fernet.decrypt(token.encode("ascii"))
        except (InvalidToken, UnicodeEncodeError):
            raise SecretUnreadable(_unreadable(name)) from None
        parts = plain.split(_SEP, 3)
        if len(parts) != 4 or parts[:3] != [_PLAINTEXT_VERSION, owner.encode(), name.encode()]:
            raise SecretUnreadable(_unreadable(name))
        return parts[3].decode("utf-8")

    def rotate(self, token: str) -> str:
        """``token`` re-encrypted under the first key (same owner, name and value)."""
        from cryptography.fernet import InvalidToken

        try:
            return self._fernet.rotate(token.encode("ascii")).decode("ascii")
        except (InvalidToken, UnicodeEncodeError):
            raise SecretUnreadable("a stored secret does not decrypt under any key") from None


def _unreadable(name: str) -> str:
    return (
        f"secret {name!r} cannot be decrypted with {KEY_SETTING}: the key that stored it is "
        "no longer configured, or its row was altered"
    )
