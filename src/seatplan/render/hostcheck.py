#!/usr/bin/env python3
"""Run on each host by the rendered playbook (copied there as ``bin/seatplan-health.py``): who holds a seat's port,
and whether the engine a step started is the one answering ``/health``.

Standard library only, and no seatplan import: it runs with the host's Python, where seatplan is not installed.
``render/ansible.py`` copies this file's text verbatim (``HOSTCHECK``).

Two commands, each printing one JSON line on stdout and, when it fails, the reason on stderr (exit 1):

- ``before``: run before a step stops or starts anything. The seat's port is free, or held by the seat's own engine
  (what ``--mode`` says started it: the launcher's PID file, the systemd unit's MainPID, the compose container), or
  by the engine ``started_by`` names (``--cutover``: apply stops that one itself). Any other holder fails the step
  before the old engine is stopped, naming its PID and command line.
- ``wait``: run after the restart command. It waits, up to ``--timeout-s`` in all, for the process the step started
  to own the listening socket on the port (the socket's inode among the fds of that process or one of its
  children, read from ``/proc``) and for ``/health`` to answer 200. An answer from any other process does not
  count. When the process exits, the wait ends at once with the last 40 lines of its log (the file its stderr was
  sent to, ``journalctl -u UNIT``, or ``docker compose logs``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable

LOG_LINES = 40  # the last lines of a dead or silent engine's log printed with the failure
POLL_S = 1.0
REQUEST_TIMEOUT_S = 5.0  # one /health request; the step's deadline bounds the whole wait
COMMAND_TIMEOUT_S = 30  # systemctl, journalctl, docker: each call bounded
PID_FILE_GRACE_S = 30.0  # the launcher writes its PID file first thing; a restart command that starts none fails after this
LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column (include/net/tcp_states.h)


def listening_inodes(port: int, net_dir: str = "/proc/net") -> set[str]:
    """The inodes of the sockets listening on ``port`` (IPv4 and IPv6) in the network namespace ``net_dir`` shows."""
    inodes: set[str] = set()
    for name in ("tcp", "tcp6"):
        try:
            with open(os.path.join(net_dir, name), encoding="ascii") as table:
                rows = table.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def socket_inodes(pid: int) -> set[str]:
    """The socket inodes among ``pid``'s open files (empty when it is gone or not ours to read)."""
    found: set[str] = set()
    directory = f"/proc/{pid}/fd"
    try:
        names = os.listdir(directory)
    except OSError:
        return found
    for name in names:
        try:
            target = os.readlink(os.path.join(directory, name))
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[len("socket:["):-1])
    return found


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def tree(root: int) -> set[int]:
    """``root`` and every process below it (vLLM's API server may hand the socket to its children)."""
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        parent = parent_of(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as raw:
            words = raw.read(4096).split(b"\0")
    except OSError:
        return "?"
    return " ".join(word.decode("utf-8", "replace") for word in words if word) or "?"


def environ_value(pid: int, key: str) -> str | None:
    """``key`` in the environment ``pid`` was started with (None: unset, or not ours to read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as raw:
            pairs = raw.read(1 << 20).split(b"\0")
    except OSError:
        return None
    prefix = key.encode("ascii") + b"="
    for pair in pairs:
        if pair.startswith(prefix):
            return pair[len(prefix):].decode("utf-8", "replace")
    return None


def seat_of(pid: int) -> str | None:
    """The seat a process was started for by seatplan's launcher (its environment holds the env file's SEATPLAN_SEAT)."""
    return environ_value(pid, "SEATPLAN_SEAT")


def planned_command(env_file: str) -> str | None:
    """SEATPLAN_COMMAND as the launcher reads it from the seat's env file on the host (sh, as the launcher does)."""
    if not os.path.isfile(env_file):
        return None
    done = subprocess.run(["sh", "-c", 'set -a; . "$1"; printf %s "${SEATPLAN_COMMAND-}"', "sh", env_file], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
    return done.stdout if done.returncode == 0 else None


def holders(port: int) -> tuple[set[str], list[int]]:
    """The listening sockets on ``port`` in this host's namespace, and the processes that hold them."""
    inodes = listening_inodes(port)
    if not inodes:
        return inodes, []
    return inodes, sorted(pid for pid in all_pids() if socket_inodes(pid) & inodes)


def owns_port(pid: int, port: int) -> bool:
    """Whether ``pid`` (or a child) holds a socket listening on ``port``: the inode is read in the process's own
    network namespace (/proc/PID/net), so it holds inside a container too."""
    inodes = listening_inodes(port, f"/proc/{pid}/net")
    return bool(inodes) and any(socket_inodes(member) & inodes for member in tree(pid))


def run(words: list[str]) -> str:
    try:
        done = subprocess.run(words, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as problem:
        return f"({' '.join(words)}: {problem})"
    return done.stdout


class Starter:
    """What started the seat's engine, by restart mode: where its PID and its log are read from."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.mode, self.seat, self.host_dir = args.mode, args.seat, args.host_dir
        self.unit = f"seatplan-vllm@{self.seat}.service"
        self.compose = ["docker", "compose", "-p", "seatplan", "-f", os.path.join(self.host_dir, "compose", self.seat + ".yaml")]
        self.log_path = ""

    @property
    def pid_file(self) -> str:
        return os.path.join(self.host_dir, "run", self.seat + ".pid")

    def pid(self) -> tuple[int | None, bool]:
        """(the engine's PID or None, whether it is known to have exited)."""
        if self.mode == "systemd":
            shown = dict(line.split("=", 1) for line in run(["systemctl", "show", "--property=MainPID,ActiveState", self.unit]).splitlines() if "=" in line)
            main = int(shown.get("MainPID", "0") or 0)
            return (main or None), shown.get("ActiveState") in {"failed", "inactive"} and not main
        if self.mode == "compose":
            container = run([*self.compose, "ps", "-q", "-a", self.seat]).strip().splitlines()
            if not container:
                return None, False
            state = run(["docker", "inspect", "--format", "{{.State.Pid}} {{.State.Status}}", container[0]]).split()
            if len(state) < 2:
                return None, False
            return (int(state[0]) or None), state[1] in {"exited", "dead"}
        try:
            with open(self.pid_file, encoding="utf-8") as recorded:
                lines = recorded.read().splitlines()
        except OSError:
            return None, False
        self.log_path = lines[1] if len(lines) > 1 else ""
        return (int(lines[0]) if lines and lines[0].isdigit() else None), False

    def log_tail(self) -> tuple[str, list[str]]:
        """Where the log was read, and its last LOG_LINES lines."""
        if self.mode == "systemd":
            return f"journalctl -u {self.unit}", run(["journalctl", "-u", self.unit, "-n", str(LOG_LINES), "--no-pager"]).splitlines()[-LOG_LINES:]
        if self.mode == "compose":
            return f"docker compose logs {self.seat}", run([*self.compose, "logs", "--no-color", "--tail", str(LOG_LINES), self.seat]).splitlines()[-LOG_LINES:]
        if not self.log_path.startswith("/") or not os.path.isfile(self.log_path):
            return "the engine's stderr (not a file: redirect the restart script's output to one)", []
        return self.log_path, tail(self.log_path)


def tail(path: str, lines: int = LOG_LINES, limit: int = 256 * 1024) -> list[str]:
    """The last ``lines`` lines of a file, reading at most ``limit`` bytes from its end."""
    with open(path, "rb") as log:
        log.seek(0, os.SEEK_END)
        size = log.tell()
        log.seek(max(0, size - limit))
        return log.read().decode("utf-8", "replace").splitlines()[-lines:]


def describe(pids: Iterable[int]) -> str:
    return "; ".join(f"PID {pid} ({command_line(pid)})" for pid in pids)


def before(args: argparse.Namespace) -> int:
    """The port is free, or held by the seat's own engine or the one it cuts over from: else fail, naming the holder."""
    inodes, held_by = holders(args.port)
    if not inodes:
        # nothing listens: the seat's engine is not running, and the step starts it whatever its files say
        print(json.dumps({"seat": args.seat, "port": args.port, "held_by": [], "running": False, "as_planned": False}))
        return 0
    starter = Starter(args)
    own, _ = starter.pid()
    ours = tree(own) if own and alive(own) else set()
    if args.mode == "compose" and own:
        # a published port is held on the host by Docker's proxy, not by the container's processes
        ours |= {pid for pid in held_by if os.path.basename(command_line(pid).split(" ", 1)[0]) in {"docker-proxy", "dockerd"}}
    # an engine seatplan's launcher started for this seat (before its PID was recorded, or its record lost) is the seat's own
    strangers = [pid for pid in held_by if pid not in ours and seat_of(pid) != args.seat]
    own_holders = [pid for pid in held_by if pid not in strangers]
    print(json.dumps({"seat": args.seat, "port": args.port, "held_by": held_by, "own": own, "running": bool(own_holders),
                      "as_planned": bool(own_holders) and runs_as_planned(own_holders, os.path.join(args.host_dir, "env", args.seat + ".env"))}))
    if not held_by:
        print(f"seat {args.seat}: port {args.port} is held by a process this user cannot see (its socket inode {min(inodes)} is in no readable "
              f"/proc/PID/fd); run apply as root or as the engines' user, or free the port", file=sys.stderr)
        return 1
    if strangers and args.cutover != "yes":
        print(f"seat {args.seat}: port {args.port} is held by {describe(strangers)}, not by the seat's engine; nothing was stopped. "
              f"Stop that process, or declare it: started_by in the seat's fleet entry (seatplan adopt writes it) if it is this seat's engine, "
              f"or a fixed seat on another port", file=sys.stderr)
        return 1
    return 0


def runs_as_planned(pids: list[int], env_file: str) -> bool:
    """The seat's engine runs the command its env file on the host gives (the launcher exports SEATPLAN_COMMAND into
    the engine's environment; where it is not there, as under compose, running is taken as running as planned)."""
    planned = planned_command(env_file)
    if planned is None:
        return False  # no env file of seatplan's: not started from it
    started = {environ_value(pid, "SEATPLAN_COMMAND") for pid in pids}
    return started == {None} or planned in started


def health_answers(url: str, timeout_s: float) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=max(0.1, timeout_s)) as response:  # noqa: S310 (the seat's own http URL)
            response.read(4096)
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (OSError, ValueError):
        return None


def fail(starter: Starter, pid: int | None, reason: str) -> int:
    where, lines = starter.log_tail()
    print(json.dumps({"seat": starter.seat, "pid": pid, "healthy": False}))
    print(reason, file=sys.stderr)
    print(f"--- the last {len(lines)} lines of {where} ---", file=sys.stderr)
    for line in lines:
        print(line, file=sys.stderr)
    return 1


def wait(args: argparse.Namespace) -> int:
    starter = Starter(args)
    started = time.monotonic()
    deadline = started + args.timeout_s
    pid: int | None = None
    status: int | None = None
    while True:
        now = time.monotonic()
        pid, exited = starter.pid()
        if pid is not None and not alive(pid) or pid is None and exited:
            return fail(starter, pid, f"seat {args.seat}: its engine{f' (PID {pid})' if pid else ''} exited {now - started:.0f} s after the start, "
                                      f"before /health answered 200")
        if pid is None and args.mode == "script" and now - started > min(PID_FILE_GRACE_S, args.timeout_s):
            return fail(starter, None, f"seat {args.seat}: no engine started: {starter.pid_file} was not written within {PID_FILE_GRACE_S:.0f} s "
                                       f"(the restart script must start the engine with HOST_DIR/bin/seatplan-engine.sh ENV_FILE, which writes it)")
        if pid is not None and owns_port(pid, args.port):
            status = health_answers(args.url, min(REQUEST_TIMEOUT_S, deadline - now))
            if status == 200:
                print(json.dumps({"seat": args.seat, "pid": pid, "healthy": True, "waited_s": round(time.monotonic() - started, 1)}))
                return 0
        if time.monotonic() >= deadline:
            _, others = holders(args.port)
            held = f"; port {args.port} is held by {describe(others)}" if others and pid is not None and pid not in others and not owns_port(pid, args.port) else ""
            return fail(starter, pid, f"seat {args.seat}: /health did not answer 200 from the engine this step started (PID {pid or '?'}) within "
                                      f"{args.timeout_s:.0f} s (--health-timeout; last answer: {status or 'none'}){held}")
        time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="seatplan-health.py", description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    commands = top.add_subparsers(dest="command", required=True)
    for name in ("before", "wait"):
        command = commands.add_parser(name)
        command.add_argument("--seat", required=True)
        command.add_argument("--port", type=int, required=True)
        command.add_argument("--host-dir", required=True)
        command.add_argument("--mode", choices=("script", "systemd", "compose"), required=True)
        if name == "before":
            command.add_argument("--cutover", choices=("yes", "no"), default="no", help="yes: the seat has started_by, and apply stops that engine itself")
        else:
            command.add_argument("--url", required=True)
            command.add_argument("--timeout-s", type=float, required=True)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return before(args) if args.command == "before" else wait(args)


if __name__ == "__main__":
    sys.exit(main())
