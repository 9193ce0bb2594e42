"""Every input that once broke a reader (tests/fuzz/corpus/<target>/<outcome>--<name>), replayed as a regression test.

The file name says the outcome the reader must reach: ``refused--`` a located error with a fix, ``accepted--`` a result
(with its bad lines or rows left out and counted). A traceback, a hang, or the other outcome fails the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kits import fuzz_targets as targets

CORPUS = Path(__file__).parent / "corpus"
CASES = sorted(path for path in CORPUS.glob("*/*") if path.is_file())


def test_the_corpus_covers_every_target() -> None:
    assert {path.parent.name for path in CASES} == set(targets.TARGETS)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", CASES, ids=[f"{path.parent.name}/{path.name}" for path in CASES])
def test_corpus_input(path: Path) -> None:
    expected = path.name.split("--", 1)[0]
    assert expected in ("accepted", "refused"), f"name {path.name} must start with accepted-- or refused--"
    assert targets.TARGETS[path.parent.name](path.read_bytes()) == expected
