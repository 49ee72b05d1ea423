"""The ``python`` runner with real imports: sync and async targets, results, errors, cancel.

Targets live in ``tests/agents_fixture.py``; modules that must vanish or fail to import are
written to a temporary directory put on ``sys.path`` for the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agentcron.core.errors import InvalidSchedule, RunPermanentError, TargetUnavailable
from agentcron.core.runners import build_runner, validate_runner
from agentcron.core.runners import python as python_runner
from agentcron.core.runners import threads as threads_module
from agentcron.core.runners.base import CancelToken, RunOutcome, RunRequest, TransientRunError
from agentcron.core.runners.threads import AgentThreads
from tests import agents_fixture
from tests.factories import run_request

FIXTURE = "tests.agents_fixture"


@pytest.fixture(autouse=True)
def fresh_calls() -> Iterator[None]:
    agents_fixture.CALLS.clear()
    agents_fixture.SYNC_STOPPED.clear()
    yield
    agents_fixture.CALLS.clear()


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on ``sys.path`` for throw-away target modules (unloaded afterwards)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("agentcron_tmp_"):
            del sys.modules[name]


def write_module(directory: Path, source: str) -> str:
    name = f"agentcron_tmp_{uuid.uuid4().hex}"
    (directory / f"{name}.py").write_text(source)
    importlib.invalidate_caches()
    return name


def request(prompt: str = "hello") -> RunRequest:
    return run_request(trigger="manual", prompt=prompt)


async def run(
    target: str, req: RunRequest | None = None, token: CancelToken | None = None
) -> RunOutcome:
    runner = build_runner(validate_runner({"type": "python", "target": target}))
    return await runner.run(req or request(), token or CancelToken())


# -- calling targets ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "output", "on_the_loop"),
    [
        ("greet", "hello from python: the news", False),
        ("greet_async", "async hello: the news", True),
        ("async_callable", "called", True),  # an object with an async __call__
    ],
)
async def test_a_sync_target_runs_in_a_worker_thread_an_async_one_on_the_loop(
    target: str, output: str, on_the_loop: bool
) -> None:
    req = request("the news")
    assert await run(f"{FIXTURE}:{target}", req) == RunOutcome(output=output)
    [call] = agents_fixture.CALLS
    assert call["run_id"] == req.run_id
    assert (call["thread"] == threading.get_ident()) is on_the_loop


@pytest.mark.parametrize(
    ("target", "output"),
    [
        ("returns_none", ""),
        ("returns_number", "1234"),
        ("returns_coroutine", "async hello: hello"),  # awaited on the loop
        ("Agents.summarise", "summary of 'hello'"),  # a dotted attribute path
    ],
)
async def test_return_values_become_the_output(target: str, output: str) -> None:
    outcome = await run(f"{FIXTURE}:{target}")
    assert outcome == RunOutcome(output=output)


async def test_a_returned_mapping_becomes_the_result_and_a_run_outcome_is_kept_as_is() -> None:
    req = request()
    outcome = await run(f"{FIXTURE}:returns_mapping", req)
    assert outcome == RunOutcome(output="", result={"session_id": f"s-{req.run_id}", "turns": 2})
    outcome = await run(f"{FIXTURE}:returns_outcome", req)
    assert outcome.output == "with turns"
    assert list(outcome.turns) == [
        {"role": "assistant", "content": "with turns", "run_id": str(req.run_id)}
    ]


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "error", "message"),
    [
        ("fails_with_value_error", TransientRunError, "ValueError: the model said no"),
        ("fails_async", TransientRunError, "KeyError: 'missing'"),
        ("exits", TransientRunError, "the target called exit (3)"),
        ("exits_async", TransientRunError, "the target called exit (4)"),
        # A runner's own errors propagate unwrapped.
        ("fails_permanently", RunPermanentError, "the input was rejected"),
        ("fails_transiently", TransientRunError, "upstream busy"),
    ],
)
async def test_exceptions_become_transient_with_type_and_message_unless_a_runners_own(
    target: str, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        await run(f"{FIXTURE}:{target}")
    assert type(caught.value) is error
    assert str(caught.value) == message


# -- cancel -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "seen"),
    [
        ("waits_for_cancel", {"kind": "async-cancelled"}),
        ("polls_cancel", {"kind": "sync-stopped", "cancelled": True}),
    ],
)
async def test_the_token_ends_the_attempt_at_once_and_the_target_sees_it(
    target: str, seen: dict[str, object]
) -> None:
    token = CancelToken()
    job = asyncio.ensure_future(run(f"{FIXTURE}:{target}", token=token))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    token.cancel("timeout")
    with pytest.raises(RunPermanentError, match=r"cancelled \(timeout\)"):
        await job
    assert time.monotonic() - started < 1.0
    # A worker thread cannot be interrupted: a sync target returns once it sees the token.
    for _ in range(500):
        if agents_fixture.CALLS:
            break
        await asyncio.sleep(0.01)
    [call] = agents_fixture.CALLS
    assert {key: call[key] for key in seen} == seen


async def test_cancelling_the_callers_task_is_not_taken_for_the_tokens_cancel() -> None:
    """A sync target is awaited in the caller's own task: cancelling that task (a host's
    shutdown) must still cancel it, not end as a cancelled attempt, even once the token is set
    too."""
    token = CancelToken()
    job = asyncio.ensure_future(run(f"{FIXTURE}:polls_cancel", token=token))
    await asyncio.sleep(0.05)
    job.cancel()
    token.cancel("shutdown")
    with pytest.raises(asyncio.CancelledError):
        await job
    assert await asyncio.to_thread(agents_fixture.SYNC_STOPPED.wait, 5)


async def test_a_token_cancelled_before_the_call_never_starts_a_sync_target() -> None:
    token = CancelToken()
    token.cancel("cancel")
    with pytest.raises(RunPermanentError, match=r"cancelled \(cancel\)"):
        await run(f"{FIXTURE}:polls_cancel", token=token)
    assert agents_fixture.CALLS == []


async def test_a_sync_target_that_returned_before_the_cancel_keeps_its_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stalled loop sees the thread's return and a cancel in one turn: the target's work is
    done, so its outcome is returned (the engine decides what the cancel means), not dropped
    as if the cancel had stopped it."""
    threads = AgentThreads(1)
    token = CancelToken()
    cancelled = agents_fixture.then_after_return(
        threads, lambda _: token.cancel("lease_unconfirmed")
    )
    monkeypatch.setattr(agents_fixture, "BEFORE_RETURN", cancelled)
    try:
        outcome = await run(
            f"{FIXTURE}:returns_then", replace(request(), threads=threads), token=token
        )
    finally:
        threads.shutdown()
    assert outcome.output == "returned" and token.cancelled


