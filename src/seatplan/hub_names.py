"""What a Hugging Face model id looks like: ``ORG/NAME`` or ``ORG/NAME@REVISION``, by the Hub's own rules.

One home for the rule, because two readers ask it: the facts stage (a name that is no local directory is read from
the Hub) and the fleet loader (a model that is not beside the fleet file and cannot be a Hub id is a missing
directory, named with the path tried, rather than a question to the Hub). The Hub's rules are huggingface_hub's
``validate_repo_id``: word characters, ``-`` and ``.``, each part starting and ending with a letter or digit, at
most 96 characters, no ``--`` or ``..``, no ``.git`` ending. Only the standard library is imported here.
"""

from __future__ import annotations

import re

_HUB_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_HUB_ID = re.compile(rf"{_HUB_PART}/{_HUB_PART}")
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")


def parse_hub_id(model: str) -> tuple[str, str] | None:
    """``ORG/NAME`` or ``ORG/NAME@REVISION`` → (repo id, revision); None for anything else (a path)."""
    name, at, revision = model.partition("@")
    if not _HUB_ID.fullmatch(name) or ".." in name or "--" in name or name.endswith(".git"):
        return None
    if at and not (_REVISION.fullmatch(revision) and ".." not in revision):
        return None
    return name, revision or "main"
