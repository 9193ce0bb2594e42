#!/usr/bin/env bash
# Installs every test dependency (idempotent), runs ruff and mypy, then the whole test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh -k facts
#
# scripts/test.sh --fast: the loop for people changing the code. No install step, and every test but the
# real-engine (-m vllm), fuzz (-m fuzz), slow (-m slow: over 10 s each) and integration (tests/integration) ones, spread over
# two workers per CPU (pytest-xdist, work stealing): a third of the loop waits on deadlines, servers and child processes, and
# a second worker per CPU fills those waits. The full run (and .ci/run) still runs them all.
set -euo pipefail
cd "$(dirname "$0")/.."
fast=false
if [[ "${1:-}" == "--fast" ]]; then
  fast=true
  shift
fi
if ! $fast; then
  bash scripts/install-test-deps.sh
fi
CACHE=${SEATPLAN_TEST_CACHE:-$HOME/.cache/seatplan}
# Compiled modules are cached (an environment may turn that off): without the cache every `seatplan` child process a test
# starts compiles the package again, and every pytest worker rewrites every test module's asserts again.
unset PYTHONDONTWRITEBYTECODE
export SEATPLAN_VLLM_VENV=${SEATPLAN_VLLM_VENV:-$CACHE/vllm-${SEATPLAN_VLLM_VERSION:-0.32.0}}
# Lint and type checks first: cheap, and a failure here needs no test run to explain.
.venv/bin/ruff check src tests benchmarks
.venv/bin/mypy
if $fast; then
  exec .venv/bin/python -m pytest -m "not vllm and not fuzz and not slow" --ignore=tests/integration -n "${SEATPLAN_TEST_WORKERS:-$((2 * $(nproc)))}" --dist worksteal -q "$@"
fi
exec .venv/bin/python -m pytest "$@"
