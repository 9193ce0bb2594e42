"""What the adopted box shows each seat holding: nvidia-smi's processes tied to seats, and each GPU's total in use,
as the observations document ``seatplan plan --observed`` reads (``documents.observed.ObservedFootprints``).

Pure: the adopted seats (where each runs, the ports it is reached and listens on), nvidia-smi's readings and
compute-apps rows, and the GPU host's process tables in; the document and warnings out. A process is tied to a seat,
first that answers:

1. through the process table (``readers/processes.py``): the process or an ancestor listens on a port of exactly one
   adopted seat of that host (``/proc``), or its command line starts vLLM on such a port (``vllm serve … --port N``;
   vLLM's default 8000 without the flag, vLLM 0.32 vllm/entrypoints/launchers/cli_args.py:285);
2. by its name alone where the GPU has exactly one adopted vLLM seat and no process table of its host lists the PID:
   vLLM titles the processes that hold GPU memory ``VLLM::EngineCore`` and ``VLLM::Worker_TP<N>`` (vLLM 0.32
   vllm/utils/system_utils.py:180 ``set_process_title``, ``VLLM_PROCESS_NAME_PREFIX`` "VLLM" by default;
   vllm/v1/engine/core.py:1411, vllm/v1/executor/multiproc_executor.py:1102). A table that lists the process and ties it to no seat says it
   is none of theirs (an engine adopt was not given), so it is not tied by name either.

A seat's observed footprint is what its tied processes hold on each of its GPUs, the most over them (the document's
figure is per GPU); a seat with a GPU no tied process holds memory on, or a process nvidia-smi reads ``[N/A]`` for,
gets none and keeps its estimate. The KV part is the seat's pin as adopted (``vllm:cache_config_info``
``kv_cache_memory_bytes``, else ``--kv-cache-memory-bytes``): plan takes the rest as the observed non-KV memory.
Every GPU's ``memory.used`` is kept as the GPU's total in use, so plan can compare its estimate for today's layout
even where no process could be tied. These are readings at one moment, not plateaus: an engine read minutes after
its start has yet to creep.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from seatplan.adopt.assemble import UNACCOUNTED_MIB, Adopted, Noted
from seatplan.adopt.evidence import ComputeApp
from seatplan.adopt.readers.processes import HostProcess, ProcessTable
from seatplan.documents.observed import GpuCorrection, ObservedFootprints, ObservedGpu, ObservedSeat
from seatplan.engine.endpoint import DEFAULT_PORT
from seatplan.engine.parse import launcher_args, read_vllm_args
from seatplan.units import whole_number

MiB = 2**20
VLLM_TITLES = ("VLLM::EngineCore", "VLLM::Worker")  # set_process_title's prefix "VLLM::" and the names vLLM 0.32 gives


@dataclass(frozen=True)
class Tie:
    seat: str
    how: str  # what tied it, for the document's source


def is_vllm_title(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return any(base.startswith(title) for title in VLLM_TITLES)


def command_port(process: HostProcess) -> int | None:
    """The port a vLLM API server's command line serves on (vLLM's default without ``--port``); None for another program."""
    after = launcher_args(process.args.split())
    if after is None:
        return None
    value = read_vllm_args(after).flags.get("--port")
    if value is None:
        return DEFAULT_PORT
    return whole_number(value, maximum=65535) if isinstance(value, str) else None


def _only(seats: list[str]) -> str | None:
    return seats[0] if len(seats) == 1 else None


def tie_by_table(app: ComputeApp, host: str, table: ProcessTable, adopted: Adopted) -> Tie | None:
    """The seat whose port the process or its nearest tying ancestor listens on, or whose port its command line names."""
    on_host = [name for name, place in adopted.places.items() if place.host == host and place.engine == "vllm"]
    for process in table.ancestry(app.pid):
        for port in sorted(process.listening):
            if (seat := _only([name for name in on_host if port in adopted.places[name].ports])) is not None:
                via = "" if process.pid == app.pid else f" through its ancestor pid {process.pid}"
                return Tie(seat, f"pid {app.pid}{via} listens on port {port} ({table.source})")
        served = command_port(process)
        if served is not None and (seat := _only([name for name in on_host if served in adopted.places[name].ports])) is not None:
            via = "its" if process.pid == app.pid else f"its ancestor pid {process.pid}'s"
            return Tie(seat, f"pid {app.pid}: {via} command line serves port {served} ({process.source})")
    return None


def tie_by_title(app: ComputeApp, host: str, index: int, adopted: Adopted) -> Tie | None:
    if not is_vllm_title(app.process_name):
        return None
    seat = _only([name for name, place in adopted.places.items() if place.host == host and index in place.gpus and place.engine == "vllm"])
    if seat is None:
        return None
    return Tie(seat, f"pid {app.pid} {app.process_name}: the only adopted vLLM seat on GPU {index}")


def _seat_int(adopted: Adopted, seat: str, key: str) -> int | None:
    """A whole-number value adopted for the seat (its KV pin, context, memory cap), None where TODO or not written."""
    for tree in adopted.tree["seats"]:
        if isinstance(tree.get("name"), Noted) and tree["name"].value == seat:
            value = tree.get(key)
            return value.value if isinstance(value, Noted) and isinstance(value.value, int) and not isinstance(value.value, bool) else None
    return None


def gpu_corrections(adopted: Adopted, held: dict[tuple[str, str, int], list[tuple[ComputeApp, Tie]]],
                    observed: set[str], many_hosts: bool) -> list[GpuCorrection]:
    """Memory a GPU holds beyond what its adopted seats were seen (or declared) to hold, where every one of them is
    known: a process no file adopts (a notebook, a tool), which plan then reserves on that GPU rather than hands out.
    Under ``UNACCOUNTED_MIB`` it is left alone (an idle CUDA context takes a few hundred MiB). On a box of one host the
    correction names no host (the host may still be TODO in the fleet file, and is filled in before plan reads it)."""
    corrections = []
    for (host, index), reading in sorted(adopted.readings.items()):
        if reading.used_mib is None:
            continue
        here = [name for name, place in adopted.places.items() if place.host == host and index in place.gpus]
        vllm = [name for name in here if adopted.places[name].engine == "vllm"]
        caps = [_seat_int(adopted, name, "memory_cap_bytes") for name in here if adopted.places[name].engine == "fixed"]
        if any(name not in observed for name in vllm) or any(cap is None for cap in caps):
            continue  # a seat here whose share is not known: plan's comparison of the GPU says what it can
        accounted_mib = sum(app.used_mib or 0 for name in vllm for app, _ in held.get((name, host, index), [])) + sum(cap or 0 for cap in caps) // MiB
        extra_mib = reading.used_mib - accounted_mib
        if extra_mib > UNACCOUNTED_MIB:
            corrections.append(GpuCorrection(host=host if many_hosts else None, index=index, extra_bytes=extra_mib * MiB, seats=here,
                                             source=f"adopt: {reading.source}: memory.used {reading.used_mib} MiB, the seats adopted here "
                                                    f"account for {accounted_mib} MiB"))
    return corrections


def observe(adopted: Adopted, apps: list[ComputeApp] | None, tables: list[ProcessTable],
            time_of: Callable[[str], datetime], now: datetime) -> tuple[ObservedFootprints, list[str]]:
    """The observations document of the adopted box, and what could not be tied (warnings)."""
    warnings: list[str] = []
    hosts = sorted({place.host for place in adopted.places.values() if place.host})
    only_host = hosts[0] if len(hosts) == 1 else None
    by_host = {table.host or only_host: table for table in tables}
    where = {reading.uuid: key for key, reading in adopted.readings.items()}
    held: dict[tuple[str, str, int], list[tuple[ComputeApp, Tie]]] = {}  # (seat, host, index) → its tied processes
    for app in apps or []:
        if app.gpu_uuid not in where:
            continue
        host, index = where[app.gpu_uuid]
        table = by_host.get(host)
        tie = tie_by_table(app, host, table, adopted) if table is not None else None
        if tie is None and (table is None or app.pid not in table.processes):
            # a table that knows the process and ties it to no seat says it is none of theirs (an engine not adopted)
            tie = tie_by_title(app, host, index, adopted)
        if tie is not None:
            held.setdefault((tie.seat, host, index), []).append((app, tie))
    seats: dict[str, ObservedSeat] = {}
    for name, place in adopted.places.items():
        if place.engine != "vllm" or not place.gpus:
            continue
        per_gpu = {index: held.get((name, place.host, index), []) for index in place.gpus}
        if not any(per_gpu.values()):
            if apps is not None:
                warnings.append(f"seat {name}: no process of the compute-apps CSV could be tied to it (by a process table's ports "
                                "or command lines, or as the only vLLM seat on its GPU): plan keeps its estimate")
            continue
        missing = [index for index, tied in per_gpu.items() if not tied]
        unknown = [app for tied in per_gpu.values() for app, _ in tied if app.used_mib is None]
        if missing or unknown:
            why = (f"no process tied to it holds memory on GPU {', '.join(map(str, missing))}" if missing
                   else f"nvidia-smi reads [N/A] for pid {unknown[0].pid}")
            warnings.append(f"seat {name}: {why}: plan keeps its estimate")
            continue
        index, tied = max(per_gpu.items(), key=lambda item: sum(app.used_mib or 0 for app, _ in item[1]))
        used_mib = sum(app.used_mib or 0 for app, _ in tied)
        rows = "; ".join(f"{app.source} {app.used_mib} MiB, {tie.how}" for app, tie in tied)
        kv_bytes = _seat_int(adopted, name, "kv_cache_memory_bytes")
        if kv_bytes is None:
            warnings.append(f"seat {name}: its KV cache is not pinned today, so the observed {used_mib} MiB cannot be split into its KV "
                            "cache and the rest: plan keeps the whole figure beside whatever KV it pins (pin the KV cache, or observe "
                            "again after the first rollout, for a figure plan can split)")
        seats[name] = ObservedSeat(footprint_bytes=used_mib * MiB, source=f"adopt: GPU {index}: {rows}", samples=len(tied),
                                   kv_cache_memory_bytes=kv_bytes,
                                   max_model_len=_seat_int(adopted, name, "max_model_len"), observed_at=time_of(tied[0][0].source),
                                   at_plateau=False)
    gpus = [ObservedGpu(host=host if len(hosts) > 1 else None, index=index, used_bytes=reading.used_mib * MiB,
                        source=f"{reading.source}: memory.used {reading.used_mib} MiB", observed_at=time_of(reading.source))
            for (host, index), reading in sorted(adopted.readings.items()) if reading.used_mib is not None]
    return ObservedFootprints(generated_at=now, seats=seats, gpus_used=gpus, gpu_corrections=gpu_corrections(adopted, held, set(seats), len(hosts) > 1),
                              source="adopt"), warnings
