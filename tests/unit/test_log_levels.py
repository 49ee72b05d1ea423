"""Which lines reach structlog's processors: the level of ``configure_logging``, or all of them
under a set-up of the host's own or a test's capture."""

from __future__ import annotations

import logging

import structlog

from agentcron.core.logging import configure_logging, logs_at

ENGINE = logging.getLogger("agentcron.engine")


def test_the_configured_level_decides(restored_logging: None) -> None:
    configure_logging("json", "WARNING")
    assert not logs_at(ENGINE, logging.INFO)
    assert logs_at(ENGINE, logging.WARNING)
    configure_logging("json", "INFO")
    assert logs_at(ENGINE, logging.INFO)


def test_under_a_capture_or_a_hosts_own_set_up_every_line_is_made(restored_logging: None) -> None:
    configure_logging("json", "WARNING")
    with structlog.testing.capture_logs():
        assert logs_at(ENGINE, logging.INFO)
    structlog.configure(processors=[structlog.processors.JSONRenderer()])
    assert logs_at(ENGINE, logging.DEBUG)
