"""The secrets the tests hand seatplan (a database password, an API key), and the scan for them in what tests leave.

No artefact a test leaves, and no captured output, may contain them: ``tests/conftest.py`` scans every file under
the session's temporary directory at the end. A file that holds a secret as an input on purpose is named
``*.secret`` and skipped.
"""

from __future__ import annotations

from pathlib import Path

TEST_SECRETS = ("S3cr3t-pw-7f2c-seatplan", "sk-seatplan-test-9a41d0c7")


def files_holding_secrets(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.is_symlink() or path.name.endswith(".secret"):
            continue
        try:
            with path.open("rb") as stream:
                data = stream.read()
        except OSError:
            continue
        found.extend(f"{path}: {secret[:4]}..." for secret in TEST_SECRETS if secret.encode() in data)
    return found
