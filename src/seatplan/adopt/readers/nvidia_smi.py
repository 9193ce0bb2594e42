"""nvidia-smi's GPU list (``--query-gpu=index,name,uuid,memory.total,memory.reserved,memory.used --format=csv``) and its
processes (``--query-compute-apps``), from a saved CSV or run on this host under a deadline."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

from seatplan import smi_csv
from seatplan.adopt.evidence import APPS_QUERY, ComputeApp, GpuReading
from seatplan.adopt.readers.text import MAX_FILE_BYTES, host_and_path, read_text
from seatplan.errors import SeatplanError
from seatplan.units import MAX_GPU_INDEX, MAX_PID, MAX_PLAUSIBLE_BYTES, strict_whole_number

SMI_QUERY = "index,name,uuid,memory.total,memory.reserved,memory.used"


def read_smi_csv(text: str, source: str, host: str | None) -> list[GpuReading]:
    """``nvidia-smi --query-gpu=index,name,uuid,memory.total[,memory.reserved] --format=csv[,nounits]``."""
    header: list[str] | None = None
    gpus: list[GpuReading] = []
    for number, cells in smi_csv.rows(text):
        if header is None or cells[0].startswith("index"):
            header = smi_csv.header_fields(cells)
            missing = {"index", "name", "uuid", "memory.total"} - set(header)
            if missing:
                raise SeatplanError(f"the nvidia-smi CSV lacks {', '.join(sorted(missing))}", where=f"{source}:{number}",
                                    fix=f"run nvidia-smi --query-gpu={SMI_QUERY} --format=csv")
            continue
        where = f"{source}:{number}"
        if len(cells) != len(header):
            raise SeatplanError(f"{len(cells)} fields under a header of {len(header)}", where=where,
                                fix=f"give the whole output of nvidia-smi --query-gpu={SMI_QUERY} --format=csv")
        values = dict(zip(header, cells))
        reserved, used = values.get("memory.reserved"), values.get("memory.used")
        gpus.append(GpuReading(host=host, index=_whole(values["index"], "index", where, MAX_GPU_INDEX), name=values["name"], uuid=values["uuid"],
                               total_mib=_mib(values["memory.total"], "memory.total", where),
                               reserved_mib=None if reserved is None else _mib(reserved, "memory.reserved", where), source=where,
                               used_mib=None if used is None or smi_csv.not_known(used) else _mib(used, "memory.used", where)))
    if not gpus:
        raise SeatplanError("no GPU in the nvidia-smi output", where=source, fix=f"run nvidia-smi --query-gpu={SMI_QUERY} --format=csv")
    indices = [gpu.index for gpu in gpus]
    if len(set(indices)) != len(indices):
        raise SeatplanError("a GPU index appears twice (a log of several readings?)", where=source,
                            fix=f"give one reading: nvidia-smi --query-gpu={SMI_QUERY} --format=csv (no -l)")
    return gpus


def _whole(cell: str, what: str, where: str, maximum: int) -> int:
    # units.strict_whole_number: ASCII digits only (str.isdigit() also takes "²" and "٨٠٠٦", which no nvidia-smi prints), bounded
    return strict_whole_number(cell, field=what, where=where, maximum=maximum, fix="give nvidia-smi's own CSV output")


def _mib(cell: str, what: str, where: str) -> int:
    return _whole(smi_csv.mib_text(cell), f"{what} (MiB)", where, MAX_PLAUSIBLE_BYTES // 2**20)


def read_smi_file(spec: str) -> list[GpuReading]:
    """``CSV`` or ``HOST=CSV``."""
    host, path = host_and_path(spec)
    text = read_text(path, "nvidia-smi CSV", f"save nvidia-smi --query-gpu={SMI_QUERY} --format=csv to a file")
    return read_smi_csv(text, str(path), host)


def read_compute_apps(text: str, source: str) -> list[ComputeApp]:
    """``nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,used_memory --format=csv[,nounits]``."""
    apps: list[ComputeApp] = []
    header: list[str] | None = None
    fix = f"run nvidia-smi --query-compute-apps={APPS_QUERY} --format=csv"
    for number, cells in smi_csv.rows(text):
        where = f"{source}:{number}"
        if header is None:
            header = smi_csv.header_fields(cells)
            missing = {"pid", "gpu_uuid"} - set(header)
            if not set(header) & set(smi_csv.APP_MEMORY_COLUMNS):
                missing.add("used_gpu_memory")
            if missing:
                raise SeatplanError(f"the compute-apps CSV lacks {', '.join(sorted(missing))}", where=where, fix=fix)
            continue
        if len(cells) != len(header):
            raise SeatplanError(f"{len(cells)} fields under a header of {len(header)}", where=where, fix=f"give the whole output of {fix.removeprefix('run ')}")
        values = dict(zip(header, cells))
        used = smi_csv.app_memory_cell(values)
        apps.append(ComputeApp(pid=_whole(values["pid"], "pid", where, MAX_PID), process_name=values.get("process_name", "")[:200],
                               gpu_uuid=values["gpu_uuid"], used_mib=None if smi_csv.not_known(used) else _mib(used, "used_memory", where), source=where))
    if header is None:
        raise SeatplanError("the compute-apps CSV is empty (not even its header)", where=source, fix=fix)
    return apps


def read_apps_file(path: Path) -> list[ComputeApp]:
    """The processes on the GPUs (their UUIDs name the GPU, on whichever host)."""
    text = read_text(path, "compute-apps CSV", f"save nvidia-smi --query-compute-apps={APPS_QUERY} --format=csv to a file")
    return read_compute_apps(text, str(path))


def run_smi(timeout_s: float) -> list[GpuReading]:
    """nvidia-smi on this host (``--gpus-from-host``), given ``timeout_s`` to answer (a hung driver hangs it)."""
    command = ["nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv"]
    text = _run_nvidia_smi(command, timeout_s, f"nvidia-smi --query-gpu={SMI_QUERY} --format=csv > gpus.csv", "--nvidia-smi CSV")
    try:
        return read_smi_csv(text, "nvidia-smi on this host", None)
    except SeatplanError as problem:
        raise SeatplanError(f"nvidia-smi's output: {problem.message}", where=f"--gpus-from-host ({problem.where})",
                            fix=f"check what `{' '.join(command)}` prints here, or pass --nvidia-smi CSV saved on the GPU host") from None


def run_compute_apps(timeout_s: float) -> list[ComputeApp]:
    """nvidia-smi's processes on this host (``--gpus-from-host`` with ``--processes-from-host``), under the same deadline."""
    command = ["nvidia-smi", f"--query-compute-apps={APPS_QUERY}", "--format=csv"]
    text = _run_nvidia_smi(command, timeout_s, f"nvidia-smi --query-compute-apps={APPS_QUERY} --format=csv > apps.csv", "--compute-apps CSV")
    try:
        return read_compute_apps(text, "nvidia-smi --query-compute-apps on this host")
    except SeatplanError as problem:
        raise SeatplanError(f"nvidia-smi's output: {problem.message}", where=f"--gpus-from-host ({problem.where})",
                            fix=f"check what `{' '.join(command)}` prints here, or pass --compute-apps CSV saved on the GPU host") from None