# -- validation and vanished targets ------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "field", "message"),
    [
        ({"target": f"{FIXTURE}:greet", "args": []}, "runner.args", "unknown field"),
        ({}, "runner.target", "import path"),
        ({"target": 5}, "runner.target", "import path"),
        ({"target": "tests.agents_fixture"}, "runner.target", "import path"),
        ({"target": "tests.agents_fixture:"}, "runner.target", "import path"),
        ({"target": ":greet"}, "runner.target", "import path"),
        ({"target": "tests agents:greet"}, "runner.target", "import path"),
        ({"target": "tests.agents_fixture:greet()"}, "runner.target", "import path"),
        ({"target": "tests.no_such_module:run"}, "runner.target", "no module named"),
        ({"target": f"{FIXTURE}:no_such_function"}, "runner.target", "no attribute"),
        ({"target": f"{FIXTURE}:Agents.nope"}, "runner.target", "'Agents.nope'"),
        ({"target": f"{FIXTURE}:NOT_CALLABLE"}, "runner.target", "not callable"),
    ],
)
def test_validate_rejects_naming_the_field(
    config: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        validate_runner({"type": "python", **config})
    assert caught.value.field == field
    assert message in caught.value.message


def test_a_module_that_raises_on_import_is_rejected_by_type_only(module_dir: Path) -> None:
    name = write_module(module_dir, "raise RuntimeError('secret=hunter2')\n")
    with pytest.raises(InvalidSchedule) as caught:
        validate_runner({"type": "python", "target": f"{name}:run"})
    assert caught.value.field == "runner.target"
    assert "RuntimeError" in caught.value.message and "hunter2" not in caught.value.message


async def test_a_function_gone_at_run_time_is_target_unavailable(module_dir: Path) -> None:
    name = write_module(module_dir, "def run(ctx):\n    return 'here'\n")
    runner = build_runner(validate_runner({"type": "python", "target": f"{name}:run"}))
    del sys.modules[name].run
    with pytest.raises(TargetUnavailable, match="no attribute 'run'"):
        await runner.run(request(), CancelToken())


@pytest.mark.parametrize(
    ("allowed", "target"),
    [
        ("", "tests.agents_fixture:greet"),  # unset: nothing is admitted
        ("tests", "os:system"),
        ("tests", "subprocess:getoutput"),
        ("tests", "testsuite.agent:run"),  # a name admits itself and submodules, no more
        ("myapp.*", "myapp:run"),
    ],
)
def test_only_modules_the_host_lists_are_admitted(
    allowed: str, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTCRON_PYTHON_MODULES", allowed)
    module = target.partition(":")[0]
    already = module in sys.modules
    with pytest.raises(InvalidSchedule) as caught:
        validate_runner({"type": "python", "target": target})
    assert caught.value.field == "runner.target"
    assert "AGENTCRON_PYTHON_MODULES" in caught.value.message
    # Refused before importing: the module's top-level code never ran.
    assert (module in sys.modules) == already


def test_listed_modules_and_patterns_are_admitted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTCRON_PYTHON_MODULES", " other , tests.agents_* ")
    config = {"type": "python", "target": f"{FIXTURE}:greet"}
    assert validate_runner(config) == config


async def test_a_target_taken_off_the_list_is_unavailable_at_run_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runner = build_runner(validate_runner({"type": "python", "target": f"{FIXTURE}:greet"}))
    monkeypatch.setenv("AGENTCRON_PYTHON_MODULES", "somewhere_else")
    with pytest.raises(TargetUnavailable, match="AGENTCRON_PYTHON_MODULES"):
        await runner.run(run_request(), CancelToken())


async def test_an_async_target_that_ignores_its_cancel_is_left_behind_after_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(python_runner, "CANCEL_GRACE_SECONDS", 0.1)
    release = asyncio.Event()

    async def stubborn() -> RunOutcome:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()
        return RunOutcome(output="late")

    token = CancelToken()
    job = asyncio.ensure_future(python_runner._on_loop(stubborn(), token))
    await asyncio.sleep(0.05)
    token.cancel("timeout")
    with pytest.raises(RunPermanentError, match=r"cancelled \(timeout\)"):
        await asyncio.wait_for(job, 2.0)
    release.set()  # the target left behind still ends on its own


async def test_cancelling_the_callers_task_cancels_an_async_target() -> None:
    token = CancelToken()
    stopped = asyncio.Event()

    async def waits() -> RunOutcome:
        try:
            await asyncio.sleep(60)
        finally:
            stopped.set()
        return RunOutcome(output="never")

    job = asyncio.ensure_future(python_runner._on_loop(waits(), token))
    await asyncio.sleep(0.05)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert stopped.is_set() and not token.cancelled


async def test_quick_calls_share_a_thread_and_blocked_ones_get_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(threads_module, "GROW_AFTER", 0.5)  # a loaded machine stays under it
    threads = AgentThreads(8)
    try:
        assert await asyncio.gather(*(threads.call(lambda i=i: i) for i in range(200))) == list(
            range(200)
        )
        assert len(threads.threads) == 1  # the queue kept moving: no thread more
        gate = threading.Barrier(8, timeout=10)  # returns once eight calls block at once
        assert await asyncio.gather(*(threads.call(gate.wait) for _ in range(8))) != []
        assert len(threads.threads) == 8
        with pytest.raises(ZeroDivisionError):
            await threads.call(lambda: 1 / 0)
    finally:
        threads.shutdown()
    with pytest.raises(RuntimeError):
        threads.call(lambda: None)
