"""What environment an agent process starts with: the builder alone, then from inside real
``command`` processes (unconfined and sandboxed), with secret-looking variables in the
service's own environment that must never reach them."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentcron.core.runners import build_runner, validate_runner
from agentcron.core.runners.base import CancelToken, RunRequest
from agentcron.core.runners.containment import DEFAULT_PATH, Containment, Sandbox, agent_environment
from tests.factories import run_request

# What the service's environment holds in production, and no agent may see.
SERVICE_SECRETS = {
    "AGENTCRON_DATABASE_URL": "postgresql+asyncpg://agentcron:hunter2-db@db.internal/prod",
    "OPENAI_API_KEY": "sk-test-0123456789abcdef0123456789abcdef",
    "DIGEST_API_KEY": "sk-test-digest-fedcba9876543210",
    "SMTP_URL": "smtps://mailer:hunter2-smtp@mail.internal",
}
METADATA = {
    "AGENTCRON_RUN_ID",
    "AGENTCRON_SCHEDULE_ID",
    "AGENTCRON_TASK_ID",
    "AGENTCRON_ATTEMPT",
    "AGENTCRON_TRIGGER",
    "AGENTCRON_DUE_AT",
    "AGENTCRON_INSTANCE_ID",
}
# Variables the shell itself sets in every process it runs (`env` is run by sh -c).
SHELL_OWN = {"PWD", "SHLVL", "_", "OLDPWD"}


# -- the builder ----------------------------------------------------------------------------


def test_only_the_documented_variables_are_taken_from_the_service() -> None:
    service = {
        "PATH": "/opt/bin:/usr/bin",
        "HOME": "/home/agentcron",
        "LANG": "de_DE.UTF-8",
        "LC_ALL": "de_DE.UTF-8",
        "TZ": "Europe/Berlin",
        "USER": "agentcron",
        **SERVICE_SECRETS,
    }
    env = agent_environment(service, home=Path("/data/tasks/alice/1"), tmpdir="/tmp/x")
    assert env == {
        "PATH": "/opt/bin:/usr/bin",
        "HOME": "/data/tasks/alice/1",
        "LANG": "de_DE.UTF-8",
        "LC_ALL": "de_DE.UTF-8",
        "TZ": "Europe/Berlin",
        "TMPDIR": "/tmp/x",
    }


def test_defaults_when_the_service_has_no_path_or_locale() -> None:
    env = agent_environment({"OPENAI_API_KEY": "sk-x"}, home=Path("/w"), tmpdir="/tmp")
    assert env == {"PATH": DEFAULT_PATH, "HOME": "/w", "LANG": "C.UTF-8", "TMPDIR": "/tmp"}


def test_passthrough_names_are_copied_and_missing_ones_left_out() -> None:
    service = {"PATH": "/usr/bin", "HTTPS_PROXY": "http://proxy:3128", **SERVICE_SECRETS}
    env = agent_environment(
        service, home=Path("/w"), tmpdir="/tmp", passthrough=("HTTPS_PROXY", "NOT_SET_ANYWHERE")
    )
    assert env["HTTPS_PROXY"] == "http://proxy:3128"
    assert "NOT_SET_ANYWHERE" not in env
    assert not set(SERVICE_SECRETS) & set(env)


# -- from inside a real process -------------------------------------------------------------


def request(workdir: Path, containment: Containment) -> RunRequest:
    return run_request(
        trigger="manual",
        due_at=datetime(2026, 1, 5, 8, 0, tzinfo=UTC),
        prompt="",
        workdir=workdir,
        instance_id="replica-7",
        containment=containment,
    )


def read_env(path: Path) -> dict[str, str]:
    """``env -0`` output: NUL-separated NAME=VALUE."""
    pairs = [item.partition("=") for item in path.read_text().split("\0") if item]
    return {name: value for name, _, value in pairs}


def is_dir(path: str) -> bool:
    return os.path.isdir(path)


async def env_inside(
    workdir: Path, containment: Containment, config_env: dict[str, str] | None = None
) -> tuple[RunRequest, dict[str, str], str]:
    """Run ``env -0 > env.txt`` as a command agent; its environment and the file's raw text."""
    config: dict[str, object] = {
        "type": "command",
        "argv": ["sh", "-c", 'env -0 > env.txt; printf %s "$TMPDIR" > tmpdir.txt'],
    }
    if config_env:
        config["env"] = config_env
    req = request(workdir, containment)
    await build_runner(validate_runner(config)).run(req, CancelToken())
    raw = (workdir / "env.txt").read_text()
    return req, read_env(workdir / "env.txt"), raw


@pytest.fixture
def service_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The service's environment with production-like secrets in it (restored afterwards)."""
    for name, value in SERVICE_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    return dict(os.environ)


@pytest.mark.parametrize("sandboxed", [False, True], ids=["unconfined", "sandboxed"])
async def test_an_agent_sees_none_of_the_service_environment(
    tmp_path: Path, service_env: dict[str, str], request: pytest.FixtureRequest, sandboxed: bool
) -> None:
    """Exactly the documented variables (and the shell's own), the run's metadata, and no value
    of the service's secrets anywhere; a runner's ``env`` applies last, and its ``LD_PRELOAD``
    never loads into bubblewrap."""
    workdir = tmp_path / "data" / "tasks" / "alice" / "s1"
    sandbox = Sandbox(request.getfixturevalue("bwrap"), tmp_path / "data") if sandboxed else None
    containment = Containment(agent_env=("DIGEST_API_KEY",), sandbox=sandbox)
    config_env = {"LD_PRELOAD": "", "LANG": "fr_FR.UTF-8", "MODEL": "small"}
    req, env, raw = await env_inside(workdir, containment, config_env)
    assert env.pop("DIGEST_API_KEY") == SERVICE_SECRETS["DIGEST_API_KEY"]  # passed through
    raw = raw.replace(SERVICE_SECRETS["DIGEST_API_KEY"], "")
    documented = {"PATH", "HOME", "LANG", "TZ", "TMPDIR", *METADATA, *config_env}
    assert set(env) - SHELL_OWN == documented, sorted(set(env) - SHELL_OWN ^ documented)
    for name, value in SERVICE_SECRETS.items():
        assert name not in env
        assert value not in raw
    assert env["PATH"] == service_env["PATH"] and env["TZ"] == "Asia/Shanghai"
    assert env["LANG"] == "fr_FR.UTF-8" and env["MODEL"] == "small"
    assert env["AGENTCRON_RUN_ID"] == str(req.run_id)
    assert env["AGENTCRON_SCHEDULE_ID"] == str(req.schedule_id)
    assert env["AGENTCRON_TASK_ID"] == str(req.task_id)
    assert env["AGENTCRON_ATTEMPT"] == "1"
    assert env["AGENTCRON_TRIGGER"] == "manual"
    assert env["AGENTCRON_DUE_AT"] == "2026-01-05T08:00:00+00:00"
    assert env["AGENTCRON_INSTANCE_ID"] == "replica-7"
    # HOME is the task's directory, not the service user's home.
    assert env["HOME"] == str(workdir.resolve()) != service_env.get("HOME")
    if sandboxed:
        assert env["TMPDIR"] == "/tmp"  # the sandbox's own tmpfs
    else:
        # TMPDIR was a directory of the attempt's own, existing while it ran and removed after.
        assert (workdir / "tmpdir.txt").read_text() == env["TMPDIR"]
        assert env["TMPDIR"] != "/tmp" and str(req.run_id) in env["TMPDIR"]
        assert not is_dir(env["TMPDIR"])
