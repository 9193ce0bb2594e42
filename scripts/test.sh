#!/usr/bin/env bash
# Installs every test dependency (idempotent) and runs the whole test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh -k facts
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh
CACHE=${SEATPLAN_TEST_CACHE:-$HOME/.cache/seatplan}
export SEATPLAN_VLLM_VENV=${SEATPLAN_VLLM_VENV:-$CACHE/vllm-${SEATPLAN_VLLM_VERSION:-0.32.0}}
exec .venv/bin/python -m pytest "$@"
