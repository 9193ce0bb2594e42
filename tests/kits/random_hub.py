"""Random Beszel histories whose truth the fit does not assume: shapes, sizes and positions drawn at random.

The records are made as the hub makes them (kits/beszel_hub.py's ``cron_records``, henrygd/beszel's
records.go replayed run by run): each longer record the mean of the shorter ones in its window, made only with
enough of them, the 20m/120m/480m ones only when none of their type was made in the last window, so polling
gaps shift where the longer windows fall and leave records averaging fewer polls than their window holds;
the hourly clean-up keeps each type for its period plus up to an hour.

Per draw:

* **creep shape**: a saturating exponential, linear-then-flat (ramp of 3 × the time constant, so both reach
  95 % at about the same time), or two-stage (the drawn time constant's exponential holding 30–70 % of the
  rise, and one 2–4 × slower, at most 24 h, for the rest);
* **time constant** 3–24 h; **rise** 0.3–3 GB (286–2,861 MiB);
* **reboot** anywhere: its age is drawn on a continuous scale, so it sits anywhere inside whatever window
  holds it; down 1–10 minutes; the life before it crept by 0.3–3 GB and the new life starts near the old
  life's first level (the creep is what the restart gives back);
* **jitter** σ 5–50 MiB on each poll; **gaps** 0–3 stretches of 10 minutes to 6 hours with no polls;
* **history** 1–30 days (so the record mix around the reboot ranges from 10m to 480m), and whether the boot
  line is given (half the draws).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from kits.beszel_hub import RETENTION_S, STORED_PER_MIB, cron_records
from kits.series import hub_database

MINUTE, HOUR, DAY = 60, 3600, 86400
# A Tuesday morning, aligned on no record period.
NOW = int(datetime(2026, 12, 1, 0, 3, 20, tzinfo=UTC).timestamp())
PLATEAU_SHARE = 0.95
GB_MIB = 1e9 / 2**20


@dataclass
class Draw:
    shape: str
    tau_h: float
    rise_mib: float
    age_s: float          # the reboot, seconds before NOW
    down_s: float
    level_mib: float      # the first full level after the boot (truth at the boot instant)
    before_level_mib: float
    before_rise_mib: float
    jitter_mib: float
    gaps: list[tuple[float, float]]
    days: float
    boot_line: bool
    fast_share: float = 0.0
    fast_ratio: float = 4.0

    @property
    def boot_s(self) -> float:
        return NOW - self.age_s

    def creep(self, since_s: np.ndarray) -> np.ndarray:
        """The creep's MiB ``since_s`` after the engine came back (0 before)."""
        x = np.clip(since_s, 0.0, None)
        tau = self.tau_h * HOUR
        if self.shape == "linear":
            return self.rise_mib * np.minimum(x / (3 * tau), 1.0)
        if self.shape == "exponential":
            return self.rise_mib * -np.expm1(-x / tau)
        # Two stages, each with its own time constant in 3–24 h: the drawn one first, a slower one after.
        slow = min(tau * self.fast_ratio, 24 * HOUR)
        return self.rise_mib * (self.fast_share * -np.expm1(-x / tau) + (1 - self.fast_share) * -np.expm1(-x / slow))

    def used(self, times_s: np.ndarray) -> np.ndarray:
        boot, back = self.boot_s, self.boot_s + self.down_s
        # The life before: crept (exponentially, 6 h) from its own boot at the history's start.
        before = self.before_level_mib + self.before_rise_mib * -np.expm1(-(times_s - (NOW - self.days * DAY)) / (6 * HOUR))
        after = self.level_mib + self.creep(times_s - back)
        return np.where(times_s < boot, before, np.where(times_s < back, 0.0, after))

    def truth_mib(self, at_s: float) -> float:
        return float(self.used(np.array([at_s]))[0])

    def plateau_at_s(self, until_s: float = NOW) -> float | None:
        """When the curve first holds 95 % of its whole rise (None: not before ``until_s``)."""
        times = np.arange(self.boot_s + self.down_s, until_s + 1.0, 30.0)
        reached = np.flatnonzero(self.creep(times - self.boot_s - self.down_s) >= PLATEAU_SHARE * self.rise_mib)
        return float(times[reached[0]]) if len(reached) else None


