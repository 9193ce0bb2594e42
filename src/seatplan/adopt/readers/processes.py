"""The processes of the GPU host, for tying nvidia-smi's compute-apps PIDs to seats: each process's parent, command
line and the TCP ports it listens on.

Two sources. On the GPU host itself (``--processes-from-host``), Linux's ``/proc`` (proc(5)): ``/proc/PID/stat``'s
fourth field is the parent, ``/proc/PID/cmdline`` the command line (NUL-separated), and a socket the process holds is a
``/proc/PID/fd/N`` link to ``socket:[INODE]``, listening where that inode is in state ``0A`` (TCP_LISTEN) in
``/proc/PID/net/tcp`` or ``tcp6`` (the process's own network namespace: a container's port 8000, not the host's 8006).
Elsewhere (``--processes [HOST=]FILE``), the saved output of ``ps -ww -eo pid,ppid,args`` on the GPU host: no ports, so a
process is tied by its command line (``vllm serve … --port N``) instead.

vLLM's API server is the process that listens; the memory is held by its children, ``VLLM::EngineCore`` and, with
tensor parallelism, ``VLLM::Worker_TP0`` … (vLLM 0.32 vllm/v1/engine/core.py:1411 in ``run_engine_core``,
vllm/v1/executor/multiproc_executor.py:1102 in ``WorkerProc``, both through ``set_process_title``), so a PID is tied
through its ancestors.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from seatplan.adopt.readers.text import host_and_path, read_text
from seatplan.errors import SeatplanError
from seatplan.units import MAX_PID, strict_whole_number, whole_number

PS_COMMAND = "ps -ww -eo pid,ppid,args"  # -ww: whole command lines (ps cuts them at COLUMNS, or 80, when not on a terminal)
MAX_PROCESSES = 65536  # a bound on what one host's table is read into; pid_max defaults to 32768 (4194304 on 64-bit at most)
MAX_ARGS_CHARS = 8192  # a command line is cut here: the flags that tie a process come well before
TCP_LISTEN = "0A"  # include/net/tcp_states.h: TCP_LISTEN = 10


@dataclass(frozen=True)
class HostProcess:
    """One process of the GPU host."""

    pid: int
    ppid: int
    args: str  # the command line, words joined by spaces (cut at MAX_ARGS_CHARS)
    listening: frozenset[int]  # TCP ports it listens on (empty where the source cannot tell: a ps listing)
    source: str  # "/proc/PID" or FILE:LINE


@dataclass(frozen=True)
class ProcessTable:
    host: str | None  # None: the only host
    processes: dict[int, HostProcess]
    source: str  # "/proc on this host" or the file
    ports_known: bool  # /proc tells listening ports; a ps listing does not

    def ancestry(self, pid: int) -> list[HostProcess]:
        """The process and its ancestors, nearest first (a loop or a missing parent ends it)."""
        chain: list[HostProcess] = []
        seen: set[int] = set()
        while pid in self.processes and pid not in seen and len(chain) < 64:
            seen.add(pid)
            process = self.processes[pid]
            chain.append(process)
            pid = process.ppid
        return chain


def read_ps_text(text: str, source: str, host: str | None) -> ProcessTable:
    """``ps -ww -eo pid,ppid,args`` (procps): a header ``PID PPID COMMAND``, then right-aligned numbers and the command line."""
    processes: dict[int, HostProcess] = {}
    fix = f"save `{PS_COMMAND}` run on the GPU host to a file and give that file"
    header_seen = False
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        words = line.split(None, 2)
        if not header_seen:
            if [word.upper() for word in words[:2]] != ["PID", "PPID"]:
                raise SeatplanError(f"the process listing does not start with ps's header `PID PPID COMMAND` (read {line.strip()[:80]!r})",
                                    where=f"{source}:{number}", fix=fix)
            header_seen = True
            continue
        where = f"{source}:{number}"
        if len(words) < 2:
            raise SeatplanError(f"a line of the process listing holds no PID and PPID (read {line.strip()[:80]!r})", where=where, fix=fix)
        pid = strict_whole_number(words[0], field="PID", where=where, maximum=MAX_PID, fix=fix)
        ppid = strict_whole_number(words[1], field="PPID", where=where, maximum=MAX_PID, fix=fix)
        if len(processes) >= MAX_PROCESSES:
            raise SeatplanError(f"the process listing holds more than {MAX_PROCESSES:,} processes", where=where, fix=fix)
        processes[pid] = HostProcess(pid, ppid, (words[2] if len(words) > 2 else "")[:MAX_ARGS_CHARS], frozenset(), where)
    if not header_seen:
        raise SeatplanError("the process listing is empty", where=source, fix=fix)
    return ProcessTable(host, processes, source, ports_known=False)


def read_ps_file(spec: str) -> ProcessTable:
    """``FILE`` or ``HOST=FILE``."""
    host, path = host_and_path(spec)
    text = read_text(path, "process listing", f"save `{PS_COMMAND}` run on the GPU host to a file")
    return read_ps_text(text, str(path), host)


def read_proc(root: Path = Path("/proc")) -> ProcessTable:
    """This host's processes from ``/proc`` (``--processes-from-host``). A process that ends while it is read, or
    whose files this user may not read (another user's ``fd``), is kept with what could be read: its ports are then
    not known, and its command line still ties it."""
    if not (root / "self" / "stat").is_file():
        raise SeatplanError(f"{root} is no Linux proc file system here", where="--processes-from-host",
                            fix=f"run adopt on the GPU host, or save `{PS_COMMAND}` there and give it with --processes FILE")
    processes: dict[int, HostProcess] = {}
    listening_by_namespace: dict[str, dict[int, int]] = {}
    for entry in os.scandir(root):
        pid = whole_number(entry.name, maximum=MAX_PID)
        if pid is None:
            continue
        if len(processes) >= MAX_PROCESSES:
            break
        with contextlib.suppress(OSError, ValueError):
            base = root / entry.name
            ppid = _ppid((base / "stat").read_text(encoding="utf-8", errors="replace"))
            raw = (base / "cmdline").read_bytes()[:MAX_ARGS_CHARS]
            args = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
            processes[pid] = HostProcess(pid, ppid, args, _listening(base, listening_by_namespace), f"{base}")
    return ProcessTable(None, processes, f"{root} on this host", ports_known=True)


def _ppid(stat: str) -> int:
    """The fourth field of ``/proc/PID/stat``, after the command name in parentheses (which may hold spaces and ``)``)."""
    fields = stat[stat.rindex(")") + 2 :].split()
    ppid = whole_number(fields[1], maximum=MAX_PID)
    if ppid is None:
        raise ValueError(stat[:80])
    return ppid


def _listening(base: Path, by_namespace: dict[str, dict[int, int]]) -> frozenset[int]:
    """The TCP ports of the sockets this process holds that listen, in its own network namespace."""
    try:
        namespace = os.readlink(base / "ns" / "net")
        if namespace not in by_namespace:
            by_namespace[namespace] = _listen_table(base / "net")
        table = by_namespace[namespace]
        inodes = set()
        for link in os.scandir(base / "fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(link.path)
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    except OSError:
        return frozenset()
    return frozenset(table[inode] for inode in inodes if inode in table)


def _listen_table(net: Path) -> dict[int, int]:
    """inode → port of the listening TCP sockets of one network namespace (proc(5), /proc/net/tcp: ``local_address``
    is ``HEXIP:HEXPORT``, ``st`` the state, the tenth field the inode)."""
    table: dict[int, int] = {}
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in (net / name).read_text(encoding="ascii", errors="replace").splitlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[3] == TCP_LISTEN:
                    with contextlib.suppress(ValueError):
                        table[int(fields[9])] = int(fields[1].rsplit(":", 1)[1], 16)
    return table
