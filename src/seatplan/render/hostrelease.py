#!/usr/bin/env python3
"""Run on each host by the rendered playbooks (copied there as ``bin/seatplan-release.py``): the release records
under ``HOST_DIR/releases/`` and the rollback computed from them.

Standard library only, and no seatplan import: it runs with the host's Python, where seatplan is not installed.
``render/ansible.py`` copies this file's text verbatim.

A release record (``HOST_DIR/releases/<UTC time>-<tag>.json``, one per apply and host, rewritten whole and
atomically after each step) holds the tag, the plan's SHA-256, and per step run: the seat, its action, every file it
replaced with the path of its backup (or that it added, or removed as the seat left), the starter it stopped (the
cut-over from ``started_by``), whether it (re)started the engine and the PID it then followed.

Commands (each prints one JSON line on stdout):

- ``record``: read one step's account (JSON on stdin, as the step's tasks saw it) and add it to the record.
- ``finish``: mark the record landed (every step and the host's compose.yaml done).
- ``undo``: ``--to TAG`` undoes every release recorded after TAG's newest, ``--before TAG`` TAG's too, newest first:
  each file goes back to what it was before the earliest undone release touched it (its backup, or gone when that
  release added it); nothing is written when a backup is missing or the tag is unknown. It prints which engines to
  stop, which to start again (with the port and /health URL read from the env file put back) and which starters to
  start again; ``--check`` prints the same and writes nothing.
- ``done``: the undone records move to ``releases/undone/``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import urllib.parse
from typing import Any

RECORDS = "releases"
UNDONE = "undone"
RECORD_NAME = re.compile(r"^(\d{8}T\d{12,})-(.+)\.json$")
MAX_RECORD_BYTES = 4 << 20  # a record lists a few files per seat: far below this
MAX_STDIN_BYTES = 1 << 20


def records_dir(host_dir: str) -> str:
    return os.path.join(host_dir, RECORDS)


def write_json(path: str, document: object) -> None:
    """Atomic: a temporary file beside ``path``, flushed to disk, renamed over it (a kill leaves the old or the new)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(document, out, indent=2, sort_keys=True)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(temporary, 0o666 & ~mask)  # mkstemp makes it 0600; a record is as any file the user writes
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as source:
        text = source.read(MAX_RECORD_BYTES + 1)
    if len(text) > MAX_RECORD_BYTES:
        raise ValueError(f"{path}: larger than {MAX_RECORD_BYTES} bytes")
    document = json.loads(text)
    if not isinstance(document, dict):
        raise ValueError(f"{path}: not a release record")
    return document


def mark(path: str, kind: str, date: str, tag: str) -> str:
    """ansible.py's ``mark``: ``<path>.<kind>-YYYYMMDD-<tag>``."""
    return f"{path}.{kind}-{date}-{tag}"


def step_entry(seen: dict) -> dict:
    """One step's account as the record keeps it, from what its tasks registered (ansible.py's ``record_task``)."""
    date, tag = seen["date"], seen["tag"]
    entry = {key: seen.get(key) for key in ("label", "action", "seat", "port", "health_url", "mode", "restart_command", "stop_command")}
    files = []
    for item, stat in zip(seen.get("files", []), seen.get("before", []), strict=False):
        dest, kind = item["dest"], item["kind"]
        if seen["action"] == "stop":
            if stat.get("exists") and seen.get("leaving"):
                files.append({"dest": dest, "kind": kind, "backup": mark(dest, "bak", date, tag), "removed": True})
            continue
        if not stat.get("exists"):
            files.append({"dest": dest, "kind": kind, "backup": None, "added": True})
        elif stat.get("checksum") != seen.get("sha1", {}).get(kind, ""):
            files.append({"dest": dest, "kind": kind, "backup": mark(dest, "bak", date, tag)})
    entry["stopped"] = bool(seen.get("stopped"))
    entry["cutover"] = seen.get("cutover") or None
    entry["started"] = bool(seen.get("started"))
    try:
        entry["pid"] = json.loads(seen.get("health") or "{}").get("pid")
    except ValueError:
        entry["pid"] = None
    entry["files"] = files
    return entry


