"""Atomic writes with backups: a crash or a bad input never leaves a half-written file."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from seatplan.errors import SeatplanError
from seatplan.jsontext import dumps_strict

_SPECIAL_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                  (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))
INPUT_FIX = "save what it carries to a regular file first (e.g. cat SOURCE > FILE) and give that file"


def special_kind(mode: int) -> str | None:
    """What a file of ``st_mode`` is when it is no regular file (a FIFO, a device, a socket, a folder); else None."""
    return next((kind for test, kind in _SPECIAL_KINDS if test(mode)), None)


def check_input_file(path: Path, what: str) -> None:
    """An input must be a regular file (a symlink to one is): a FIFO would make the read wait for a writer for
    ever, a device such as /dev/zero never ends. A path that is missing, unreadable or a folder (which no read
    waits on) is left to the reader's own error, which names it."""
    try:
        mode = path.stat().st_mode
    except (OSError, ValueError):
        return
    kind = special_kind(mode)
    if kind is not None and kind != "a folder":
        raise SeatplanError(f"the {what} is {kind}, not a file", where=str(path), fix=INPUT_FIX)


def read_bounded_bytes(path: Path, what: str, fix: str, max_bytes: int, too_large_fix: str | None = None) -> bytes:
    """At most ``max_bytes`` of a file seatplan is handed, read before anything parses it; a file that cannot be
    read or is larger is a SeatplanError naming it (``too_large_fix``: the fix for the latter, else ``fix``); a
    FIFO or a device is refused (opened without waiting for a writer, then looked at, so no race can make it hang)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as problem:
        raise SeatplanError(f"cannot read the {what}: {problem.strerror}", where=str(path), fix=fix) from None
    try:
        kind = special_kind(os.fstat(descriptor).st_mode)
        if kind is not None and kind != "a folder":  # a folder's read fails at once, with the reader's own words
            raise SeatplanError(f"the {what} is {kind}, not a file", where=str(path), fix=INPUT_FIX)
        with os.fdopen(descriptor, "rb", closefd=False) as stream:
            raw = stream.read(max_bytes + 1)
    except OSError as problem:
        raise SeatplanError(f"cannot read the {what}: {problem.strerror}", where=str(path), fix=fix) from None
    finally:
        os.close(descriptor)
    if len(raw) > max_bytes:
        raise SeatplanError(f"the {what} is larger than {max_bytes:,} bytes", where=str(path), fix=too_large_fix or fix)
    return raw


def backup_name(path: Path, now: datetime | None = None, tag: str = "seatplan") -> Path:
    """``FILE.bak-YYYYMMDD-HHMMSS-TAG``: sorts by time and says who made it."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    return path.with_name(f"{path.name}.bak-{stamp}-{tag}")


def free_backup_name(path: Path, now: datetime | None = None) -> Path:
    """:func:`backup_name`, with ``-2``, ``-3``, … when a backup of the same second exists (two runs in one second)."""
    first = backup_name(path, now)
    candidate, number = first, 1
    while candidate.exists():
        number += 1
        candidate = first.with_name(f"{first.name}-{number}")
    return candidate


def current_umask() -> int:
    """The process's umask, read where Linux shows it (/proc/self/status, no state changed); elsewhere set and
    put back at once, the only portable way."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def as_umask_allows(path: Path, mode: int = 0o666) -> None:
    """Give a file made by ``mkstemp``/``mkdtemp`` (always 0600/0700) the mode a plain ``open``/``mkdir`` would
    have given it, so that a report or render directory can be served or read by the group as the umask says."""
    os.chmod(path, mode & ~current_umask())


# renameat2(2)'s flag: swap two paths in one step (Linux 3.15+, most local file systems).
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange_paths(first: Path, second: Path) -> bool:
    """Swap two existing paths atomically, so no moment has neither in place; False where the system cannot
    (not Linux, an old kernel or C library, a file system without it), and the caller renames twice instead."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(first), None, str(second))


def check_output_file(output: Path, what: str, example_name: str) -> None:
    """Refuse, before any work, an ``-o`` that names a folder or lies under a file: the write would fail only
    after the work (or, for a folder, read it as the old file). ``example_name`` is the file name the fix offers."""
    if output.is_dir():
        raise SeatplanError(f"is a folder, not the {what} to write", where=f"-o {output}", fix=f"give a file name, e.g. -o {output / example_name}")
    _check_writable_kind(output, f"-o {output}")
    for parent in output.parents:
        if parent.exists():
            if not parent.is_dir():
                raise SeatplanError(f"{parent} is a file, so nothing can be written under it", where=f"-o {output}",
                                    fix="give -o a path in an existing folder")
            return


def _check_writable_kind(target: Path, where: str) -> bool:
    """True when ``target`` is a character device (/dev/null, a terminal): written in place, never replaced by a
    rename (which would put a regular file where the device was); a FIFO, a socket or a block device is refused
    (a FIFO with no reader would make the write wait for ever). False for a regular or missing file."""
    try:
        mode = target.stat().st_mode
    except (OSError, ValueError):
        return False
    if stat.S_ISCHR(mode):
        return True
    kind = special_kind(mode)
    if kind is not None and kind != "a folder":
        raise SeatplanError(f"is {kind}, not a file to write", where=where,
                            fix="give a regular file's path (seatplan writes a new file and renames it into place)")
    return False


def _write_device(target: Path, text: str) -> None:
    with target.open("w", encoding="utf-8") as stream:
        stream.write(text)


def write_output_text(output: Path, text: str, what: str) -> Path | None:
    """:func:`atomic_write_text` for a command's ``-o``: a write the system refuses (a read-only folder, a full
    disk) is an ``error:`` naming the option and the path, not a traceback."""
    try:
        return atomic_write_text(output, text)
    except OSError as problem:
        raise SeatplanError(f"cannot write the {what} ({problem.strerror or problem})", where=f"-o {output}",
                            fix="give -o a file path in a folder you can write to") from None


def write_output_json(output: Path, document: Any, what: str) -> Path | None:
    return write_output_text(output, strict_json_text(document), what)


def strict_json_text(document: Any) -> str:
    return dumps_strict(document, indent=2, sort_keys=False) + "\n"


def atomic_write_text(path: str | os.PathLike[str], text: str, *, backup: bool = True, mode: int | None = None) -> Path | None:
    """Write ``text`` to ``path`` via a temporary file and rename; return the backup path if one was made.

    The old file is copied aside first only when its content changes, so repeated runs do not
    pile up identical backups. A folder at ``path`` is refused (it would otherwise be read as the old file).
    """
    target = Path(path)
    if target.is_dir():
        raise SeatplanError("is a folder, not a file to write", where=str(target), fix=f"give a file name, e.g. {target / 'NAME'}")
    if _check_writable_kind(target, str(target)):
        _write_device(target, text)
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    backup_path: Path | None = None
    if target.exists():
        if target.read_text(errors="replace") == text:
            return None
        if backup:
            backup_path = free_backup_name(target)
            shutil.copy2(target, backup_path)
    handle, temp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        if mode is not None:
            os.chmod(temp_name, mode)
        elif target.exists():
            os.chmod(temp_name, target.stat().st_mode & 0o7777)
        else:
            as_umask_allows(Path(temp_name))
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return backup_path


def atomic_write_json(path: str | os.PathLike[str], document: Any, *, backup: bool = True) -> Path | None:
    """Strict JSON (non-finite numbers as null), written atomically."""
    return atomic_write_text(path, strict_json_text(document), backup=backup)
