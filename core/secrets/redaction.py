"""Redaction: resolved secret values replaced by ``[secret:NAME]`` in a run's output, result
and errors.

It owns ``redact``: whole values, longest first, and the leading fragment a tail cut leaves of
a value; values too short to redact without mangling the text are left alone. ``redact_json``
does the same to every string of a JSON value (a run's result).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, overload

# Shorter values are not redacted from output: replacing every "abc" in a text would mangle it
# and would tell a reader the value anyway.
MIN_REDACTED_CHARS = 4
# A runner keeps only the tail of a long output, so a value can be cut at its start; a leading
# fragment at least this long that ends the value is redacted too (shorter ones are noise).
MIN_FRAGMENT_CHARS = 8
_FRAGMENT_TRIES = 64  # candidate cut positions examined per value, bounding the cost


@overload
def redact(text: str, secrets: Mapping[str, str]) -> str: ...
@overload
def redact(text: None, secrets: Mapping[str, str]) -> None: ...
@overload
def redact(text: str | None, secrets: Mapping[str, str]) -> str | None: ...


def redact(text: str | None, secrets: Mapping[str, str]) -> str | None:
    """``text`` with every value of ``secrets`` (of ``MIN_REDACTED_CHARS`` or more) replaced
    by ``[secret:NAME]``, and a leading fragment that ends a value (what a tail cut leaves of
    it, ``MIN_FRAGMENT_CHARS`` or more) too. Longest values first, so a value that contains
    another is replaced whole."""
    if not text or not secrets:
        return text
    ordered = sorted(secrets.items(), key=lambda item: len(item[1]), reverse=True)
    for name, value in ordered:
        if len(value) >= MIN_REDACTED_CHARS:
            text = text.replace(value, f"[secret:{name}]")
    for name, value in ordered:
        text = _redact_leading_fragment(text, name, value)
    return text


def _redact_leading_fragment(text: str, name: str, value: str) -> str:
    if len(value) <= MIN_FRAGMENT_CHARS:
        return text
    head = text[:MIN_FRAGMENT_CHARS]
    if len(head) < MIN_FRAGMENT_CHARS:
        return text
    # Smallest start first: the longest fragment of the value that the text begins with.
    start = value.find(head, 1)
    for _ in range(_FRAGMENT_TRIES):
        if start < 0:
            break
        fragment = value[start:]
        if text.startswith(fragment):
            return f"[secret:{name}]" + text[len(fragment) :]
        start = value.find(head, start + 1)
    return text


def redact_json(value: Any, secrets: Mapping[str, str]) -> Any:
    """A JSON value with ``redact`` applied to every string in it, the keys of its objects
    included; numbers, booleans and null as they are."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, Mapping):
        return {
            redact(str(key), secrets): redact_json(item, secrets) for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact_json(item, secrets) for item in value]
    return value