def draw(rng: np.random.Generator) -> Draw:
    shape = str(rng.choice(["exponential", "linear", "two-stage"]))
    tau_h = float(rng.uniform(3, 24))
    rise = float(rng.uniform(0.3, 3.0) * GB_MIB)
    fast_share = float(rng.uniform(0.3, 0.7)) if shape == "two-stage" else 0.0
    # 95 % of the rise: 3 τ for the exponential and the ramp, up to 3 × the slower stage's for two stages.
    reach_h = 3 * tau_h if shape != "two-stage" else 3 * min(tau_h * 3, 24.0)
    # Mostly levelled by now; one draw in five still rising (between 40 % and 100 % of the time to plateau).
    if rng.random() < 0.2:
        age_h = reach_h * float(rng.uniform(0.4, 1.0))
    else:
        age_h = reach_h * float(rng.uniform(1.4, 3.0)) + float(rng.uniform(1, 48))
    days = max(float(rng.uniform(1, 30)), age_h / 24 + float(rng.uniform(0.3, 2)))
    days = min(days, 30.0)
    age_h = min(age_h, days * 24 - 6)
    level = float(rng.uniform(20_000, 90_000))
    gaps = [(float(rng.uniform(0, days * DAY)), float(rng.uniform(10 * MINUTE, 6 * HOUR))) for _ in range(int(rng.integers(0, 4)))]
    return Draw(shape=shape, tau_h=tau_h, rise_mib=rise, age_s=age_h * HOUR, down_s=float(rng.uniform(60, 600)),
                level_mib=level + float(rng.normal(0, 150)), before_level_mib=level, before_rise_mib=float(rng.uniform(0.3, 3.0) * GB_MIB),
                jitter_mib=float(rng.uniform(5, 50)), gaps=gaps, days=days, boot_line=bool(rng.random() < 0.5),
                fast_share=fast_share, fast_ratio=float(rng.uniform(2, 4)))


def records(one: Draw, rng: np.random.Generator) -> list[tuple[str, int, float]]:
    """(type, creation time, mean in the hub's stored unit, MiB / 1.024) for every record the hub keeps at NOW."""
    # The hub polls once a minute, at an offset of its own; the agent reads nvidia-smi's whole MiB.
    polls = np.arange(NOW - int(one.days * DAY), NOW + 1, MINUTE) + int(rng.integers(0, MINUTE))
    polls = polls[polls <= NOW]
    keep = np.ones(len(polls), dtype=bool)
    for start, length in one.gaps:
        keep &= ~((polls >= NOW - start) & (polls < NOW - start + length))
    polls = polls[keep]
    raw = np.maximum(one.used(polls.astype(float)) + rng.normal(0, one.jitter_mib, len(polls)), 0.0)
    stored = np.round(np.round(raw) * STORED_PER_MIB, 2)
    out: list[tuple[str, int, float]] = []
    for kind, rows in cron_records(polls, stored[:, None]).items():
        # The clean-up runs hourly: each type is kept for its period plus however long since the last run.
        kept_s = RETENTION_S[kind] + float(rng.uniform(0, HOUR))
        out.extend((kind, int(created), float(means[0])) for created, means in rows if created >= NOW - kept_s)
    return out


def write_hub(path: Path, one: Draw, rng: np.random.Generator, total_mib: float = 143_771.0) -> Path:
    connection = hub_database(path, "sys000000000009", "gpu-node-09", "10.0.0.9")
    rows = []
    for number, (kind, created, mean) in enumerate(records(one, rng)):
        stamp = datetime.fromtimestamp(created, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.000Z")
        gpu: dict[str, float | str | int] = {"n": "H200 0", "mt": round(total_mib * STORED_PER_MIB, 2), "u": 5}
        if mean:
            gpu["mu"] = mean
        rows.append((stamp, f"r{number:014d}", json.dumps({"g": {"0": gpu}}), "sys000000000009", kind, stamp))
    connection.executemany("INSERT INTO system_stats VALUES (?, ?, ?, ?, ?, ?)", rows)
    connection.commit()
    connection.close()
    return path
