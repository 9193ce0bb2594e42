"""Running the rendered playbooks with ``ansible-playbook`` (seatplan opens no SSH of its own)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from seatplan.encode import check_name
from seatplan.errors import SeatplanError

# ansible.py's NO_BACKUPS message, as the default callback prints the failed task's msg
NO_BACKUPS_OUTPUT = re.compile(r'"msg": "seatplan-no-backups: on ([^"]*); tags there: ([^"]*)"')
# ansible.py's ROLLBACK_FAILED message: a backup a release record names is gone
ROLLBACK_FAILED_OUTPUT = re.compile(r'"msg": "seatplan-rollback-failed: on ([^"]*?): ((?:[^"\\]|\\.)*)"')
# ansible.py's STEP_FAILED message: the step's label, then what went wrong and what was put back
STEP_FAILED_OUTPUT = re.compile(r'"msg": "seatplan-step-failed: (step \d+/\d+ \([^)]*\)) failed at ((?:[^"\\]|\\.)*)"')

# ansible.py's MISSING_SECRETS message: the host, then one line per seat and secret that would not reach its engine
MISSING_SECRETS_OUTPUT = re.compile(r'"msg": "seatplan-secrets-missing: on ((?:[^"\\]|\\.)*)"')

# ansible.py's REFUSED message: the host, then one line per seat whose port a stranger holds
REFUSED_OUTPUT = re.compile(r'"msg": "seatplan-port-refused: on ((?:[^"\\]|\\.)*)"')
# ansible.py's OBSERVED lines (the debug task prints each as msg): the host, then hostcheck.observe's JSON for one seat
OBSERVED_OUTPUT = re.compile(r'"msg": "seatplan-observed (\S+) ((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class PlaybookRun:
    command: list[str]
    returncode: int
    output: str


def ansible_playbook() -> str:
    """``ansible-playbook`` on PATH, or beside this Python (a virtualenv's bin/)."""
    found = shutil.which("ansible-playbook") or shutil.which("ansible-playbook", path=str(Path(sys.executable).parent))
    if found is None:
        # seatplan's own declared dependency (pyproject.toml's `apply` extra), installed beside this Python, where it is
        # looked for above; scripts/demo.sh installs it in a checkout
        raise SeatplanError("ansible-playbook is not installed", fix=f"install it beside seatplan: {shlex.quote(sys.executable)} -m pip install "
                            "'ansible-core>=2.16' (seatplan's `apply` extra: pip install -e '.[apply]' in a checkout)")
    return found


def extra_vars(pairs: Sequence[str]) -> list[str]:
    words = []
    for pair in pairs:
        if "=" not in pair:
            raise SeatplanError(f"-e {pair!r} is not KEY=VALUE", where="-e", fix="write -e seatplan_host_dir=/srv/seatplan")
        words += ["-e", pair]
    return words


def playbook_command(playbook: Path, inventory: Path, *, tag: str, check: bool, extra: Sequence[str]) -> list[str]:
    if not playbook.is_file():
        raise SeatplanError(f"no playbook at {playbook}", where=str(playbook), fix="render the plan first: seatplan render PLAN --target ansible -o DIR")
    if not inventory.exists():
        raise SeatplanError("the inventory does not exist", where=str(inventory), fix="pass --inventory with your Ansible inventory (or DIR/ansible/inventory.yaml)")
    check_name("tag", tag, "--tag / --to")
    # as JSON: `-e KEY=VALUE` splits VALUE at spaces into more variables
    command = [ansible_playbook(), "-i", str(inventory), str(playbook), "-e", json.dumps({"seatplan_tag": tag})]
    if check:
        command += ["--check", "--diff"]
    return command + extra_vars(extra)


def run_playbook(command: list[str], *, echo: TextIO | None) -> PlaybookRun:
    """Run it; stream its output to ``echo`` as it comes, and keep it either way."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    lines = []
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
        if echo is not None:
            echo.write(line)
            echo.flush()
    return PlaybookRun(command, process.wait(), "".join(lines))


def missing_backups(run: PlaybookRun, tag: str) -> SeatplanError | None:
    """The rollback playbook's refusal of a tag with no backups, as error/fix naming the tags that exist."""
    found = NO_BACKUPS_OUTPUT.search(run.output)
    if found is None:
        return None
    host, tags = found.groups()
    there = ", ".join(tags.split()) if tags != "(none)" else "none"
    return SeatplanError(f"no release tagged {tag} is recorded on host {host}; tags there: {there}", where="--to",
                         fix="pass --to with one of the tags there (apply --tag names them)" if there != "none"
                         else "there is nothing to roll back to: each apply records its release on the host")


def rollback_failed(run: PlaybookRun) -> SeatplanError | None:
    """The rollback playbook's refusal when a backup the records name is missing (nothing was put back)."""
    found = ROLLBACK_FAILED_OUTPUT.search(run.output)
    if found is None:
        return None
    return SeatplanError(f"cannot roll back on host {found.group(1)}: {found.group(2)}", where="--to",
                         fix="put the missing backup files back (apply writes them beside each file it replaces), or roll back to a later tag")


def failed_step(run: PlaybookRun) -> tuple[str, str] | None:
    """The rollout step a failed apply stopped at, and the playbook's account of it (what failed, what was put back)."""
    found = STEP_FAILED_OUTPUT.search(run.output)
    if found is None:
        return None
    try:  # the default callback prints msg as a JSON string: newlines (the engine's log lines) come as \n
        account = json.loads(f'"{found.group(2)}"')
    except ValueError:
        account = found.group(2).replace('\\"', '"')
    return found.group(1), str(account).replace("\\'", "'")


def message_text(escaped: str) -> str:
    """A msg as the default callback prints it (a JSON string: newlines come as \\n), read back."""
    try:
        return str(json.loads(f'"{escaped}"'))
    except ValueError:
        return escaped.replace('\\"', '"')


def refused_before(run: PlaybookRun) -> SeatplanError | None:
    """The apply's refusal, before its first step, of a seat's port held by a process nobody declared, or of secret
    references that would not reach their engines."""
    found = REFUSED_OUTPUT.search(run.output)
    if found is not None:
        host, _, lines = message_text(found.group(1)).partition(": ")
        held = [kind for kind, said in (("port", " is held by "), ("GPU", "its GPU memory is used by")) if said in lines]
        subject = f"a seat's {' and '.join(held) or 'port'} {'are' if len(held) > 1 else 'is'} held"
        return SeatplanError(f"on host {host}, {subject} by a process neither seatplan nor started_by runs; nothing was changed or stopped:\n"
                             + lines.strip(), fix="stop that process, or declare it in the fleet file (started_by, or a fixed seat), then apply again")
    return missing_secrets(run)


def missing_secrets(run: PlaybookRun) -> SeatplanError | None:
    """The apply's refusal, before its first step, of secret references that would not reach their engines."""
    found = MISSING_SECRETS_OUTPUT.search(run.output)
    if found is None:
        return None
    host, _, lines = message_text(found.group(1)).partition(": ")
    return SeatplanError(f"on host {host}, a secret would not reach its engine; nothing was changed or stopped:\n" + lines.strip(),
                         fix="set each variable where the engines get their environment, make each file owner-only (chmod 600), or change the "
                             "seat's env (from_host_env) or env_files in the fleet file; then apply again")


def observed(run: PlaybookRun) -> list[dict]:
    """What the apply's first play saw for each seat (hostcheck.observe), host by host, each with its ``host``; a
    seat seen twice (a retried run in one output) counts once, the last reading."""
    seen: dict[tuple[str, str], dict] = {}
    for found in OBSERVED_OUTPUT.finditer(run.output):
        try:
            row = json.loads(json.loads(f'"{found.group(2)}"'))
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("seat"), str):
            seen[(found.group(1), row["seat"])] = {"host": found.group(1)} | row
    return list(seen.values())
