"""Writing a render: the whole directory is built beside DIR and swapped in, so DIR is never half-written.

Files of targets not rendered this time are carried over as they are; the previous DIR is kept as
``DIR.bak-YYYYMMDD-HHMMSS-seatplan`` when anything changed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from seatplan.errors import SeatplanError
from seatplan.fileio import as_umask_allows, exchange_paths, free_backup_name
from seatplan.render.bundle import MANIFEST
from seatplan.render.settings import Target
from seatplan.render.targets import Files

# What each target owns under DIR: a re-render replaces all of it (a removed seat's env file goes too).
TARGET_PATHS: dict[Target, tuple[str, ...]] = {
    "env": ("env/",),
    "compose": ("compose.yaml", "compose/"),
    "ansible": ("ansible/", "systemd/", "env/"),
    "litellm": ("litellm/",),
    "prometheus": ("prometheus/",),
}


@dataclass(frozen=True)
class WriteResult:
    directory: Path
    changed: list[str]
    removed: list[str]
    backup: Path | None


def read_tree(directory: Path) -> Files:
    if not directory.is_dir():
        return {}
    return {path.relative_to(directory).as_posix(): path.read_text(encoding="utf-8", errors="replace") for path in sorted(directory.rglob("*")) if path.is_file()}


def owned(path: str, targets: Iterable[Target]) -> bool:
    return path == MANIFEST or any(path == prefix or (prefix.endswith("/") and path.startswith(prefix)) for target in targets for prefix in TARGET_PATHS[target])


def merged_tree(old: Files, new: Files, targets: Iterable[Target], manifest_text: str) -> Files:
    targets = list(targets)
    tree = {path: text for path, text in old.items() if not owned(path, targets)}
    tree |= new
    tree[MANIFEST] = manifest_text
    return tree


def write_render(directory: Path, new: Files, targets: Iterable[Target], manifest_text: str) -> WriteResult:
    old = read_tree(directory)
    tree = merged_tree(old, new, targets, manifest_text)
    content = {path: text for path, text in tree.items() if path != MANIFEST}
    changed = sorted(path for path, text in content.items() if old.get(path) != text)
    removed = sorted(path for path in old if path not in tree)
    if not changed and not removed and directory.is_dir():
        return WriteResult(directory, [], [], None)
    parent = directory.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".render", dir=parent))
    try:
        as_umask_allows(staging, 0o777)  # mkdtemp makes it 0700; the render directory is as mkdir would make it
        for path, text in tree.items():
            target = staging / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            if path.endswith(".sh"):
                as_umask_allows(target, 0o777)
        backup = swap_in(staging, directory)
    except OSError as problem:
        shutil.rmtree(staging, ignore_errors=True)
        raise SeatplanError(f"cannot write the rendered files: {problem.strerror}", where=str(directory), fix="check the directory's permissions and free space") from None
    return WriteResult(directory, changed, removed, backup)


def swap_in(staging: Path, directory: Path) -> Path | None:
    """Put ``staging`` where ``directory`` is; the old one becomes the backup.

    The two are exchanged in one step where the system can (a kill at any moment leaves DIR whole, old or
    new); elsewhere DIR is renamed aside first and put back if the second rename fails.
    """
    if not directory.exists():
        os.replace(staging, directory)
        return None
    backup = free_backup_name(directory)
    if exchange_paths(staging, directory):
        os.replace(staging, backup)  # staging now holds the previous render
        return backup
    os.replace(directory, backup)
    try:
        os.replace(staging, directory)
    except OSError:
        os.replace(backup, directory)
        raise
    return backup


def read_manifest(directory: Path) -> dict | None:
    path = directory / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as problem:
        raise SeatplanError(f"the render manifest is not JSON: {problem.msg}", where=f"{path}:{problem.lineno}", fix="render the directory again") from None
