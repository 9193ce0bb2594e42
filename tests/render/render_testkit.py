"""Paths the render-stage tests share (the rollout helpers are in tests/integration/rollout.py)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEMO_FLEET = REPO / "examples" / "demo" / "fleet.yaml"
FIXTURES = REPO / "tests" / "fixtures"
COMPOSE_SCHEMA = FIXTURES / "compose-spec" / "compose-spec.json"
QWEN3_8B = FIXTURES / "models" / "Qwen--Qwen3-8B"
MiB = 1 << 20
GiB = 1 << 30
