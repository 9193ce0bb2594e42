"""Generated Beszel hub databases with known truth, built the way the hub builds them.

The rules are those of tests/fixtures/formats/make_beszel_db.py (henrygd/beszel v0.18.8): a 1-minute
record per hub poll (the agent's last nvidia-smi reading, MiB / 1.024, two decimals, ``mu`` omitted when
0); every 10 minutes the cron averages the shorter records of the last window into a longer one
(1m→10m with ≥ 9, 10m→20m ≥ 2, 20m→120m ≥ 6, 120m→480m ≥ 4; a 20m/120m/480m record only when none of
that type exists in the last window); the hourly clean-up keeps 1m for 1 h, 10m 12 h, 20m 24 h, 120m 7 d,
480m 30 d.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from kits.series import hub_database

MINUTE, HOUR, DAY = 60, 3600, 86400
NOW = int(datetime(2026, 12, 1, 0, 3, tzinfo=UTC).timestamp())
LONGER = [("1m", 9, "10m", 10), ("10m", 2, "20m", 20), ("20m", 6, "120m", 120), ("120m", 4, "480m", 480)]
RETENTION_S = {"1m": HOUR, "10m": 12 * HOUR, "20m": DAY, "120m": 7 * DAY, "480m": 30 * DAY}
STORED_PER_MIB = 1 / 1.024


@dataclass
class Life:
    """One boot: the engine restarts at ``boot_s`` (seconds before NOW), is down ``down_s``, then
    holds ``level_mib`` and creeps by ``creep_mib`` linearly over ``creep_hours`` (in steps of ``chunk_mib``)."""

    boot_s: int
    level_mib: float
    creep_mib: float = 0.0
    creep_hours: float = 0.0
    down_s: int = 150
    chunk_mib: float = 0.0


@dataclass
class Gpu:
    lives: list[Life]
    jitter_mib: float = 30.0
    total_mib: float = 97_871.0

    def used(self, times: np.ndarray) -> np.ndarray:
        value = np.zeros(len(times))
        lives = sorted(self.lives, key=lambda life: -life.boot_s)
        for life, following in zip(lives, lives[1:] + [None]):
            boot = NOW - life.boot_s
            end = NOW - following.boot_s if following else np.inf
            inside = (times >= boot) & (times < end)
            since = times[inside] - boot - life.down_s
            ramp = np.clip(since / (life.creep_hours * HOUR), 0, 1) if life.creep_hours else (since >= 0).astype(float)
            creep = life.creep_mib * ramp
            if life.chunk_mib:
                creep = np.floor(creep / life.chunk_mib) * life.chunk_mib
            value[inside] = np.where(since < 0, 0.0, life.level_mib + creep)
        return value

    def truth(self, life: int) -> tuple[float, float]:
        """(first full post-boot level, plateau) of one life."""
        one = self.lives[life]
        return one.level_mib, one.level_mib + one.creep_mib


@dataclass
class Hub:
    gpus: list[Gpu]
    days: float = 30.0
    seed: int = 1
    agent_gaps: list[tuple[int, int]] = field(default_factory=list)  # (seconds before NOW, length): no polls

    def records(self) -> list[tuple[str, int, dict[str, dict]]]:
        rng = np.random.default_rng(self.seed)
        polls = np.arange(NOW - int(self.days * DAY), NOW + 1, MINUTE) + rng.integers(-2, 3, size=1)[0]
        for before, length in self.agent_gaps:
            polls = polls[~((polls >= NOW - before) & (polls < NOW - before + length))]
        values = []
        for gpu in self.gpus:
            raw = gpu.used(polls) + rng.normal(0, gpu.jitter_mib, len(polls))
            values.append(np.round(np.round(np.maximum(raw, 0.0)) * STORED_PER_MIB, 2))
        records = cron_records(polls, np.array(values).T)
        out = []
        for kind, rows in records.items():
            for created, means in rows:
                if created < NOW - RETENTION_S[kind]:
                    continue
                gpus = {}
                for index, (gpu, mean) in enumerate(zip(self.gpus, means)):
                    entry = {"n": f"H200 {index}", "mt": round(gpu.total_mib * STORED_PER_MIB, 2), "u": 3}
                    if mean:
                        entry["mu"] = mean
                    gpus[str(index)] = entry
                out.append((kind, int(created), gpus))
        return out

    def write(self, path: Path, system: str = "gpu-node-03") -> Path:
        connection = hub_database(path, "sys000000000003", system, "10.0.0.3")
        rows = []
        for number, (kind, created, gpus) in enumerate(self.records()):
            stamp = datetime.fromtimestamp(created, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.000Z")
            rows.append((stamp, f"r{number:014d}", json.dumps({"cpu": 1.0, "g": gpus}), "sys000000000003", kind, stamp))
        connection.executemany("INSERT INTO system_stats VALUES (?, ?, ?, ?, ?, ?)", rows)
        connection.commit()
        connection.close()
        return path


def cron_records(polls: np.ndarray, values: np.ndarray, now: int = NOW) -> dict[str, list[tuple[int, list[float]]]]:
    """Every record the hub makes up to ``now`` from 1-minute ``values`` (polls × GPUs) at ``polls`` (seconds),
    before the clean-up: the 10-minute cron, run by run, each longer record the mean of the shorter ones in
    ``(run + 1 s − window, run + 1 s]``, made only with enough of them, and a 20m/120m/480m one only when none of
    its type was made in the last window less a minute (records.go's ``CreateLongerRecords``)."""
    stored: dict[str, tuple[list[float], list[np.ndarray]]] = {"1m": (polls.astype(float).tolist(), list(values))}
    records: dict[str, list[tuple[int, list[float]]]] = {"1m": list(zip(polls.tolist(), values.tolist()))}
    latest_created: dict[str, float] = {}
    cron = (int(polls[0]) // 600 + 1) * 600
    while cron <= now:
        for shorter, minimum, longer, minutes in LONGER:
            if longer != "10m" and latest_created.get(longer, -np.inf) > cron - minutes * MINUTE + MINUTE:
                continue
            times, means = stored.get(shorter, ([], []))
            # The cron run makes the shorter record first, then reads it into the longer one.
            lo, hi = bisect_right(times, cron + 1 - minutes * MINUTE), bisect_right(times, cron + 1)
            if hi - lo < minimum:
                continue
            mean = np.round(np.asarray(means[lo:hi]).mean(axis=0), 2)
            created = cron + 1
            old_times, old_means = stored.setdefault(longer, ([], []))
            old_times.append(created)
            old_means.append(mean)
            records.setdefault(longer, []).append((created, mean.tolist()))
            latest_created[longer] = created
        cron += 600
    return records
