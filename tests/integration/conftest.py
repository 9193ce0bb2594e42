"""Session fixtures that boot the real vLLM CPU engine once per configuration.

``vllm_boot_cache.get(plan)`` boots ``plan`` on first use and hands the same
:class:`~kits.vllm_engine.BootResult` (or the same boot error) to every later caller, so
tests parametrized over :data:`~kits.boot_matrix.BOOT_PLANS` boot each engine once and
spread the boots over many tests (each stays well inside pytest-timeout). ``vllm_boots`` boots the
whole matrix and returns every result: a test using it needs ``@pytest.mark.timeout(1800)``.
Logs, results and ``/metrics`` texts are kept in ``<test cache>/vllm-boots/``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kits.boot_matrix import BOOT_PLANS, BootPlan
from kits.parts import require
from kits.tiny_models import tiny_model_dir
from kits.vllm_engine import (
    BootResult,
    EngineBootError,
    boot_engine,
    boot_log_dir,
    vllm_installed,
    vllm_python,
    vllm_venv,
)


class BootCache:
    """Boots each plan at most once per session and remembers the outcome, error included."""

    def __init__(self, python: Path, log_dir: Path) -> None:
        self._python = python
        self._log_dir = log_dir
        self._outcomes: dict[str, BootResult | EngineBootError] = {}

    def get(self, plan: BootPlan) -> BootResult:
        if plan.name not in self._outcomes:
            model_dir = tiny_model_dir(plan.model, self._python)
            try:
                self._outcomes[plan.name] = boot_engine(self._python, plan.engine_config(model_dir), self._log_dir)
            except EngineBootError as problem:
                self._outcomes[plan.name] = problem
        outcome = self._outcomes[plan.name]
        if isinstance(outcome, EngineBootError):
            raise outcome
        return outcome


@pytest.fixture(scope="session")
def vllm_python_path() -> Path:
    require(vllm_installed(), f"the vLLM CPU engine in {vllm_venv()} (SEATPLAN_VLLM_VENV)")
    return vllm_python()


@pytest.fixture(scope="session")
def vllm_boot_cache(vllm_python_path: Path) -> BootCache:
    return BootCache(vllm_python_path, boot_log_dir())


@pytest.fixture(scope="session")
def vllm_boots(vllm_boot_cache: BootCache) -> list[BootResult]:
    """Every plan of the boot matrix, booted (config + cache_config labels + log text)."""
    return [vllm_boot_cache.get(plan) for plan in BOOT_PLANS]
