#!/usr/bin/env python3
"""Run on each host by the rendered playbook (copied there as ``bin/seatplan-health.py``): who holds a seat's port,
and whether the engine a step started is the one answering ``/health``.

Standard library only, and no seatplan import: it runs with the host's Python, where seatplan is not installed.
``render/ansible.py`` copies this file's text verbatim (``HOSTCHECK``).

Four commands, each printing JSON lines on stdout and, when it fails, the reason on stderr (exit 1):

- ``observe``: run first by every apply (``apply --check`` prints it as a table), read-only: for each seat of the
  plan on this host, who listens on its port: ``runs as planned`` (the seat's own engine, from the planned env file),
  ``runs differently`` (its own engine, from another file or command), ``runs from another starter`` (the engine
  ``started_by`` names: its systemd unit's or compose container's processes; any holder for a stop/start command
  pair), ``not running``, or ``port held by a stranger``, each with the PIDs and command lines; and the compute
  processes on the seat's GPUs (``nvidia-smi``) that no seat accounts for (neither a seat's engine, nor what a
  started_by names, nor a fixed seat's port holder): apply refuses those before anything stops, as a stranger on a port.

- ``secrets``: run before the first step of an apply (``ansible.builtin.script``, so nothing is copied to the host
  first): every host variable a seat takes a secret from (``from_host_env``) is set, non-empty, where the engines
  get their environment (the shell ``ansible-playbook`` runs commands in for ``script`` and ``compose``, systemd's
  manager environment for ``systemd``: ``PassEnvironment=`` passes only what ``systemctl show-environment`` holds),
  and every ``env_files`` file exists, is a regular file this user can read, and is not readable by others. A
  failure names the seat and the variable or file; no value is ever printed.

- ``before``: run before a step stops or starts anything. The seat's port is free, or held by the seat's own engine
  (what ``--mode`` says started it: the launcher's PID file, the systemd unit's MainPID, the compose container), or
  by the engine ``started_by`` names (``--cutover``, ``--started-by``: apply stops that one itself). Any other holder
  fails the step before the old engine is stopped, naming its PID and command line.
- ``wait``: run after the restart command. It waits, up to ``--timeout-s`` in all, for the process the step started
  to own the listening socket on the port (the socket's inode among the fds of that process or one of its
  children, read from ``/proc``) and for ``/health`` to answer 200. An answer from any other process does not
  count. When the process exits, the wait ends at once with the last 40 lines of its log (the file its stderr was
  sent to, ``journalctl -u UNIT``, or ``docker compose logs``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import stat
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
MAX_GPU_ROWS = 4096  # nvidia-smi's rows read (GPUs, or compute processes), at most
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


def is_docker_proxy(pid: int) -> bool:
    """A published port is held on the host by Docker's proxy, not by the container's processes."""
    return os.path.basename(command_line(pid).split(" ", 1)[0]) in {"docker-proxy", "dockerd"}


def started_by_pids(started_by: dict | None) -> set[int] | None:
    """The processes of the engine ``started_by`` names (its systemd unit's MainPID and children, its compose
    container's), read-only; None where the kind names no process (a stop/start command pair): any holder of the
    port is then taken as that engine, since nothing on the host says otherwise."""
    if not started_by:
        return set()
    if started_by.get("kind") == "systemd" and started_by.get("unit"):
        shown = dict(line.split("=", 1) for line in run(["systemctl", "show", "--property=MainPID", str(started_by["unit"])]).splitlines() if "=" in line)
        main = int(shown.get("MainPID", "0") or 0) if shown.get("MainPID", "0").isdigit() else 0
        return tree(main) if main else set()
    if started_by.get("kind") == "compose" and started_by.get("compose_file") and started_by.get("compose_service"):
        container = run(["docker", "compose", "-f", str(started_by["compose_file"]), "ps", "-q", str(started_by["compose_service"])]).strip().splitlines()
        state = run(["docker", "inspect", "--format", "{{.State.Pid}}", container[0]]).split() if container else []
        main = int(state[0]) if state and state[0].isdigit() else 0
        return tree(main) if main else set()
    return None


RESTART_DIGEST = "SEATPLAN_RESTART_DIGEST"  # engine.command.RESTART_DIGEST_KEY: the env file's, in its engine's environment


def who_holds(seat: str, port: int, mode: str, host_dir: str, started_by: dict | None, digest: str | None = None) -> dict:
    """Who listens on the seat's port, read-only: ``state`` is one of STATES, with the PIDs and command lines.

    ``digest``: the planned env file's restart digest (engine.change.restart_digest). Where the running engine's
    environment carries one, it runs as planned exactly when the two are equal (the one change model: a change that
    needs no restart leaves it running); where it carries none (an engine started before the digest, or a container
    whose environment is not the env file's), it runs as planned when it runs the host's env file's command."""
    inodes, held_by = holders(port)
    found: dict = {"seat": seat, "port": port, "held_by": held_by, "own": None, "running": False, "as_planned": False, "strangers": []}
    if not inodes:
        return found | {"state": "not running"}
    if not held_by:
        return found | {"state": "port held by a stranger", "detail": f"a process this user cannot see (socket inode {min(inodes)} in no readable "
                                                                      "/proc/PID/fd); run as root or as the engines' user"}
    own, _ = Starter(argparse.Namespace(mode=mode, seat=seat, host_dir=host_dir)).pid()
    ours = tree(own) if own and alive(own) else set()
    if mode == "compose" and own:
        ours |= {pid for pid in held_by if is_docker_proxy(pid)}
    # an engine seatplan's launcher started for this seat (before its PID was recorded, or its record lost) is the seat's own
    others = [pid for pid in held_by if pid not in ours and seat_of(pid) != seat]
    own_holders = [pid for pid in held_by if pid not in others]
    env_file = os.path.join(host_dir, "env", seat + ".env")
    running = {environ_value(pid, RESTART_DIGEST) for pid in own_holders} - {None}
    known = bool(digest) and bool(running)
    as_planned = running == {digest} if known else runs_as_planned(own_holders, env_file)
    found |= {"own": own, "running": bool(own_holders), "digest_known": known, "as_planned": bool(own_holders) and not others and as_planned}
    if not others:
        return found | {"state": "runs as planned" if found["as_planned"] else "runs differently", "detail": describe(own_holders)}
    starter = started_by_pids(started_by)
    if started_by and not own_holders and (starter is None or all(pid in starter or (started_by.get("kind") == "compose" and is_docker_proxy(pid)) for pid in others)):
        return found | {"state": "runs from another starter", "detail": f"started_by {started_by.get('kind')}: {describe(others)}"}
    return found | {"state": "port held by a stranger", "strangers": others, "detail": describe(others)}


STATES = ("runs as planned", "runs differently", "runs from another starter", "not running", "port held by a stranger")


def nvidia_smi(query: list[str]) -> list[list[str]] | None:
    """nvidia-smi's CSV rows for ``query`` (no header, no units), cells stripped; None where it is missing or fails
    (a host without NVIDIA's driver: the GPUs are then not read, and ``observe`` says so)."""
    try:
        done = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines()[:MAX_GPU_ROWS] if line.strip()]


def gpu_processes() -> dict[str, list[tuple[int, int | None]]] | None:
    """GPU index → the (PID, MiB used) of each compute process on it, from nvidia-smi; None where it cannot be read."""
    gpus = nvidia_smi(["--query-gpu=index,uuid"])
    apps = nvidia_smi(["--query-compute-apps=gpu_uuid,pid,used_memory"])
    if gpus is None or apps is None:
        return None
    index_of = {row[1]: row[0] for row in gpus if len(row) >= 2}
    found: dict[str, list[tuple[int, int | None]]] = {}
    for row in apps:
        if len(row) >= 3 and row[0] in index_of and row[1].isdigit():
            found.setdefault(index_of[row[0]], []).append((int(row[1]), int(row[2]) if row[2].isdigit() else None))
    return found


def declared(pid: int, roots: set[int]) -> bool:
    """Whether ``pid`` is, or runs below, a process some seat accounts for (``roots``), or one seatplan's launcher
    started for any seat."""
    seen: set[int] = set()
    current: int | None = pid
    while current is not None and current > 1 and current not in seen:
        if current in roots or seat_of(current) is not None:
            return True
        seen.add(current)
        current = parent_of(current)
    return False


def gpu_strangers(gpus: list[str], processes: dict[str, list[tuple[int, int | None]]], roots: set[int]) -> list[dict]:
    """The compute processes on ``gpus`` that no seat accounts for: each with its GPU, PID, command line, MiB used."""
    return [{"gpu": gpu, "pid": pid, "command": command_line(pid), "used_mib": used_mib}
            for gpu in gpus for pid, used_mib in processes.get(gpu, []) if not declared(pid, roots)]


def gpu_message(seat: str, strangers: list[dict]) -> str:
    held = "; ".join(f"GPU {item['gpu']} by PID {item['pid']} ({item['command']}"
                     + (f", {item['used_mib']:,} MiB" if item["used_mib"] is not None else "") + ")" for item in strangers)
    return (f"seat {seat}: its GPU memory is used by a process no seat accounts for: {held}; nothing was stopped. The plan "
            "counts each GPU's memory for its seats only: stop that process, or declare it: started_by in the seat's fleet "
            "entry if it is this seat's engine, or a fixed seat on that GPU (its memory, and its port as health_url)")


def before(args: argparse.Namespace) -> int:
    """The port is free, or held by the seat's own engine or the one it cuts over from: else fail, naming the holder."""
    started_by = json.loads(args.started_by) if args.started_by else None
    if args.cutover != "yes":
        started_by = None  # seatplan runs the seat now (its env file is on the host): started_by is history
    elif started_by is None:
        started_by = {"kind": "command"}  # told only that there is one: any holder is taken as it
    found = who_holds(args.seat, args.port, args.mode, args.host_dir, started_by, args.digest or None)
    print(json.dumps({key: found.get(key) for key in ("seat", "port", "held_by", "own", "running", "as_planned", "digest_known", "state")}))
    if found["state"] != "port held by a stranger":
        return 0
    if not found["held_by"]:
        print(f"seat {args.seat}: port {args.port} is held by {found['detail']}; nothing was stopped", file=sys.stderr)
        return 1
    print(f"seat {args.seat}: port {args.port} is held by {found['detail']}, not by the seat's engine"
          f"{' nor by the one its started_by names' if started_by else ''}; nothing was stopped. "
          f"Stop that process, or declare it: started_by in the seat's fleet entry (seatplan adopt writes it) if it is this seat's engine, "
          f"or a fixed seat on another port", file=sys.stderr)
    return 1


def observe_seats(args: argparse.Namespace) -> int:
    """Every seat of the plan on this host, read-only: one JSON line each (``who_holds``, and the processes on its
    GPUs that no seat accounts for), for ``apply --check``."""
    rows = []
    roots: set[int] = set()
    for given in args.seat:
        spec = json.loads(given)
        env_file = os.path.join(args.host_dir, "env", str(spec["seat"]) + ".env")
        # once seatplan's env file is on the host the seat is seatplan's (the cut-over is done): started_by is history,
        # as the step's own check takes it, and whatever else holds the port is a stranger
        started_by = None if os.path.exists(env_file) else spec.get("started_by")
        found = who_holds(str(spec["seat"]), int(spec["port"]), args.mode, args.host_dir, started_by, spec.get("digest"))
        found["env_file_as_planned"] = file_sha1(env_file) == spec.get("sha1")
        if found["state"] == "runs as planned" and not found["env_file_as_planned"]:
            if found["digest_known"]:  # what it runs is the plan's; only the file's text differs (apply rewrites it, no restart)
                found["detail"] = f"{found['detail']}; its env file on the host differs from the planned one in what needs no restart"
            else:
                found["state"] = "runs differently"
                found["detail"] = f"{found['detail']}; its env file on the host is not the planned one"
        # a holder no seat of seatplan's runs as (an engine of another seat may hold it until its own step stops it)
        # stops the apply before its first step; the step's own check names the rest
        found["refuse"] = found["state"] == "port held by a stranger" and all(seat_of(pid) is None for pid in found["strangers"])
        if found["refuse"]:
            found["message"] = (f"seat {spec['seat']}: port {spec['port']} is held by {found['detail']}, which neither seatplan nor the seat's "
                                "started_by runs; nothing was stopped. Stop that process, or declare it: started_by in the seat's fleet entry "
                                "(compose_file with compose_service, systemd_unit, or stop_command; seatplan adopt writes it) if it is this seat's "
                                "engine, or a fixed seat on another port")
        rows.append((spec, found))
        roots |= {pid for pid in found["held_by"] if pid not in found["strangers"]} | ({found["own"]} if found["own"] else set())
        roots |= (started_by_pids(started_by) or set()) if started_by else set()
    fixed = [json.loads(given) for given in args.fixed]
    # a fixed seat with no port to find its process by may be any process on its GPUs
    unknown_fixed_gpus = {gpu for item in fixed if not item.get("port") for gpu in item.get("gpus", [])}
    for item in fixed:
        if item.get("port"):
            roots |= set(holders(int(item["port"]))[1])
    processes = gpu_processes() if any(spec.get("gpus") for spec, _ in rows) else {}
    for spec, found in rows:
        gpus = [gpu for gpu in spec.get("gpus", []) if gpu not in unknown_fixed_gpus]
        found["gpus_read"] = processes is not None
        found["gpu_strangers"] = [] if processes is None else gpu_strangers(gpus, processes, roots)
        if found["gpu_strangers"]:
            message = gpu_message(str(spec["seat"]), found["gpu_strangers"])
            found["message"] = f"{found['message']}\n{message}" if found["refuse"] else message
            found["refuse"] = True
        print(json.dumps(found))
    return 0


def file_sha1(path: str) -> str | None:
    try:
        with open(path, "rb") as text:
            return hashlib.sha1(text.read(1 << 20)).hexdigest()  # noqa: S324 (Ansible's stat checksum, not security)
    except OSError:
        return None


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


def manager_environment(mode: str) -> set[str] | None:
    """The names set in the environment the engines start in: this process's (script, compose), or systemd's manager
    environment (None: ``systemctl show-environment`` could not be read)."""
    if mode != "systemd":
        return {name for name, value in os.environ.items() if value}
    try:
        done = subprocess.run(["systemctl", "show-environment"], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return {line.split("=", 1)[0] for line in done.stdout.splitlines() if "=" in line and line.split("=", 1)[1]}


def file_problem(path: str) -> str | None:
    """Why an env_files file cannot give the engine its secrets safely (None: it can)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "does not exist"
    except OSError as problem:
        return f"cannot be read ({problem.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_mode & stat.S_IROTH:
        return f"is readable by every user (mode {stat.S_IMODE(info.st_mode):04o}); chmod o-rwx {path}"
    if not os.access(path, os.R_OK):
        return "is not readable by the user apply runs as"
    return None


WHERE_FROM = {"script": "the environment ansible-playbook runs the restart script in (export it in the shell that runs apply, or the SSH "
                        "session's environment on a remote host)",
              "compose": "the environment ansible-playbook runs docker compose in (export it in the shell that runs apply, or the SSH "
                         "session's environment on a remote host)",
              "systemd": "systemd's manager environment, which PassEnvironment= reads (systemctl set-environment NAME=..., or "
                         "Environment= in a drop-in of the manager)"}


def secret_problems(mode: str, variables: list[tuple[str, str, str]], files: list[tuple[str, str]], known: set[str] | None) -> list[str]:
    """Each missing secret: (seat, the engine's variable, the host variable it takes) unset in ``known``; (seat, path)
    with a file problem. Names and paths only, never a value."""
    problems = []
    for seat, name, source in variables:
        if known is None:
            problems.append(f"seat {seat}: {name} takes the host's {source}, and systemd's manager environment could not be read "
                            "(systemctl show-environment failed)")
        elif source not in known:
            problems.append(f"seat {seat}: {name} takes the host's {source}, which is not set (or empty) in {WHERE_FROM[mode]}")
    for seat, path in files:
        problem = file_problem(path)
        if problem is not None:
            problems.append(f"seat {seat}: its env_files file {path} {problem}")
    return problems


def check_secrets(args: argparse.Namespace) -> int:
    variables: list[tuple[str, str, str]] = []
    files: list[tuple[str, str]] = []
    for item in args.var:
        parts = item.split("=", 2)
        if len(parts) != 3:
            print(f"seatplan-health.py secrets: --var {item!r} is not SEAT=NAME=SOURCE", file=sys.stderr)
            return 2
        variables.append((parts[0], parts[1], parts[2]))
    for item in args.file:
        seat, _, path = item.partition("=")
        if not path:
            print(f"seatplan-health.py secrets: --file {item!r} is not SEAT=PATH", file=sys.stderr)
            return 2
        files.append((seat, path))
    known = manager_environment(args.mode) if variables else set()
    problems = secret_problems(args.mode, variables, files, known)
    print(json.dumps({"secrets": len(variables) + len(files), "missing": len(problems)}))
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="seatplan-health.py", description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    commands = top.add_subparsers(dest="command", required=True)
    seen = commands.add_parser("observe")
    seen.add_argument("--mode", choices=("script", "systemd", "compose"), required=True)
    seen.add_argument("--host-dir", required=True)
    seen.add_argument("--seat", action="append", default=[], help="JSON: seat, port, gpus, sha1 (the planned env file's), started_by, digest")
    seen.add_argument("--fixed", action="append", default=[], help="JSON: a fixed seat on this host: seat, gpus, port (None: not known)")
    check = commands.add_parser("secrets")
    check.add_argument("--mode", choices=("script", "systemd", "compose"), required=True)
    check.add_argument("--var", action="append", default=[], metavar="SEAT=NAME=SOURCE", help="the seat's NAME takes the host's SOURCE")
    check.add_argument("--file", action="append", default=[], metavar="SEAT=PATH", help="a file the seat's engine reads its environment from")
    for name in ("before", "wait"):
        command = commands.add_parser(name)
        command.add_argument("--seat", required=True)
        command.add_argument("--port", type=int, required=True)
        command.add_argument("--host-dir", required=True)
        command.add_argument("--mode", choices=("script", "systemd", "compose"), required=True)
        if name == "before":
            command.add_argument("--cutover", choices=("yes", "no"), default="no", help="yes: the seat has started_by, and apply stops that engine itself")
            command.add_argument("--started-by", default="", help="JSON: the cut-over (kind, unit or compose_file/compose_service) whose engine may hold the port")
            command.add_argument("--digest", default="", help="the planned env file's restart digest (SEATPLAN_RESTART_DIGEST)")
        else:
            command.add_argument("--url", required=True)
            command.add_argument("--timeout-s", type=float, required=True)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "secrets":
        return check_secrets(args)
    if args.command == "observe":
        return observe_seats(args)
    return before(args) if args.command == "before" else wait(args)


if __name__ == "__main__":
    sys.exit(main())
