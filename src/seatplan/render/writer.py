"""Writing a render: the whole directory is built beside DIR and swapped in, so DIR is never half-written.

``seatplan apply`` stages its render the same way (``.DIR.XXXX.apply`` beside DIR), runs the playbook from there,
and swaps it in only once the release has landed: after a failed apply DIR still holds what runs.

Files of targets not rendered this time are carried over as they are; the previous DIR is kept as
``DIR.bak-YYYYMMDD-HHMMSS-seatplan`` when anything changed. Every path is checked to lie inside DIR
before anything is written, DIR itself must be a directory seatplan rendered (or new), and a failed
write leaves no staging directory behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from seatplan.documents.io import read_bounded_json, validated
from seatplan.encode import control_character
from seatplan.errors import SeatplanError
from seatplan.fileio import as_umask_allows, exchange_paths, free_backup_name
from seatplan.render.bundle import MANIFEST, RenderManifest
from seatplan.render.settings import Target
from seatplan.render.targets import Files

# What each target owns under DIR: a re-render replaces all of it (a removed seat's env file goes too).
TARGET_PATHS: dict[Target, tuple[str, ...]] = {
    "env": ("env/",),
    "compose": ("compose.yaml", "compose/", "compose-seats/"),
    "ansible": ("ansible/", "systemd/", "env/", "bin/", "compose-seats/"),
    "litellm": ("litellm/",),
    "prometheus": ("prometheus/",),
    "kubernetes": ("kubernetes/",),  # the releases apply records (kubernetes-releases/) stay: a re-render keeps them
}
RENDER_AGAIN = "render the directory again (seatplan render PLAN -o DIR), or give a new -o"


@dataclass(frozen=True)
class WriteResult:
    directory: Path
    changed: list[str]
    removed: list[str]
    backup: Path | None


def output_directory(directory: Path) -> Path:
    """DIR as an absolute path (``-o .`` names the current directory, not ``''``), refused when it is a
    symlink, not a directory, or a directory holding files that no seatplan render wrote."""
    absolute = Path(os.path.abspath(directory))
    if absolute.is_symlink():
        raise SeatplanError("the output is a symbolic link; render replaces DIR whole, which would replace the link",
                            where=str(directory), fix="give the directory the link points to, or a new -o")
    if absolute.exists() and not absolute.is_dir():
        raise SeatplanError("the output exists and is not a directory", where=str(directory), fix="give a directory for -o (a new one, or one seatplan rendered)")
    if absolute.is_dir() and not (absolute / MANIFEST).is_file() and any(absolute.iterdir()):
        raise SeatplanError(f"the directory holds files but no {MANIFEST}, so seatplan did not render it; render replaces DIR whole",
                            where=str(directory), fix="give a new or empty directory for -o")
    return absolute


def read_tree(directory: Path) -> Files:
    """The files under DIR by relative path; symbolic links are not followed (nor carried over)."""
    if not directory.is_dir() or directory.is_symlink():
        return {}
    files = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and not path.is_symlink() and not any(parent.is_symlink() for parent in path.relative_to(directory).parents if str(parent) != "."):
            files[path.relative_to(directory).as_posix()] = path.read_text(encoding="utf-8", errors="replace")
    return files


def owned(path: str, targets: Iterable[Target]) -> bool:
    return path == MANIFEST or any(path == prefix or (prefix.endswith("/") and path.startswith(prefix)) for target in targets for prefix in TARGET_PATHS[target])


def merged_tree(old: Files, new: Files, targets: Iterable[Target], manifest_text: str) -> Files:
    targets = list(targets)
    tree = {path: text for path, text in old.items() if not owned(path, targets)}
    tree |= new
    tree[MANIFEST] = manifest_text
    return tree


def inside(root: Path, relative: str) -> Path:
    """``root / relative``, refused unless ``relative`` is a plain relative path that stays under ``root``."""
    parts = PurePosixPath(relative).parts
    bad = control_character(relative)
    if not relative or bad is not None or PurePosixPath(relative).is_absolute() or any(part in ("..", ".") for part in parts) or "\\" in relative:
        shown = ascii(relative) if bad else repr(relative)
        raise SeatplanError(f"the rendered path {shown} would lie outside the output directory", where=str(root),
                            fix="rename the host or seat in the fleet file (names are letters, digits, `.`, `_` and `-`) and re-plan")
    target = root / relative
    if not target.resolve().is_relative_to(root.resolve()):
        raise SeatplanError(f"the rendered path {relative!r} resolves outside the output directory", where=str(root), fix=RENDER_AGAIN)
    return target



@dataclass(frozen=True)
class Planned:
    """What a render makes of DIR: the whole tree, and the paths it changes or removes against DIR now."""

    directory: Path  # absolute
    tree: Files
    changed: list[str]
    removed: list[str]


def planned_tree(directory: Path, new: Files, targets: Iterable[Target], manifest_text: str) -> Planned:
    directory = output_directory(directory)
    old = read_tree(directory)
    tree = merged_tree(old, new, targets, manifest_text)
    for path in tree:
        inside(directory, path)  # every path checked before anything is written
    content = {path: text for path, text in tree.items() if path != MANIFEST}
    changed = sorted(path for path, text in content.items() if old.get(path) != text)
    removed = sorted(path for path in old if path not in tree)
    return Planned(directory, tree, changed, removed)


def write_render(directory: Path, new: Files, targets: Iterable[Target], manifest_text: str) -> WriteResult:
    planned = planned_tree(directory, new, targets, manifest_text)
    if not planned.changed and not planned.removed and planned.directory.is_dir():
        return WriteResult(directory, [], [], None)
    return WriteResult(directory, planned.changed, planned.removed, write_staged(planned.directory, planned.tree, directory))


def write_staged(directory: Path, tree: Files, shown: Path) -> Path | None:
    """Build the tree in a staging directory beside DIR and swap it in; on any failure the staging goes."""
    staging = build_staging(directory, tree, shown, ".render")
    try:
        backup = swap_in(staging, directory)
    except OSError as problem:
        shutil.rmtree(staging, ignore_errors=True)
        raise cannot_write(problem, shown) from None
    return backup


def cannot_write(problem: OSError, shown: Path) -> SeatplanError:
    return SeatplanError(f"cannot write the rendered files: {problem.strerror or problem}", where=str(shown),
                         fix="check that the directory's parent exists and is writable, and that there is free space")


def build_staging(directory: Path, tree: Files, shown: Path, suffix: str) -> Path:
    """The tree written whole into a new directory beside DIR (``.DIR.XXXX<suffix>``); on any failure it goes."""
    staging: Path | None = None
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=suffix, dir=directory.parent))
        as_umask_allows(staging, 0o777)  # mkdtemp makes it 0700; the render directory is as mkdir would make it
        for path, text in tree.items():
            target = inside(staging, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            if path.endswith(".sh"):
                as_umask_allows(target, 0o777)
        built, staging = staging, None
        return built
    except OSError as problem:
        raise cannot_write(problem, shown) from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


@dataclass(frozen=True)
class Staged:
    """A render built beside DIR for apply to run from: DIR takes it only once the release has landed (issue 43)."""

    directory: Path  # DIR, absolute
    staging: Path
    changed: list[str]
    removed: list[str]
    shown: Path

    def promote(self) -> Path | None:
        """The staged render becomes DIR (atomically; the previous one kept as DIR.bak-…-seatplan); None when nothing
        changed (DIR kept as it is, the staging removed) or DIR is new."""
        if not self.changed and not self.removed and self.directory.is_dir():
            self.discard()
            return None
        try:
            return swap_in(self.staging, self.directory)
        except OSError as problem:
            raise cannot_write(problem, self.shown) from None

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def stage_render(directory: Path, new: Files, targets: Iterable[Target], manifest_text: str) -> Staged:
    """What ``write_render`` would make DIR, built in a staging directory beside it; DIR is not touched."""
    planned = planned_tree(directory, new, targets, manifest_text)
    return Staged(planned.directory, build_staging(planned.directory, planned.tree, directory, ".apply"), planned.changed, planned.removed, directory)


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
        try:
            os.replace(staging, backup)  # staging now holds the previous render
        except OSError:
            exchange_paths(staging, directory)  # the previous render back in DIR; the caller removes the new one
            raise
        return backup
    os.replace(directory, backup)
    try:
        os.replace(staging, directory)
    except OSError:
        os.replace(backup, directory)
        raise
    return backup


def read_manifest(directory: Path) -> RenderManifest | None:
    """DIR's manifest, checked; None when DIR has none (a new directory)."""
    path = directory / MANIFEST
    if not path.is_file():
        return None
    return validated(RenderManifest, read_bounded_json(path, "render manifest", RENDER_AGAIN), str(path), RENDER_AGAIN)
