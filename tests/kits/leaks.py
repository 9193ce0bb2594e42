"""The secrets the tests hand seatplan (a database password, an API key), and the scan for them in what tests leave.

No artefact a test leaves, and no captured output, may contain them: ``tests/conftest.py`` scans every file under
the session's temporary directory at the end. A file that holds a secret as an input on purpose is named
``*.secret`` and skipped.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

TEST_SECRETS = ("S3cr3t-pw-7f2c-seatplan", "sk-seatplan-test-9a41d0c7")


CHUNK_BYTES = 1 << 20


def files_holding_secrets(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.is_symlink() or path.name.endswith(".secret"):
            continue
        try:
            held = secrets_in(path)
        except OSError:
            continue
        found.extend(f"{path}: {secret[:4]}..." for secret in held)
    return found


def secrets_in(path: Path) -> set[str]:
    """The test secrets in one file, read in chunks and only where it holds data: a test leaves sparse files that
    announce gigabytes (a Hub that ignores a range read), whose holes are zeros and cannot hold a secret."""
    wanted = [secret.encode() for secret in TEST_SECRETS]
    overlap = max(map(len, wanted)) - 1
    held: set[str] = set()
    with path.open("rb") as stream:
        size = os.fstat(stream.fileno()).st_size
        for start, end in data_regions(stream.fileno(), size):
            stream.seek(start)
            tail = b""
            while start < end:
                chunk = stream.read(min(CHUNK_BYTES, end - start))
                if not chunk:
                    break
                start += len(chunk)
                window = tail + chunk
                held.update(secret.decode() for secret in wanted if secret in window)
                tail = window[-overlap:]
    return held


def data_regions(descriptor: int, size: int) -> list[tuple[int, int]]:
    """(start, end) of each stretch that holds data (lseek SEEK_DATA/SEEK_HOLE); the whole file where holes are not told."""
    if not hasattr(os, "SEEK_DATA"):
        return [(0, size)]
    regions, offset = [], 0
    while offset < size:
        try:
            start = os.lseek(descriptor, offset, os.SEEK_DATA)
        except OSError as problem:
            if problem.errno == errno.ENXIO:  # no data after offset: the rest is a hole
                break
            return [(0, size)]
        end = os.lseek(descriptor, start, os.SEEK_HOLE)
        regions.append((start, end))
        offset = end
    return regions
