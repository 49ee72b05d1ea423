"""The mail of an ``email`` delivery: headers, a plain-text part and an HTML part.

It owns turning the documented delivery payload into an ``EmailMessage``, with a
``Message-ID`` and a ``Date`` derived from the run so that every retry of a delivery sends the
same message, header values folded to one line and every value escaped in the HTML part.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any


def compose_message(
    body: Mapping[str, Any], delivery_id: str, sender: str, recipients: list[str]
) -> EmailMessage:
    """The mail for one delivery: ``multipart/alternative`` with a text and an HTML part.

    ``body`` is the documented delivery payload. The same inputs give the same
    ``Message-ID`` and ``Date`` (derived from ``delivery_id`` and the run's finish time), so
    a retried delivery is recognisably the same message. Every value is HTML-escaped in the
    HTML part; header values are folded to one line.
    """
    schedule = body.get("schedule") or {}
    run = body.get("run") or {}
    name = _one_line(str(schedule.get("name") or "schedule"), 150)
    status = _one_line(str(run.get("status") or "finished"), 40)
    message = EmailMessage()
    message["From"] = sender
    message["To"] = ", ".join(recipients)
    message["Subject"] = f"[agentcron] {name}: {status}"
    message["Date"] = format_datetime(_when(run.get("finished_at")))
    message["Message-ID"] = _message_id(delivery_id, sender)
    # RFC 3834: marks the mail as machine-sent so vacation responders do not answer it.
    message["Auto-Submitted"] = "auto-generated"
    if run.get("id"):
        message["X-Agentcron-Run-Id"] = _one_line(str(run["id"]), 100)
    rows = _rows(schedule, run)
    output = run.get("output")
    message.set_content(_text_part(rows, output))
    message.add_alternative(_html_part(name, rows, output), subtype="html")
    return message


def _rows(schedule: Mapping[str, Any], run: Mapping[str, Any]) -> list[tuple[str, str]]:
    def show(value: Any) -> str:
        if value is None or value == "":
            return "-"
        return value.isoformat() if isinstance(value, datetime) else str(value)

    rows = [
        ("Schedule", show(schedule.get("name"))),
        ("Schedule id", show(schedule.get("id"))),
        ("Run id", show(run.get("id"))),
        ("Trigger", show(run.get("trigger"))),
        ("Due at", show(run.get("due_at"))),
        ("Finished at", show(run.get("finished_at"))),
        ("Status", show(run.get("status"))),
        ("Attempt", show(run.get("attempt"))),
        ("Error", show(run.get("error"))),
    ]
    if run.get("result") is not None:  # a host handler's JSON object: a row only when given
        rows.append(("Result", json.dumps(run["result"], ensure_ascii=False)))
    return rows


def _text_part(rows: list[tuple[str, str]], output: Any) -> str:
    width = max(len(label) for label, _ in rows) + 2
    lines = [f"{label + ':':<{width}}{value}" for label, value in rows]
    shown = "(no output)" if output is None or output == "" else str(output)
    return "\n".join([*lines, "", "Output:", "", shown, ""])


def _html_part(name: str, rows: list[tuple[str, str]], output: Any) -> str:
    esc = html.escape
    cells = "\n".join(
        f'<tr><th style="text-align:left;padding-right:1em">{esc(label)}</th>'
        f"<td>{esc(value)}</td></tr>"
        for label, value in rows
    )
    if output is None or output == "":
        shown = "<p><em>(no output)</em></p>"
    else:
        shown = f'<pre style="white-space:pre-wrap">{esc(str(output))}</pre>'
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{esc(name)}</title></head>\n<body>\n"
        f"<table>\n{cells}\n</table>\n<h3>Output</h3>\n{shown}\n</body></html>\n"
    )


def _one_line(text: str, limit: int) -> str:
    # Header values must not carry CR/LF (header injection); long names are cut.
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _when(value: Any) -> datetime:
    """The run's finish time as an aware datetime (for a stable ``Date``), else now."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            value = None
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return datetime.now(UTC)


def _message_id(delivery_id: str, sender: str) -> str:
    """``<agentcron.<delivery id>@<sender's domain>>``: unique per run and channel."""
    local = re.sub(r"[^A-Za-z0-9._-]", "-", delivery_id)
    domain = sender.rpartition("@")[2]
    if not re.fullmatch(r"[A-Za-z0-9.-]+", domain):
        domain = "agentcron.invalid"  # an IDN or literal domain: keep the header plain ASCII
    return f"<agentcron.{local}@{domain}>"
