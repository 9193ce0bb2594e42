#!/usr/bin/env bash
# Installs every test dependency (idempotent), runs ruff and mypy, then the whole test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh -k facts
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh
CACHE=${SEATPLAN_TEST_CACHE:-$HOME/.cache/seatplan}
export SEATPLAN_VLLM_VENV=${SEATPLAN_VLLM_VENV:-$CACHE/vllm-${SEATPLAN_VLLM_VERSION:-0.32.0}}
# Lint and type checks first: cheap, and a failure here needs no test run to explain.
.venv/bin/ruff check src tests benchmarks
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
