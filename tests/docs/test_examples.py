"""The walkthrough's sample inputs are what scripts/make_examples.py writes, and small enough to ship."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kits.paths import REPO_ROOT

NIGHT = REPO_ROOT / "examples" / "night"


def test_examples_are_regenerated_byte_for_byte(tmp_path: Path):
    done = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "make_examples.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    written = sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*") if path.is_file())
    shipped = sorted(path.relative_to(NIGHT) for path in NIGHT.rglob("*") if path.is_file() and path.name != "README.md")
    assert written == shipped
    for name in written:
        assert (tmp_path / name).read_bytes() == (NIGHT / name).read_bytes(), name
        assert (NIGHT / name).stat().st_size < 2 * 2**20, name
