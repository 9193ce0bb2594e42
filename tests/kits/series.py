"""Generated GPU memory series with known restarts, creep, noise and gaps, and writers for each source format."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

T0 = int(datetime(2026, 11, 20, tzinfo=UTC).timestamp())
MINUTE = 60
HOUR = 3600
DAY = 86400


@dataclass
class Boot:
    at_s: int              # restart time, seconds after T0
    level_mib: float       # used just after the boot
    creep_mib: float = 0.0  # rise after the boot
    creep_hours: float = 0.0  # linear rise over this long, then flat
    down_minutes: int = 3   # the engine is down (used ~0) this long


@dataclass
class Scenario:
    boots: list[Boot]
    days: float
    noise_mib: float = 20.0
    step_s: int = MINUTE
    gaps: list[tuple[int, int]] = field(default_factory=list)  # (start, length) in seconds after T0, no samples
    seed: int = 7

    def generate(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        offsets = np.arange(0, int(self.days * DAY), self.step_s)
        used = np.zeros(len(offsets))
        for boot, following in zip(self.boots, self.boots[1:] + [None]):
            end = following.at_s if following else offsets[-1] + 1
            inside = (offsets >= boot.at_s) & (offsets < end)
            since = (offsets[inside] - boot.at_s - boot.down_minutes * MINUTE) / HOUR
            ramp = np.clip(since / boot.creep_hours, 0, 1) if boot.creep_hours else (since >= 0).astype(float)
            used[inside] = np.where(since < 0, 0.0, boot.level_mib + boot.creep_mib * ramp)
        used += rng.normal(0, self.noise_mib, len(used))
        keep = np.ones(len(offsets), dtype=bool)
        for start, length in self.gaps:
            keep &= ~((offsets >= start) & (offsets < start + length))
        return T0 + offsets[keep], np.maximum(used[keep], 0.0)


def seed_scenarios() -> dict[str, Scenario]:
    """The seed case: GPU 0 flat at 88,566–88,779 MiB for four days, then 91,082 after a restart;
    GPU 1 creeping for one to two days after each boot to about 60 MiB free (of 97,871 MiB)."""
    flat = Scenario(boots=[Boot(0, 88_566, creep_mib=200, creep_hours=30), Boot(4 * DAY, 91_082)], days=6, noise_mib=15)
    creeping = Scenario(
        boots=[Boot(0, 70_000, creep_mib=27_800, creep_hours=30), Boot(3 * DAY, 70_000, creep_mib=27_800, creep_hours=40)],
        days=7, noise_mib=20, gaps=[(DAY + 5 * HOUR, 2 * HOUR), (5 * DAY, 25 * MINUTE)])
    return {"flat": flat, "creeping": creeping}


def write_nvidia_smi(path: Path, gpus: dict[int, tuple[np.ndarray, np.ndarray]], total_mib: int = 97_871) -> None:
    lines = ["timestamp, index, memory.used [MiB], memory.total [MiB]"]
    rows = sorted((t, index, used) for index, (times, values) in gpus.items() for t, used in zip(times, values))
    for number, (t, index, used) in enumerate(rows):
        if number == len(rows) // 2:
            lines.append("timestamp, index, memory.used [MiB], memory.total [MiB]")  # the logging loop restarted
        stamp = datetime.fromtimestamp(t, tz=UTC).strftime("%Y/%m/%d %H:%M:%S.000")
        lines.append(f"{stamp}, {index}, {int(round(used))} MiB, {total_mib} MiB")
    path.write_text("\n".join(lines) + "\n")


def hub_database(path: Path, system_id: str, name: str, host: str) -> sqlite3.Connection:
    """An empty PocketBase-shaped hub database (the two tables seatplan reads) holding one system."""
    connection = sqlite3.connect(path)
    connection.executescript(
        "CREATE TABLE systems (created TEXT DEFAULT '' NOT NULL, host TEXT DEFAULT '' NOT NULL, id TEXT PRIMARY KEY NOT NULL,"
        " info JSON DEFAULT NULL, name TEXT DEFAULT '' NOT NULL, port TEXT DEFAULT '' NOT NULL, status TEXT DEFAULT '' NOT NULL,"
        " updated TEXT DEFAULT '' NOT NULL, users JSON DEFAULT '[]' NOT NULL);"
        "CREATE TABLE system_stats (created TEXT DEFAULT '' NOT NULL, id TEXT PRIMARY KEY NOT NULL, stats JSON DEFAULT NULL,"
        " system TEXT DEFAULT '' NOT NULL, type TEXT DEFAULT '' NOT NULL, updated TEXT DEFAULT '' NOT NULL);")
    connection.execute("INSERT INTO systems (id, name, host, status) VALUES (?, ?, ?, 'up')", (system_id, name, host))
    return connection


def write_beszel(path: Path, gpus: dict[int, tuple[np.ndarray, np.ndarray]], total_mib: float = 97_871.0) -> None:
    """A PocketBase-shaped hub database with 10m records (what a hub keeps for the last 12 h is finer; 10m is enough)."""
    connection = hub_database(path, "sys000000000001", "gpu-node-02", "10.0.0.2")
    by_time: dict[int, dict[str, dict]] = {}
    for index, (times, values) in gpus.items():
        for t, used in zip(times, values):
            gpu = {"n": f"H100 {index}", "mt": round(total_mib / 1.024, 2), "u": 10}
            if round(used / 1.024, 2):
                gpu["mu"] = round(used / 1.024, 2)  # Beszel stores MiB / 1.024 and omits zeros
            by_time.setdefault(int(t), {})[str(index)] = gpu
    rows = []
    for number, (t, gpus_at) in enumerate(sorted(by_time.items())):
        created = datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.000Z")
        rows.append((created, f"r{number:014d}", json.dumps({"cpu": 1.0, "mu": 96.3, "g": gpus_at}), "sys000000000001", "10m", created))
    connection.executemany("INSERT INTO system_stats VALUES (?, ?, ?, ?, ?, ?)", rows)
    connection.commit()
    connection.close()


def dcgm_text(gpus: dict[int, tuple[np.ndarray, np.ndarray]], *, total_mib: int = 97_871, reserved_mib: int = 551,
              openmetrics: bool = False) -> str:
    """DCGM-exporter samples with timestamps: Prometheus text (ms) or OpenMetrics (s, # EOF)."""
    lines = ["# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).", "# TYPE DCGM_FI_DEV_FB_USED gauge"]
    free_lines = ["# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).", "# TYPE DCGM_FI_DEV_FB_FREE gauge"]
    for index, (times, values) in gpus.items():
        labels = f'gpu="{index}",UUID="GPU-{index:08d}",device="nvidia{index}",modelName="NVIDIA H200",Hostname="node-1"'
        for t, used in zip(times, values):
            stamp = f"{int(t)}" if openmetrics else f"{int(t) * 1000}"
            lines.append(f"DCGM_FI_DEV_FB_USED{{{labels}}} {int(round(used))} {stamp}")
            free_lines.append(f"DCGM_FI_DEV_FB_FREE{{{labels}}} {total_mib - reserved_mib - int(round(used))} {stamp}")
    text = "\n".join(lines + free_lines) + "\n"
    return text + "# EOF\n" if openmetrics else text
