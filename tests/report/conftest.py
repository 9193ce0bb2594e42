from __future__ import annotations

import pytest

from report.night import NightDocuments, make_documents


@pytest.fixture(scope="session")
def night(tmp_path_factory: pytest.TempPathFactory) -> NightDocuments:
    return make_documents(tmp_path_factory.mktemp("night"))
