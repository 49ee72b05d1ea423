# agentcron: every task goes through here. `make help` lists them.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
# pytest-xdist workers: in-process tests wait on I/O more than they compute, and tests of real
# server processes and agents mostly wait too (windows, drains, kills), so one run of both
# with five workers on two cores keeps the machine busy: 5 min 12 s, against 6 min 1 s for
# the two kinds one after the other (four workers, then three). Those with margins of a
# fraction of a second, or that demand a throughput (marked solo), run at the end with no
# other test beside them: first the three that mostly wait (marked solo_pair: a database cut
# of 20 s, a frozen replica waiting out its lease, replicas SIGKILLed while their agents sleep),
# side by side on three workers, which takes the longest one's time instead of all three
# (58-62 s on an idle two-core machine, with the take-over's p50 0.77 s and max 1.2-1.6 s as
# alone); then the soak and the benchmark smoke test, which use the cores, one at a time.
# --dist loadgroup: the tests of a module that shares one server (marked xdist_group) run on
# one worker, so it starts once; the others are handed out in the order given, so the long
# ones (real servers, faults) go first and the short ones fill in behind them: 316 s on an
# idle machine, against 352 s with the unit tests first (six workers: 431 s).
TEST_WORKERS ?= 5

.DEFAULT_GOAL := help
.PHONY: help install install-runtime run test lint format migrate bench bench-parts bench-quick soak screenshots clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "agentcron needs Python 3.11 or newer (PYTHON=$(PYTHON))"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Two stamps: `make run` needs agentcron with every extra (`.[all]`: the server, its dashboard
# and command line, MCP, email, stored secrets, metrics: what the README shows the service
# doing), not the test, lint and browser tools, so a first start does not wait for those; the
# tasks that test, lint or measure add them. The dev set includes `agentcron[all]`, so
# installing it stamps both.
$(VENV)/.installed-runtime: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[all]'
	@touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $@ $(VENV)/.installed-runtime

help: ## list the tasks
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

install: $(VENV)/.installed-dev ## create .venv and install agentcron with its dev tools

install-runtime: $(VENV)/.installed-runtime ## create .venv and install agentcron with every extra, without the dev tools (what `make run` needs)

run: install-runtime ## migrate the SQLite database, add the example schedule, serve on 127.0.0.1:8000 (HOST=, PORT=)
	$(BIN)/agentcron migrate
	$(BIN)/agentcron example
	$(BIN)/agentcron serve --host $(HOST) --port $(PORT)

test: install ## run the whole test suite (PostgreSQL tests too when it is reachable; installs Debian's chromium and bubblewrap as root)
	sh scripts/install-chromium
	sh scripts/install-bubblewrap
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup -m "not solo" tests/e2e tests/faults tests/test_bench_smoke.py tests/integration tests/contract tests/unit
	$(BIN)/pytest -n 3 -m "solo and solo_pair" tests/e2e tests/faults
	$(BIN)/pytest -m "solo and not solo_pair" tests/e2e tests/faults tests/test_bench_smoke.py

lint: install ## ruff and mypy (strict)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: install ## apply ruff's formatting and safe fixes
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

migrate: install-runtime ## apply database migrations to AGENTCRON_DATABASE_URL
	$(BIN)/agentcron migrate

bench: install ## every workload (burst, idle, steady, bigidle, replicas) on PostgreSQL and SQLite, then the cost of each database part of a run; long
	$(BIN)/python -m bench
	$(BIN)/python -m bench.parts

bench-parts: install ## CPU and wall time per run of the claim, the admission and the record on PostgreSQL (under a minute)
	$(BIN)/python -m bench.parts

bench-quick: install ## burst (with the served sync one at 256, APScheduler 3.11 and the ceiling) and replicas of 2,000 and a 15 s idle window, PostgreSQL only (about 10 minutes)
	$(BIN)/python -m bench --quick

soak: install ## 4 replicas, 1,000 schedules (1 in 5 a 20 s agent, past its 6 s lease), 2 minutes, one SIGKILLed and restarted every 20 s; JSON figures (PostgreSQL)
	$(BIN)/python -m tests.faults.soak --replicas 4 --schedules 1000 --seconds 120 --kill-every 20 \
		--long-fraction 0.2 --long-seconds 20 --lease-seconds 6 --concurrency 256

screenshots: install ## the dashboard's screenshots in docs/ (a real server, headless Chromium)
	sh scripts/install-chromium
	$(BIN)/python -m tests.e2e.screenshots docs

clean: ## remove the virtualenv and local state
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
