"""Helpers shared by the facts tests: fixture model paths, settings, and running the real CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kits.paths import MODEL_FIXTURES
from seatplan.facts.api import load_model_facts
from seatplan.facts.models import EngineSettings, ModelFacts

GiB = 1 << 30
FIXTURE_MODEL_DIRS = sorted(path.parent for path in MODEL_FIXTURES.glob("*/config.json"))


def fixture_dir(name: str) -> Path:
    return MODEL_FIXTURES / name


def facts(name_or_dir: str | Path, **settings: Any) -> ModelFacts:
    path = name_or_dir if isinstance(name_or_dir, Path) else fixture_dir(name_or_dir)
    return load_model_facts(path, EngineSettings(**settings))


def write_config(directory: Path, config: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