def record(args: argparse.Namespace) -> int:
    seen = json.loads(sys.stdin.read(MAX_STDIN_BYTES))
    path = os.path.join(records_dir(args.host_dir), args.release + ".json")
    document = read_json(path) if os.path.exists(path) else {
        "release": args.release, "tag": seen["tag"], "plan_sha256": seen.get("plan_sha256") or None, "landed": False, "steps": []}
    document["steps"].append(step_entry(seen | {"host_dir": args.host_dir}))
    write_json(path, document)
    print(json.dumps({"record": path, "steps": len(document["steps"])}))
    return 0


def finish(args: argparse.Namespace) -> int:
    path = os.path.join(records_dir(args.host_dir), args.release + ".json")
    if not os.path.exists(path):  # nothing ran on this host (no step here): no release to record
        print(json.dumps({"record": None}))
        return 0
    document = read_json(path)
    document["landed"] = True
    write_json(path, document)
    print(json.dumps({"record": path, "landed": True}))
    return 0


def listed(host_dir: str) -> list[tuple[str, str, dict]]:
    """The host's records, oldest first: (file name, tag, record)."""
    directory = records_dir(host_dir)
    found = []
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        matched = RECORD_NAME.match(name)
        if matched:
            found.append((name, matched.group(2), read_json(os.path.join(directory, name))))
    return found


def same_content(one: str, other: str) -> bool:
    if not (os.path.isfile(one) and os.path.isfile(other)):
        return False
    with open(one, "rb") as first, open(other, "rb") as second:
        return first.read() == second.read()


def env_values(path: str) -> dict[str, str]:
    """The NAME=VALUE lines of a rendered env file that the undo needs (values are single-quoted, or plain)."""
    values = {}
    with open(path, encoding="utf-8", errors="replace") as source:
        for line in source:
            name, _, value = line.rstrip("\n").partition("=")
            if name in {"SEATPLAN_HEALTH_URL", "SEATPLAN_SEAT"}:
                values[name] = value[1:-1] if len(value) > 1 and value[0] == value[-1] == "'" else value
    return values


def undo_plan(host_dir: str, host: str, tag: str, before: bool) -> tuple[dict, list[tuple[str, str | None]]]:
    """What undoing the releases after TAG (``before``: from TAG on) takes: the plan printed, and the file moves
    (dest, backup or None to remove), newest release first so the earliest's backup is the one left in place."""
    everything = listed(host_dir)
    tags = sorted({found for _, found, _ in everything})
    at = [index for index, (_, found, _) in enumerate(everything) if found == tag]
    if not at:
        set_aside = os.path.join(records_dir(host_dir), UNDONE)
        gone = any((matched := RECORD_NAME.match(name)) and matched.group(2) == tag for name in (os.listdir(set_aside) if os.path.isdir(set_aside) else []))
        return {"host": host, "error": "rolled-back" if gone else "unknown", "tags": tags}, []
    first = at[-1] + (0 if before else 1)
    later = everything[first:]
    if not later:
        return {"host": host, "records": [], "stop": [], "start": [], "cutover_start": [], "restore_tag": None}, []
    latest: dict[str, dict] = {}  # each seat's newest step among the undone ones (its commands)
    touched: dict[str, dict] = {}  # each file's state to go back to: the earliest undone release's account wins
    cut: dict[str, list[str] | None] = {}
    stopped: set[str] = set()
    for _, _, document in reversed(later):
        for step in reversed(document.get("steps", [])):
            seat = step["seat"]
            latest.setdefault(seat, step)
            for item in step.get("files", []):
                touched[item["dest"]] = item | {"seat": seat}
            if step.get("cutover"):
                cut[seat] = step["cutover"].get("start") or None
            if step.get("stopped"):
                stopped.add(seat)
    missing = [item["backup"] for item in touched.values() if item.get("backup") and not os.path.isfile(item["backup"])]
    if missing:
        return {"host": host, "error": "missing", "missing": sorted(missing), "tags": tags}, []
    moves: list[tuple[str, str | None]] = []
    changed_seats = set(stopped)
    for dest, item in touched.items():
        backup = item.get("backup")
        if backup is None:
            if os.path.lexists(dest):
                moves.append((dest, None))
                changed_seats.add(item["seat"])
        elif not same_content(backup, dest):
            moves.append((dest, backup))
            changed_seats.add(item["seat"])
    changed_seats |= set(cut)
    order = [step["seat"] for _, _, document in everything[:first] for step in document.get("steps", [])]
    ranked = sorted(changed_seats, key=lambda seat: (order.index(seat) if seat in order else len(order), seat))
    plan: dict[str, Any] = {"host": host, "records": [name for name, _, _ in later], "restore_tag": later[0][1], "stop": [], "start": [], "cutover_start": []}
    for seat in ranked:
        step = latest[seat]
        plan["stop"].append({"name": seat, "stop_command": step.get("stop_command") or ""})
        env = os.path.join(host_dir, "env", seat + ".env")
        source = dict(moves).get(env, env) if env in dict(moves) else env  # the env file the seat runs from after the undo
        if source is not None and os.path.isfile(source) and seat not in cut:
            url = env_values(source).get("SEATPLAN_HEALTH_URL") or step.get("health_url") or ""
            port = urllib.parse.urlsplit(url).port or step.get("port") or 0
            plan["start"].append({"name": seat, "port": port, "health_url": url, "mode": step.get("mode") or "script",
                                  "restart_command": step.get("restart_command") or ""})
        if cut.get(seat):
            plan["cutover_start"].append({"name": seat, "argv": cut[seat]})
    return plan, moves


