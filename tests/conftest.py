"""Shared test helpers.

Tests that need a real part (vLLM, PostgreSQL, Prometheus, ansible-playbook, Chromium) call
:func:`require`: on a developer machine without the part they skip with the reason; under CI
(``CI`` set) a missing part is a failure, so a green CI run always means the real part ran.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
MODEL_FIXTURES = FIXTURES / "models"
FORMAT_FIXTURES = FIXTURES / "formats"
REPO_ROOT = Path(__file__).resolve().parent.parent


def require(condition: bool, what: str) -> None:
    if condition:
        return
    message = f"needs {what}; run scripts/install-test-deps.sh"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def require_binary(name: str, *candidates: str) -> str:
    """Path to an executable by name or one of ``candidates`` (globs allowed)."""
    found = shutil.which(name)
    if not found:
        for pattern in candidates:
            matches = sorted(Path("/").glob(pattern.lstrip("/")))
            if matches:
                found = str(matches[-1])
                break
    require(found is not None, f"the {name} binary")
    return found  # type: ignore[return-value]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def model_fixtures() -> Path:
    return MODEL_FIXTURES


@pytest.fixture
def format_fixtures() -> Path:
    return FORMAT_FIXTURES
