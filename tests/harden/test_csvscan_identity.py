"""The compiled CSV reader's binding refuses a library that is not the one it was written for (a stale .so)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from kits.parts import require
from seatplan.usage import csvscan


def build(tmp_path: Path, name: str, source: str) -> ctypes.CDLL:
    compiler = shutil.which("cc") or shutil.which("gcc")
    require(compiler is not None, "a C compiler")
    (tmp_path / f"{name}.c").write_text(source)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(tmp_path / f"{name}.so"), str(tmp_path / f"{name}.c")], check=True)
    return ctypes.CDLL(str(tmp_path / f"{name}.so"))


def test_the_installed_library_is_the_one_the_binding_calls() -> None:
    require(csvscan.available(), "seatplan's compiled CSV reader (a C compiler when pip installs seatplan)")
    assert csvscan.unavailable_reason() is None


@pytest.mark.parametrize(("name", "source", "words"), [
    ("before-the-check", "int seatplan_scan_lines(void) { return 0; }\n", "no seatplan_csvscan_abi"),
    ("older-abi", 'int seatplan_csvscan_abi(void) { return 1; }\n'
                  'const char *seatplan_csvscan_signature(void) { return "abi=1 int seatplan_scan_lines(...)"; }\n', "ABI 1"),
    ("same-number-other-signature", 'int seatplan_csvscan_abi(void) { return 2; }\n'
                                    'const char *seatplan_csvscan_signature(void) { return "abi=2 slots=32"; }\n', "slots=32"),
])
def test_a_stale_library_is_refused_before_any_call(tmp_path: Path, name: str, source: str, words: str) -> None:
    library = build(tmp_path, name, source)
    with pytest.raises(csvscan.StaleLibrary) as refused:
        csvscan.check_identity(library, tmp_path / f"{name}.so")
    assert words in str(refused.value)
