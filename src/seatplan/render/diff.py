"""Seat by seat, what a render would change against an earlier render (a directory or an older plan)."""

from __future__ import annotations

import difflib
from typing import Literal

from pydantic import BaseModel, Field

from seatplan.engine.change import seat_change
from seatplan.engine.launch import seat_launch_from_env
from seatplan.engine.parse import parse_env
from seatplan.errors import SeatplanError
from seatplan.render.bundle import MANIFEST
from seatplan.render.targets import Files

Status = Literal["new", "removed", "changed", "unchanged"]
ENV_PREFIX = "env/"
# How to roll out, not what runs: the playbook carries the plan's rollout steps, which differ between a plan made
# knowing what runs and one made without, though neither changes an engine. Shown, never counted as a change.
ROLLOUT_PREFIX = "ansible/"


class Change(BaseModel):
    what: str
    old: str | None
    new: str | None


class SeatDiff(BaseModel):
    seat: str
    status: Status
    changes: list[Change] = Field(default_factory=list)
    # a new seat starts; a changed one restarts where engine.change says the change needs it (not for a pinned seat's
    # utilisation, read only at start, nor for comments), or where its compose service or drop-in changed
    restarts: bool = False


class FileDiff(BaseModel):
    path: str
    status: Status
    diff: str = ""


class DiffReport(BaseModel):
    against: str
    changed: bool
    seats: list[SeatDiff]
    files: list[FileDiff]
    warnings: list[str] = Field(default_factory=list)


def env_changes(old_text: str, new_text: str) -> tuple[list[Change], bool]:
    """What differs between two env files of a seat, on what the engine runs (``engine.change``, the one change model
    plan's rollout and apply use too), and whether that needs a restart; a file that differs in nothing the engine
    reads differs in its comments."""
    old_env, new_env = parse_env(old_text), parse_env(new_text)
    change = seat_change(seat_launch_from_env(old_env), seat_launch_from_env(new_env))
    changes = [Change(what=difference.what, old=difference.old, new=difference.new) for difference in change.differences]
    if not changes and old_text != new_text:
        changes.append(Change(what="comments", old=None, new=None))
    return changes, change.restart


def status_of(old: str | None, new: str | None) -> Status:
    if old is None:
        return "new"
    if new is None:
        return "removed"
    return "unchanged" if old == new else "changed"


def unified(old: str, new: str, path: str) -> str:
    """``diff -u`` of two texts, as difflib.unified_diff writes it but without its "autojunk" rule: in a file of
    200 lines or more, difflib ignores lines that recur often (compose.yaml's `- '1024'`, `- --max-num-seqs`), and
    a changed engine's unchanged flags then show as removed and added again."""
    before, after = old.splitlines(True), new.splitlines(True)
    lines: list[str] = []
    for group in difflib.SequenceMatcher(None, before, after, autojunk=False).get_grouped_opcodes(3):
        if not lines:
            lines += [f"--- a/{path}\n", f"+++ b/{path}\n"]
        lines.append(f"@@ -{_hunk_range(group[0][1], group[-1][2])} +{_hunk_range(group[0][3], group[-1][4])} @@\n")
        for tag, old_start, old_end, new_start, new_end in group:
            if tag == "equal":
                lines += [" " + line for line in before[old_start:old_end]]
                continue
            lines += ["-" + line for line in before[old_start:old_end]] + ["+" + line for line in after[new_start:new_end]]
    return "".join(lines)


def _hunk_range(start: int, stop: int) -> str:
    """A hunk's line range as ``diff -u`` writes it: ``first,count``, ``first`` alone for one line, and the line
    before an empty range."""
    count = stop - start
    first = start + 1 if count else start
    return str(first) if count == 1 else f"{first},{count}"


def located(path: str, against: str, old_text: str, new_text: str) -> tuple[list[Change], bool]:
    """:func:`env_changes`, with a problem located in the env file it came from."""
    try:
        return env_changes(old_text, new_text)
    except SeatplanError as problem:
        raise SeatplanError(problem.message, where=f"{against}/{path}", fix=problem.fix) from None


def own_files(seat: str) -> dict[str, str]:
    """A seat's files besides its env file, by what a change shows as (render/ansible.py copies them per seat)."""
    return {"its compose service (compose-seats/)": f"compose-seats/{seat}.yaml", "its systemd drop-in": f"systemd/seatplan-vllm@{seat}.service.d/seatplan.conf"}


def diff_trees(old: Files, new: Files, against: str) -> DiffReport:
    seat_paths = sorted(path for path in set(old) | set(new) if path.startswith(ENV_PREFIX) and path.endswith(".env"))
    seats = []
    for path in seat_paths:
        name = path[len(ENV_PREFIX) : -len(".env")]
        status = status_of(old.get(path), new.get(path))
        changes, restarts = located(path, against, old[path], new[path]) if status == "changed" else ([], status == "new")
        if status == "unchanged":
            # apply restarts a seat when any of its own files changes (ansible.py: the seat's compose service, its drop-in)
            for what, own in own_files(name).items():
                if (own in old or own in new) and old.get(own) != new.get(own):
                    status, restarts = "changed", True
                    changes.append(Change(what=what, old=None, new=None))
        seats.append(SeatDiff(seat=name, status=status, changes=changes, restarts=restarts))
    files = []
    for path in sorted((set(old) | set(new)) - set(seat_paths) - {MANIFEST}):
        status = status_of(old.get(path), new.get(path))
        text = "" if status == "unchanged" else unified(old.get(path) or "", new.get(path) or "", path)
        files.append(FileDiff(path=path, status=status, diff=text))
    changed = any(seat.status != "unchanged" for seat in seats) or any(item.status != "unchanged" for item in files if not item.path.startswith(ROLLOUT_PREFIX))
    return DiffReport(against=against, changed=changed, seats=seats, files=files)
