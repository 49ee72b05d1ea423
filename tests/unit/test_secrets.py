"""core.secrets without a database: the keyring and its binding, references, redaction; the
command runner's and the openai runner's side of references; console logs without locals."""

from __future__ import annotations

import io
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from agentcron.core.errors import InvalidSchedule, StartupError
from agentcron.core.logging import configure_logging, get_logger
from agentcron.core.notify import masked_channels, validate_channels
from agentcron.core.runners import validate_runner
from agentcron.core.runners.base import RunOutcome
from agentcron.core.runners.command.config import CommandRunnerType
from agentcron.core.secrets.keyring import Keyring, SecretUnreadable
from agentcron.core.secrets.redaction import redact, redact_json
from agentcron.core.secrets.references import check_name, check_value
from agentcron.core.secrets.resolution import referenced_secrets, secret_references
from agentcron.core.storage.models import Run
from agentcron.web.engine.attempt import Verdict
from tests.factories import run_request

K1, K2 = Fernet.generate_key().decode(), Fernet.generate_key().decode()
VALUE = "sk-live-4f9a1c0e8b7d6a5f"


# -- the keyring ------------------------------------------------------------------------------


def test_a_token_decrypts_only_for_its_owner_and_name() -> None:
    keyring = Keyring([K1])
    token = keyring.encrypt("alice", "openai", VALUE)
    assert VALUE not in token and "alice" not in token and "openai" not in token
    assert keyring.decrypt("alice", "openai", token) == VALUE
    for owner, name in (("bob", "openai"), ("alice", "other"), ("alic", "eopenai")):
        with pytest.raises(SecretUnreadable, match="cannot be decrypted"):
            keyring.decrypt(owner, name, token)
    with pytest.raises(SecretUnreadable):
        keyring.decrypt("alice", "openai", token[:-4] + "AAAA")  # altered
    with pytest.raises(SecretUnreadable):
        keyring.decrypt("alice", "openai", "not a token ☕")


def test_the_first_key_encrypts_and_every_key_decrypts() -> None:
    old = Keyring([K1]).encrypt("alice", "a", "one")
    both = Keyring.from_setting(f" {K2} , {K1} ")
    assert both is not None and both.size == 2
    assert both.decrypt("alice", "a", old) == "one"
    new = both.encrypt("alice", "b", "two")
    assert Keyring([K2]).decrypt("alice", "b", new) == "two"
    with pytest.raises(SecretUnreadable):
        Keyring([K1]).decrypt("alice", "b", new)
    assert Keyring([K2]).decrypt("alice", "a", both.rotate(old)) == "one"


@pytest.mark.parametrize("setting", [None, "", "  ", SecretStr("")])
def test_no_key_is_no_keyring(setting: Any) -> None:
    assert Keyring.from_setting(setting) is None


@pytest.mark.parametrize(
    ("setting", "which"),
    [("not-a-key", "key 1 of 1"), (f"{K1},short", "key 2 of 2"), ("ключ", "key 1 of 1")],
    # Ids without the random key: every pytest-xdist worker must collect the same names.
    ids=["not-base64", "second-short", "not-ascii"],
)
def test_a_malformed_key_is_a_startup_error_that_never_quotes_it(setting: str, which: str) -> None:
    with pytest.raises(StartupError) as caught:
        Keyring.from_setting(SecretStr(setting))
    message = caught.value.message
    assert "AGENTCRON_SECRETS_KEY" in message and which in message
    assert "agentcron secrets-key" in message
    for part in setting.split(","):
        assert part not in message
    assert caught.value.__cause__ is None
    with pytest.raises(StartupError, match="lists no key"):
        Keyring.from_setting(",")


def test_a_keyring_does_not_show_its_keys() -> None:
    keyring = Keyring([K1, K2])
    assert K1 not in repr(keyring) and K2 not in repr(keyring)


