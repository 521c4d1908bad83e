# The two commands a newcomer runs: `make demo` and `make test`.
# `make check` is the fast lane while editing: lint, typecheck and the tests not marked slow or campaign.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test check lint typecheck proto-check unit pythons bench audit-cost-bench rules-cost-bench events-cost-bench scale-plan hpack-bench clean

setup: $(STAMP)

# The light client (clients/python) first: the server distribution depends on it.
$(STAMP): pyproject.toml clients/python/pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e 'clients/python[tracing]' -e '.[dev,console,trial]'
	PYTHON=$(PY) tools/gen_protos.sh
	@touch $(STAMP)

demo: setup
	$(VENV)/bin/decisionflow demo $(DEMO_ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	$(PY) tools/gen_refusals.py --check

typecheck: setup
	$(VENV)/bin/mypy

proto-check: setup
	PYTHON=$(PY) tools/proto_check.sh

# Three workers on two cores: much of a test's time is spent waiting on the processes it starts, so a third worker
# fills the waits (a whole run at three workers kept the two cores 69 % busy). --dist worksteal: each worker
# starts on a third of the tests and takes from the others' queues when its own is done, so the minutes-long
# campaigns and benches do not leave one worker running alone at the end. JOBS=2 runs two.
unit: setup
	$(VENV)/bin/pytest -n $(or $(JOBS),3) --dist worksteal --durations=25 $(PYTEST_ARGS)

# Lint, the type check and the proto check (mostly one core) run beside the tests; their output is shown when the
# tests end, and a failure of either fails the target. make test also prepares, beside them, the tools some tests
# install or build on first use (the images, checkov, kustomize, podman-compose, Patroni, the TypeScript client);
# a test that needs one waits for its step or finds it done (tests/support/prepare.py).
test: setup
	@mkdir -p .venvs; \
	$(PY) -m tests.support.prepare > .venvs/prepare.log 2>&1 & prepare=$$!; \
	$(MAKE) --no-print-directory -j 3 --output-sync=target lint typecheck proto-check > .venvs/test-checks.log 2>&1 & checks=$$!; \
	echo "make test: lint, typecheck and proto-check run beside the tests; their output follows the tests"; \
	status=0; $(MAKE) --no-print-directory unit || status=$$?; \
	wait $$prepare; sed 's/^/make test: /' .venvs/prepare.log; \
	wait $$checks || status=$$?; cat .venvs/test-checks.log; exit $$status

check: setup
	@mkdir -p .venvs; \
	$(MAKE) --no-print-directory -j 2 --output-sync=target lint typecheck > .venvs/check-checks.log 2>&1 & checks=$$!; \
	echo "make check: lint and typecheck run beside the tests; their output follows the tests"; \
	status=0; $(VENV)/bin/pytest -n $(or $(JOBS),2) -q -m 'not slow and not campaign' $(PYTEST_ARGS) || status=$$?; \
	wait $$checks || status=$$?; cat .venvs/check-checks.log; exit $$status

# The demo and the checkpoint tests under every other Python 3.11+ on this machine (.venvs/VERSION).
pythons: setup
	tools/other_pythons.sh

bench: setup
	$(PY) -m bench $(if $(QUICK),--quick,) $(BENCH_ARGS)

# The audit log's leaves' share of the orchestrator's CPU per StartReview and first Approve: the orchestrator with
# and without its leaves in alternating rounds (bench/audit_cost.py); AUDIT_COST_ARGS="--postgres-url …", QUICK=1.
audit-cost-bench: setup
	$(PY) -m bench.audit_cost $(if $(QUICK),--quick,) $(AUDIT_COST_ARGS)

# Review rules' cost: the orchestrator's CPU per StartReview and first Approve under the default rule against the
# release before review rules (from git history), and per vote of a two-stage rule, in alternating rounds
# (bench/rules_cost.py); RULES_COST_ARGS="--postgres-url …", QUICK=1.
rules-cost-bench: setup
	$(PY) -m bench.rules_cost $(if $(QUICK),--quick,) $(RULES_COST_ARGS)

# The event feed's cost: the orchestrator's CPU per StartReview and first Approve with no watcher against the same
# with one watcher streaming every event, and (where nats-server is installed) with the relay into JetStream, in
# alternating rounds; each Approve's answer-to-event latency at a watcher process (p50, p99); one process's RSS per
# idle stream and an Approve beside them (bench/events_cost.py); EVENTS_COST_ARGS="--postgres-url …", QUICK=1.
events-cost-bench: setup
	$(PY) -m bench.events_cost $(if $(QUICK),--quick,) $(EVENTS_COST_ARGS)

# Statements and commits per call on PostgreSQL, what one primary sustains (pgbench) and the orchestrator
# replicas it serves; SCALE_ARGS="--postgres-url …" for another server, QUICK=1 in about two minutes.
scale-plan: setup
	$(PY) -m bench.scale_plan $(if $(QUICK),--quick,) $(SCALE_ARGS)

# HPACK amplification (a header named thousands of times per request): each service's memory and where the
# requests end, with the project's gRPC options and with candidates (bench/hpack.py); QUICK=1: the project's options only.
hpack-bench: setup
	$(PY) -m bench.hpack $(if $(QUICK),--quick,) $(HPACK_ARGS)

clean:
	rm -rf $(VENV) .venvs build *.egg-info .pytest_cache .mypy_cache .ruff_cache
