"""What a model read from the Hub leaves on disk for the facts stage: the record of where a facts directory came from,
and the commit a directory holds.

Every model's facts ask :func:`commit_of` (a local checkout answers None); only a Hub id needs :mod:`seatplan.facts.hub`,
whose ``huggingface_hub`` and HTTP stack take 0.15-0.25 s to load, a third of a `seatplan plan` run on local models.
So this part stays apart, with no network import.
"""

from __future__ import annotations

import re
from pathlib import Path

from seatplan.facts import reader

__all__ = ["CACHED_COMMIT", "RECORD", "commit_of"]

RECORD = "seatplan-hub.json"  # what the facts directory was read from: repo, revision, commit, endpoint
CACHED_COMMIT = re.compile(r"[0-9A-Za-z]{1,64}")  # what a Hub cache ref or snapshot may name (mirrors vary)


def commit_of(directory: Path) -> str | None:
    """The commit a facts directory (or a Hub cache snapshot) holds; None for a plain local directory."""
    record = directory / RECORD
    if record.is_file():
        commit = reader.read_json(record).get("commit")
        return commit if isinstance(commit, str) else None
    if directory.parent.name == "snapshots" and directory.parent.parent.name.startswith("models--") \
            and CACHED_COMMIT.fullmatch(directory.name):
        return directory.name
    return None
