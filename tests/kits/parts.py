"""The real parts a test needs (vLLM, PostgreSQL, Prometheus, ansible-playbook, Chromium …), and the servers it starts.

A test that needs a part calls :func:`require`: on a developer machine without the part it skips with the
reason; under CI (``CI`` set) a missing part is a failure, so a green CI run always means the real part ran.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest


def require(condition: bool, what: str) -> None:
    if condition:
        return
    message = f"needs {what}; run scripts/install-test-deps.sh"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def refuse_while_installing(what: str) -> None:
    """``scripts/test.sh`` installs the vLLM and LiteLLM virtualenvs while the tests outside ``-m "vllm or
    integration"`` run, and sets ``SEATPLAN_ENGINE_VENVS_PENDING`` for them: a test among those that reaches for one
    would race the install (or pass only because an earlier run left it), so it fails whatever is installed."""
    if os.environ.get("SEATPLAN_ENGINE_VENVS_PENDING"):
        pytest.fail(f"this test needs {what}, which scripts/test.sh is still installing while the tests outside "
                    '-m "vllm or integration" run: mark it @pytest.mark.vllm so that it runs after the install', pytrace=False)


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


def stop_process(process: subprocess.Popen, grace_s: float = 20) -> None:
    """End a server a test started, by its own handle: terminate, then kill if it lingers."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def live_group_members(group_id: int) -> list[int]:
    """PIDs in process group ``group_id`` that are not zombies, from /proc (stat's fields after the command's ')')."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _parent, group = stat.read_text().rpartition(")")[2].split()[:3]
        except (OSError, ValueError):
            continue  # gone while we looked
        if int(group) == group_id and state != "Z":
            members.append(int(stat.parent.name))
    return members


def group_runs(group_id: int) -> bool:
    """Whether any process of group ``group_id`` still runs (zombies not counted: kill(2) finds those until reaped)."""
    return bool(live_group_members(group_id))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