def _run_nvidia_smi(command: list[str], timeout_s: float, save: str, option: str) -> str:
    """What ``command`` prints here within ``timeout_s`` (a hung driver hangs nvidia-smi), as text."""
    saved = f"or pass {option} saved on the GPU host ({save})"
    try:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as problem:
        raise SeatplanError(f"cannot run nvidia-smi: {problem.strerror or problem}", where="--gpus-from-host",
                            fix=f"run adopt on the GPU host (with nvidia-smi on PATH), {saved}") from None
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        # one stuck in the driver may not die at once: give it a moment to go, never wait for ever
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.communicate(timeout=1.0)
        raise SeatplanError(f"nvidia-smi did not answer within {timeout_s:g} s", where="--gpus-from-host",
                            fix=f"check the NVIDIA driver (nvidia-smi hangs when it does), give it longer with --timeout, {saved}") from None
    if process.returncode != 0:
        said = stderr.decode("utf-8", "replace").strip() or stdout.decode("utf-8", "replace").strip()
        raise SeatplanError(f"nvidia-smi exited with status {process.returncode}: {said[:300] or 'no message'}", where="--gpus-from-host",
                            fix=f"check the NVIDIA driver, {saved}")
    try:
        return stdout[:MAX_FILE_BYTES].decode("utf-8")
    except UnicodeDecodeError as problem:
        raise SeatplanError(f"nvidia-smi's output is not UTF-8 text ({problem.reason})", where="--gpus-from-host",
                            fix=f"check what nvidia-smi prints here, {saved}") from None


def smi_readings(specs: list[str], from_host: bool, timeout_s: float) -> list[GpuReading]:
    readings: list[GpuReading] = []
    for spec in specs:
        readings += read_smi_file(spec)
    if from_host:
        readings += run_smi(timeout_s)
    return readings

