#!/usr/bin/env bash
# Installs every test dependency (idempotent), runs ruff and mypy, then the whole test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh -k facts
#
# scripts/test.sh --fast: the loop for people changing the code. No install step, and every test but the
# real-engine (-m vllm), fuzz (-m fuzz), slow (-m slow: over 10 s each) and integration (tests/integration) ones, spread over
# two workers per CPU (pytest-xdist, work stealing): a third of the loop waits on deadlines, servers and child processes, and
# a second worker per CPU fills those waits. The full run (and .ci/run) still runs them all.
#
# The full run is two pytest runs side by side, so that the one that waits uses the CPU the other leaves:
#   1. every test but the real-engine (-m vllm: they need the vLLM virtualenv) and integration (-m integration:
#      tests/integration) ones, on the same xdist workers as --fast, at nice 19: the engines' boots come first;
#   2. in the background, once scripts/install-test-deps.sh engines has installed the vLLM and LiteLLM virtualenvs
#      (network and disk, while the first part runs), those tests on SEATPLAN_ENGINE_TEST_WORKERS (2) workers with
#      --dist loadfile: a module's tests run on one worker, so the engines its module fixtures and the session's
#      vllm_boot_cache boot are booted once, and two modules boot theirs in parallel (three made the run no shorter:
#      the 2 cores are the limit, docs/testing.md). The modules go out longest first
#      (tests/module_seconds.json, ordered by tests/conftest.py; --no-loadscope-reorder keeps that order, where xdist
#      would hand out the modules with most tests first and the longest single-test modules last). (Not loadgroup:
#      xdist 3.8 names the groups in item._nodeid, which pytest 9 no longer reads, so every test would go its own
#      way.) Its output is printed when both are over.
# The first part runs with SEATPLAN_ENGINE_VENVS_PENDING set: a test in it that reaches for either virtualenv fails
# (mark it vllm), whatever the install's progress. The script fails when either part does. Each part tallies its
# reliability figures in a file of its own (SEATPLAN_TALLY_CARRY); tests/kits/tally.py prints the sum last.
# SEATPLAN_JUNIT_DIR=DIR writes each part's JUnit report there (first.xml, second.xml): scripts/module_seconds.py
# refreshes tests/module_seconds.json from them.
set -euo pipefail
cd "$(dirname "$0")/.."
fast=false
if [[ "${1:-}" == "--fast" ]]; then
  fast=true
  shift
fi
if ! $fast; then
  bash scripts/install-test-deps.sh base
fi
CACHE=${SEATPLAN_TEST_CACHE:-$HOME/.cache/seatplan}
# Compiled modules are cached (an environment may turn that off): without the cache every `seatplan` child process a test
# starts compiles the package again, and every pytest worker rewrites every test module's asserts again.
unset PYTHONDONTWRITEBYTECODE
export SEATPLAN_VLLM_VENV=${SEATPLAN_VLLM_VENV:-$CACHE/vllm-${SEATPLAN_VLLM_VERSION:-0.32.0}}
# The second part installs and starts in the background (see above); the first starts after lint.
if ! $fast; then
  run=$(mktemp -d)
  : > "$run/first.tally"; : > "$run/second.tally"
  echo "the second part (vLLM and LiteLLM install, then -m \"vllm or integration\") runs beside the first: $run/second.log"
  (
    bash scripts/install-test-deps.sh engines
    SEATPLAN_TALLY_CARRY=$run/second.tally SEATPLAN_RELIABILITY_JSON="" exec .venv/bin/python -m pytest -m "vllm or integration" \
      -n "${SEATPLAN_ENGINE_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder --durations=25 \
      ${SEATPLAN_JUNIT_DIR:+"--junitxml=$SEATPLAN_JUNIT_DIR/second.xml"} "$@"
  ) > "$run/second.log" 2>&1 &
  second_pid=$!
  trap 'kill "$second_pid" 2>/dev/null || true; rm -rf "$run"' EXIT
fi
# Lint and type checks first: cheap, and a failure here needs no test run to explain.
.venv/bin/ruff check src tests benchmarks
.venv/bin/mypy
if $fast; then
  exec .venv/bin/python -m pytest -m "not vllm and not fuzz and not slow" --ignore=tests/integration -n "${SEATPLAN_TEST_WORKERS:-$((2 * $(nproc)))}" --dist worksteal -q "$@"
fi
workers=${SEATPLAN_TEST_WORKERS:-$((2 * $(nproc)))}
status=0
SEATPLAN_ENGINE_VENVS_PENDING=1 SEATPLAN_TALLY_CARRY=$run/first.tally SEATPLAN_RELIABILITY_JSON="" \
  nice -n 19 .venv/bin/python -m pytest -m "not vllm and not integration" -n "$workers" --dist worksteal --durations=25 \
  ${SEATPLAN_JUNIT_DIR:+"--junitxml=$SEATPLAN_JUNIT_DIR/first.xml"} "$@" || status=$?
second=0
wait "$second_pid" || second=$?
echo
echo "==================== the second part: -m \"vllm or integration\" (exit status $second) ===================="
cat "$run/second.log"
.venv/bin/python tests/kits/tally.py "$run/first.tally" "$run/second.tally"
# 5: no test selected (extra arguments naming tests of one part only); a failure only when neither part had any
if [[ $status == 5 ]]; then status=$second; elif [[ $second != 5 && $status == 0 ]]; then status=$second; fi
exit "$status"
