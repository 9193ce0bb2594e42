"""Fixtures of the render-stage tests: the demo fleet's plan, saved once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from kits.render import DEMO_FLEET
from kits.rollout import build_plan_file
from seatplan.documents.plan import Plan


@pytest.fixture(scope="session")
def demo_plan_path(tmp_path_factory) -> Path:
    return build_plan_file(DEMO_FLEET, tmp_path_factory.mktemp("demo") / "plan.json")


@pytest.fixture
def demo_plan(demo_plan_path) -> Plan:
    return Plan.model_validate_json(demo_plan_path.read_text())
