"""adopt (one reading of the GPUs and their processes) and observe (logs over days) read nvidia-smi's CSV through
one module, seatplan.smi_csv: on any output nvidia-smi could print, they must see the same GPUs, memory and processes.

Random over what nvidia-smi prints: 1-16 GPUs, any column order the query allows (the first column is one whose
cells start with a digit or ``GPU-``, as nvidia-smi prints the queried columns in order), ``csv`` or
``csv,nounits``, memory from 0 to 200,000 MiB, ``[N/A]`` / ``[Not Supported]`` cells, either name of the
compute-apps memory column.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from seatplan.adopt.readers.nvidia_smi import read_compute_apps, read_smi_csv
from seatplan.observe.sources.nvidia_smi import read_nvidia_smi
from seatplan.smi_csv import app_memory_cell, mib_reading, mib_text

UNKNOWN = st.sampled_from(["[N/A]", "[Not Supported]"])
GPU_COLUMNS = ["timestamp", "index", "name", "uuid", "memory.total", "memory.used"]
FIRST_GPU_COLUMNS = ["timestamp", "index", "uuid"]


def _memory_cell(mib: int | None, nounits: bool, unknown: str) -> str:
    if mib is None:
        return unknown
    return str(mib) if nounits else f"{mib} MiB"


@st.composite
def gpu_readings(draw: st.DrawFn) -> tuple[str, dict[int, tuple[int, int | None]]]:
    """An nvidia-smi --query-gpu CSV with one reading per GPU, and what it says: index → (total MiB, used MiB or None)."""
    count = draw(st.integers(1, 16))
    first = draw(st.sampled_from(FIRST_GPU_COLUMNS))
    rest = draw(st.permutations([column for column in GPU_COLUMNS if column != first]))
    columns = [first, *rest]
    nounits = draw(st.booleans())
    indices = draw(st.lists(st.integers(0, 63), min_size=count, max_size=count, unique=True))
    truth: dict[int, tuple[int, int | None]] = {}
    lines = [", ".join(column if nounits or not column.startswith("memory") else f"{column} [MiB]" for column in columns)]
    for index in indices:
        total = draw(st.integers(1, 200_000))
        used = draw(st.one_of(st.none(), st.integers(0, total)))
        truth[index] = (total, used)
        cells = {"timestamp": "2026/11/27 10:05:45.268", "index": str(index), "name": "NVIDIA H100 80GB HBM3",
                 "uuid": f"GPU-{index:08x}-0000-0000-0000-000000000000", "memory.total": _memory_cell(total, nounits, ""),
                 "memory.used": _memory_cell(used, nounits, draw(UNKNOWN))}
        lines.append(", ".join(cells[column] for column in columns))
    return "\n".join(lines) + "\n", truth


@st.composite
def compute_apps(draw: st.DrawFn) -> tuple[str, dict[int, tuple[str, int | None]]]:
    """An nvidia-smi --query-compute-apps CSV, and what it says: pid → (GPU UUID, used MiB or None)."""
    memory_column = draw(st.sampled_from(["used_gpu_memory", "used_memory"]))
    nounits = draw(st.booleans())
    pids = draw(st.lists(st.integers(1, 4_194_304), min_size=1, max_size=40, unique=True))
    lines = [f"pid, process_name, gpu_uuid, {memory_column}{'' if nounits else ' [MiB]'}"]
    truth: dict[int, tuple[str, int | None]] = {}
    for pid in pids:
        uuid = f"GPU-{draw(st.integers(0, 15)):08x}-0000-0000-0000-000000000000"
        used = draw(st.one_of(st.none(), st.integers(0, 200_000)))
        truth[pid] = (uuid, used)
        lines.append(f"{pid}, /usr/bin/python3, {uuid}, {_memory_cell(used, nounits, draw(UNKNOWN))}")
    return "\n".join(lines) + "\n", truth


def _observed(text: str) -> tuple[list, list]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "smi.csv"
        path.write_text(text)
        return read_nvidia_smi(path)


@settings(max_examples=60, deadline=None)
@given(gpu_readings())
def test_adopt_and_observe_read_the_same_gpus(drawn) -> None:
    text, truth = drawn
    adopted = {gpu.index: (gpu.total_mib, gpu.used_mib) for gpu in read_smi_csv(text, "smi.csv", None)}
    series, _ = _observed(text)
    observed = {gpu.index: (gpu.total_mib, None if math.isnan(gpu.used_mib[0]) else gpu.used_mib[0]) for gpu in series}
    assert adopted == truth
    assert observed == truth


@settings(max_examples=60, deadline=None)
@given(compute_apps())
def test_adopt_and_observe_read_the_same_processes(drawn) -> None:
    text, truth = drawn
    adopted = {app.pid: (app.gpu_uuid, app.used_mib) for app in read_compute_apps(text, "apps.csv")}
    assert adopted == truth
    known = {pid: seen for pid, seen in truth.items() if seen[1] is not None}
    if not known:
        return  # observe keeps no process nvidia-smi did not measure, and a log of none is refused as empty
    _, processes = _observed(text)
    assert {process.pid: (process.gpu_uuid, process.used_mib) for process in processes} == known


def test_the_cell_helpers() -> None:
    assert mib_text(" 81559 MiB ") == "81559" and mib_text("81559") == "81559"
    assert mib_reading("81559 MiB") == 81559.0 and math.isnan(mib_reading("[N/A]")) and math.isnan(mib_reading("[Not Supported]"))
    assert app_memory_cell({"used_memory": "5 MiB"}) == "5 MiB" and app_memory_cell({"used_gpu_memory": "7"}) == "7"
    assert app_memory_cell({"pid": "1"}) == ""