def put_back(moves: list[tuple[str, str | None]]) -> None:
    """Each file replaced whole and atomically by its backup (its mode kept), or removed."""
    for dest, backup in moves:
        if backup is None:
            os.unlink(dest)
            continue
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix="." + os.path.basename(dest) + ".", suffix=".tmp", dir=os.path.dirname(dest))
        os.close(handle)
        try:
            shutil.copy2(backup, temporary)
            os.replace(temporary, dest)
        except BaseException:
            if os.path.exists(temporary):
                os.unlink(temporary)
            raise


def undo(args: argparse.Namespace) -> int:
    tag = args.before or args.to
    plan, moves = undo_plan(args.host_dir, args.host, tag, before=bool(args.before))
    plan["files"] = [{"dest": dest, "from": backup} for dest, backup in moves]
    if args.check != "yes" and "error" not in plan:
        put_back(moves)
    print(json.dumps(plan))
    return 0


def done(args: argparse.Namespace) -> int:
    """The undone records set aside (so a later rollback does not undo them again)."""
    directory = records_dir(args.host_dir)
    for name in args.records:
        if not RECORD_NAME.match(name) or not os.path.isfile(os.path.join(directory, name)):
            continue
        os.makedirs(os.path.join(directory, UNDONE), exist_ok=True)
        os.replace(os.path.join(directory, name), os.path.join(directory, UNDONE, name))
    print(json.dumps({"undone": args.records}))
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="seatplan-release.py", description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    commands = top.add_subparsers(dest="command", required=True)
    for name in ("record", "finish"):
        command = commands.add_parser(name)
        command.add_argument("--host-dir", required=True)
        command.add_argument("--release", required=True)
    command = commands.add_parser("undo")
    command.add_argument("--host-dir", required=True)
    command.add_argument("--host", required=True)
    which = command.add_mutually_exclusive_group(required=True)
    which.add_argument("--to")
    which.add_argument("--before")
    command.add_argument("--check", choices=("yes", "no"), default="no", help="yes: print what the undo takes, write nothing")
    command = commands.add_parser("done")
    command.add_argument("--host-dir", required=True)
    command.add_argument("records", nargs="*")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return {"record": record, "finish": finish, "undo": undo, "done": done}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
