#!/usr/bin/env bash
# Installs every test dependency (idempotent), runs ruff and mypy, then the whole test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh -k facts
#
# scripts/test.sh --fast: the loop for people changing the code. No install step, and every test but the
# real-engine (-m vllm), fuzz (-m fuzz), slow (-m slow: over 10 s each) and integration (tests/integration) ones, spread over
# two workers per CPU (pytest-xdist, work stealing): a third of the loop waits on deadlines, servers and child processes, and
# a second worker per CPU fills those waits. The full run (and .ci/run) still runs them all.
#
# The full run is two pytest runs: every test but the real-engine (-m vllm) and integration (-m integration:
# tests/integration) ones on the same xdist workers, then those, serially: the tests of tests/integration share booted
# engines through a session cache (tests/integration/conftest.py's vllm_boot_cache) that a second worker would boot
# again, and each engine wants both cores. The second runs even when the first fails; the script fails when either
# does. SEATPLAN_TALLY_CARRY hands the first run's reliability figures to the second, which prints them whole.
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
workers=${SEATPLAN_TEST_WORKERS:-$((2 * $(nproc)))}
SEATPLAN_TALLY_CARRY=$(mktemp)
export SEATPLAN_TALLY_CARRY
trap 'rm -f "$SEATPLAN_TALLY_CARRY"' EXIT
status=0
.venv/bin/python -m pytest -m "not vllm and not integration" -n "$workers" --dist worksteal --durations=25 "$@" || status=$?
second=0
.venv/bin/python -m pytest -m "vllm or integration" --durations=25 "$@" || second=$?
# 5: no test selected (extra arguments naming tests of one part only); a failure only when neither part had any
if [[ $status == 5 ]]; then status=$second; elif [[ $second != 5 && $status == 0 ]]; then status=$second; fi
exit "$status"
