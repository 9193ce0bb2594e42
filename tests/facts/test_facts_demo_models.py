"""The demo model directories are verbatim copies of the fixtures, listed in PROVENANCE.md, and load."""

from __future__ import annotations

import pytest

from kits.facts import facts
from kits.paths import MODEL_FIXTURES, REPO_ROOT

DEMO_MODELS = REPO_ROOT / "examples" / "demo" / "models"
DEMO_DIRS = sorted(path for path in DEMO_MODELS.iterdir() if path.is_dir())


def test_demo_models_exist():
    assert len(DEMO_DIRS) >= 8


@pytest.mark.parametrize("directory", DEMO_DIRS, ids=lambda path: path.name)
def test_demo_model_is_a_fixture_copy_with_provenance(directory):
    for file in directory.iterdir():
        assert file.read_bytes() == (MODEL_FIXTURES / directory.name / file.name).read_bytes()
    assert f"`{directory.name}`" in (DEMO_MODELS / "PROVENANCE.md").read_text()
    assert facts(directory).kv_bytes_per_token > 0
