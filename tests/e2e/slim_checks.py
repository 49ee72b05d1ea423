"""Run by tests/e2e/test_wheel.py with the python of a virtualenv holding the wheel and no
extra, from a directory outside the checkout: nothing here may import the tests or anything
the base install lacks (pytest included). Each check prints one JSON object on its last line.

``library EXAMPLE``: the library example of docs/library.md (the file EXAMPLE holds its code
block), served through the host's own URL and auth in-process, to a fired run; then a schedule
with an email channel, refused at save; then which packages of an extra were imported on the
way (none may be).

``service DATABASE_URL``: the service's app (``create_app``) without its extras: the lines it
logs at start, what ``/``, ``/mcp`` and ``/metrics`` answer, and an engine asked to start with
``AGENTCRON_SECRETS_KEY`` set.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

import httpx

# The top-level modules of every extra (agentcron.core.extras.EXTRAS, said again here so that
# a module moved between the base and an extra is a failure of this test, not a silent pass).
EXTRA_MODULES = (
    "uvicorn",
    "typer",
    "rich",
    "jinja2",
    "mcp",
    "aiosmtplib",
    "cryptography",
    "prometheus_client",
    "jsonschema",
    "opentelemetry.sdk",  # the namespace itself may come with a base dependency
)
SCHEDULE = {
    "name": "news digest",
    "prompt": "summarise the news",
    "trigger": {"cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai"},
    "runner": {"type": "handler", "data": {"deployment": "d-42"}},
}
EMAIL = {
    "type": "email",
    "to": ["a@example.com"],
    "smtp_url_env": "SMTP_URL",
    "from": "b@example.com",
}


async def library(app: Any) -> dict[str, Any]:
    alice = {"X-User": "alice"}
    base = "/scheduling/api/v1"
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host") as http,
    ):
        created = await http.post(f"{base}/schedules", json=SCHEDULE, headers=alice)
        assert created.status_code == 201, created.text
        schedule_id = created.json()["id"]
        ran = await http.post(f"{base}/schedules/{schedule_id}/run", headers=alice)
        assert ran.status_code == 202, ran.text
        deadline = time.monotonic() + 30
        while True:
            answer = await http.get(f"{base}/schedules/{schedule_id}/runs", headers=alice)
            runs = answer.json()["items"]
            if runs and runs[0]["status"] not in ("pending", "running"):
                break
            assert time.monotonic() < deadline, runs
            await asyncio.sleep(0.1)
        emailed = {**SCHEDULE, "notify": [EMAIL]}
        refused = await http.post(f"{base}/schedules", json=emailed, headers=alice)
    return {
        "run": runs[0],
        "email": {"status": refused.status_code, "body": refused.json()},
        "loaded": sorted(name for name in EXTRA_MODULES if name in sys.modules),
    }


async def service(database_url: str) -> dict[str, Any]:
    import structlog

    import agentcron
    from agentcron.core.config import Settings
    from agentcron.core.errors import StartupError
    from agentcron.web.app import create_app

    settings = Settings(database_url=database_url)
    with structlog.testing.capture_logs() as logged:
        app = create_app(settings)
    answers = {}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc") as http,
    ):
        for method, path in (("GET", "/"), ("POST", "/mcp"), ("GET", "/metrics")):
            answer = await http.request(method, path)
            answers[f"{method} {path}"] = [answer.status_code, answer.json()]
    engine = agentcron.Engine(database_url=database_url, secrets_key="k" * 44)
    try:
        await engine.start()
    except StartupError as exc:
        secrets = f"{type(exc).__name__}: {exc.message}"
    else:
        await engine.stop()
        secrets = "started"
    # The OpenTelemetry environment without the otel extra: one line, and the engine runs.
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:4318"
    with structlog.testing.capture_logs() as traced:
        engine = agentcron.Engine(database_url=database_url)
        await engine.start()
        await engine.stop()
    return {
        "tracing": [line["reason"] for line in traced if line["event"] == "extra_missing"],
        "loaded": sorted(name for name in EXTRA_MODULES if name in sys.modules),
        "logged": [line for line in logged if line["event"] == "extra_missing"],
        "answers": answers,
        "secrets": secrets,
    }


def main() -> None:
    check, argument = sys.argv[1:3]
    if check == "library":
        with open(argument) as file:
            block = file.read()
        namespace: dict[str, Any] = {"__name__": "host_example"}
        exec(compile(block, "docs/library.md", "exec"), namespace)
        found = asyncio.run(library(namespace["app"]))
    else:
        from agentcron.core.config import Settings
        from agentcron.core.storage.migrate import upgrade

        upgrade(Settings(database_url=argument).database_url)  # runs a loop of its own
        found = asyncio.run(service(argument))
    print(json.dumps(found))


if __name__ == "__main__":
    main()