# -- names, values, references ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "OPENAI_KEY", "hook.prod-2", "9" * 100])
def test_good_names(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "-a", ".a", "a b", "a/b", "é", "a\x00", "a" * 101, 7])
def test_bad_names_name_the_field(name: Any) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        check_name(name, "runner.api_key_secret")
    assert caught.value.field == "runner.api_key_secret"


def test_values_are_bounded_and_have_no_nul() -> None:
    assert check_value("é" * 32_768) == "é" * 32_768  # 64 KiB as UTF-8 exactly
    for value in ("", "a\x00b", "é" * 32_769, 5):
        with pytest.raises(InvalidSchedule) as caught:
            check_value(value)
        assert caught.value.field == "value"


def test_references_are_found_with_their_fields() -> None:
    runner = {
        "type": "command",
        "argv": ["agent"],
        "env": {"A": "plain", "B": {"secret": "b"}, "C": {"secret": "c"}},
    }
    notify = [
        {"type": "webhook", "url": "https://x.example", "secret": {"secret": "hook"}},
        {"type": "webhook", "url": "https://x.example", "secret": "whsec_literal"},
        {"type": "email", "to": ["a@b.c"], "from": "a@b.c", "smtp_url_secret": "smtp"},
    ]
    assert secret_references(runner, notify) == [
        ("runner.env.B", "b"),
        ("runner.env.C", "c"),
        ("notify.0.secret", "hook"),
        ("notify.2.smtp_url_secret", "smtp"),
    ]
    openai = {"type": "openai", "api_key_secret": "llm", "model": "m"}
    assert referenced_secrets(openai, None) == {"llm"}
    # Not references: a dict with more keys, a non-string name, a name key below the top.
    assert secret_references({"x": {"secret": "a", "more": 1}, "y": {"secret": 5}}, []) == []
    assert secret_references({"nested": {"api_key_secret": "z"}}, None) == []


def test_command_env_accepts_references_and_refuses_other_values() -> None:
    config = {"type": "command", "argv": ["a"], "env": {"K": {"secret": "k"}, "P": "v"}}
    assert validate_runner(config)["env"] == {"K": {"secret": "k"}, "P": "v"}
    for value, field in (
        ({"secret": "bad name"}, "runner.env.K"),
        ({"secret": "k", "x": 1}, "runner.env.K"),
        ({"name": "k"}, "runner.env.K"),
        (5, "runner.env.K"),
    ):
        with pytest.raises(InvalidSchedule) as caught:
            validate_runner({**config, "env": {"K": value}})
        assert caught.value.field == field


def test_the_command_runner_puts_the_resolved_value_in_the_environment(tmp_path: Path) -> None:
    runner = CommandRunnerType().build(
        {"type": "command", "argv": ["a"], "env": {"K": {"secret": "k"}, "P": "plain"}}
    )
    request = run_request(workdir=tmp_path, secrets={"k": VALUE})
    env = runner._environment(request, tmp_path, str(tmp_path))  # type: ignore[attr-defined]
    assert env["K"] == VALUE and env["P"] == "plain"
    assert VALUE not in repr(request)


def test_openai_takes_exactly_one_key_source() -> None:
    base = {"type": "openai", "base_url": "https://llm.example/v1", "model": "m"}
    assert validate_runner({**base, "api_key_secret": "llm"})["api_key_secret"] == "llm"
    for extra, field in (
        ({"api_key_secret": "llm", "api_key_env": "K"}, "runner.api_key_secret"),
        ({"api_key_secret": "no such/name"}, "runner.api_key_secret"),
        ({"api_key_secret": {"secret": "llm"}}, "runner.api_key_secret"),
    ):
        with pytest.raises(InvalidSchedule) as caught:
            validate_runner({**base, **extra})
        assert caught.value.field == field


