"""Where the repository and its test fixtures are, for tests and kits that read shipped files."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
MODEL_FIXTURES = FIXTURES / "models"
FORMAT_FIXTURES = FIXTURES / "formats"
