"""structlog set-up: JSON lines in production, a readable console renderer on a terminal."""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog


def configure_logging(fmt: Literal["console", "json"] | None = None, level: str = "INFO") -> None:
    """Route structlog and stdlib logging through one renderer on stderr.

    ``fmt=None`` picks ``console`` when stderr is a terminal and ``json`` otherwise, so a
    developer reads colours and a log shipper reads one JSON object per line.
    """
    if fmt is None:
        fmt = "console" if sys.stderr.isatty() else "json"
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.format_exc_info)
    else:
        # No local variables in tracebacks (structlog's rich default shows them): a frame
        # holding an API key, a stored secret's value or a run's environment would print it.
        renderer = structlog.dev.ConsoleRenderer(
            exception_formatter=structlog.dev.RichTracebackFormatter(show_locals=False)
        )

    structlog.configure(
        # A line below the level is dropped before any processor runs: a run's two info lines
        # cost about 25 us of the event loop's time even when WARNING drops them afterwards.
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    # The renderers show none of the caller, thread and process fields the logging module
    # gathers for every record: the switches of the logging HOWTO's "Optimization" section
    # skip gathering them. In a served burst a fifth of the event loop's time went to the
    # runs' log lines, half of it making LogRecords (the caller's frame found by a walk).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(foreign_pre_chain=shared, processor=renderer)
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # httpx logs every request URL at INFO; a webhook URL's query may hold a token.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # Alembic narrates its own set-up at INFO (plugins, "Context impl", each revision applied)
    # whenever the schema is checked or migrated: nine lines per `serve` that tell an operator
    # nothing; `agentcron migrate` logs the revision it reached instead. AGENTCRON_LOG_LEVEL=DEBUG
    # shows them again.
    logging.getLogger("alembic").setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)
    # uvicorn installs its own handlers; let its records flow through ours instead.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A structlog logger; bind ``schedule_id``/``run_id`` on it for per-run context."""
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger


def logs_at(logger: logging.Logger, level: int) -> bool:
    """Whether a line of ``level`` on the structlog logger of the same name as the standard
    ``logger`` reaches its processors: under ``configure_logging``'s set-up (``filter_by_level``
    first), when ``logger`` is enabled for ``level``; under any other (a host's own structlog
    set-up, a test's ``capture_logs``), always. For a line made on every run, so it is made
    only when kept."""
    processors = structlog.get_config()["processors"]
    if not processors or processors[0] is not structlog.stdlib.filter_by_level:
        return True
    return logger.isEnabledFor(level)