def test_channels_accept_references_and_show_them_as_they_are() -> None:
    webhook = {"type": "webhook", "url": "https://hooks.example.com/x", "secret": {"secret": "h"}}
    email = {"type": "email", "to": ["a@b.example"], "from": "c@d.example", "smtp_url_secret": "s"}
    channels = validate_channels([webhook, email])
    assert channels[0]["secret"] == {"secret": "h"}
    assert channels[1]["smtp_url_secret"] == "s" and "smtp_url_env" not in channels[1]
    assert masked_channels(channels)[0]["secret"] == {"secret": "h"}
    for channel, field in (
        ({**webhook, "secret": {"secret": "h", "x": 1}}, "notify.0.secret"),
        ({**email, "smtp_url_env": "SMTP_URL"}, "notify.0.smtp_url_secret"),
        ({**email, "smtp_url_secret": ""}, "notify.0.smtp_url_secret"),
    ):
        with pytest.raises(InvalidSchedule) as caught:
            validate_channels([channel])
        assert caught.value.field == field


# -- redaction ----------------------------------------------------------------------------------


KEPT_TAIL = VALUE[5:] + "\nrest of the output"  # a runner keeps the tail of a long output


@pytest.mark.parametrize(
    ("text", "secrets", "redacted"),
    [
        (f"key={VALUE}\nagain {VALUE}.", {"o": VALUE}, "key=[secret:o]\nagain [secret:o]."),
        (None, {"o": VALUE}, None),
        ("", {"o": VALUE}, ""),
        ("abc abcd", {"three": "abc", "four": "abcd"}, "abc [secret:four]"),  # 3 is too short
        ("Bearer tok-1234-xyz", {"in": "tok-1234", "out": "Bearer tok-1234-xyz"}, "[secret:out]"),
        (KEPT_TAIL, {"o": VALUE}, "[secret:o]\nrest of the output"),  # a value cut at its start
        (VALUE[-5:] + " more", {"o": VALUE}, VALUE[-5:] + " more"),  # too short a fragment
    ],
    ids=["every-occurrence", "none", "empty", "short", "longest-first", "cut-value", "fragment"],
)
def test_every_value_is_replaced_by_its_name(
    text: str | None, secrets: dict[str, str], redacted: str | None
) -> None:
    assert redact(text, secrets) == redacted


def test_every_string_of_a_result_is_redacted_keys_included() -> None:
    result = {"auth": f"Bearer {VALUE}", VALUE: [1, VALUE, {"ok": True}], "n": None}
    assert redact_json(result, {"openai": VALUE}) == {
        "auth": "Bearer [secret:openai]",
        "[secret:openai]": [1, "[secret:openai]", {"ok": True}],
        "n": None,
    }
    assert redact_json(None, {"openai": VALUE}) is None


def test_an_attempts_result_is_redacted_before_it_is_recorded() -> None:
    verdict = Verdict(Run(), "/nonexistent", 10.0, "engine", uuid.uuid4())
    verdict.outcome = RunOutcome(output=VALUE, result={"session": "s-1", "token": VALUE})
    # What a stopped attempt keeps (a cancelled run's output), and an error quoting the value.
    verdict.partial, verdict.error = f"working with {VALUE}", f"exit 1: {VALUE} refused"
    verdict.redact({"openai": VALUE})
    assert verdict.outcome is not None
    assert verdict.outcome.output == "[secret:openai]"
    assert verdict.outcome.result == {"session": "s-1", "token": "[secret:openai]"}
    assert verdict.partial == "working with [secret:openai]"
    assert verdict.error == "exit 1: [secret:openai] refused"


# -- logs ---------------------------------------------------------------------------------------


def test_console_tracebacks_show_no_local_variables(restored_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("console", "INFO")
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)

    def fail(value: str) -> None:
        raise RuntimeError("boom")

    try:
        fail(VALUE)
    except RuntimeError:
        get_logger("test").exception("failed")
    text = stream.getvalue()
    assert "boom" in text and VALUE not in text
