"""One GPU's averaged records (``Records``: each the mean of used memory over its own window), their times in UTC and each record type's own jitter.

Part of :mod:`seatplan.observe.averaged` (the method is in its docstring).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

# A record type's own jitter is read from at least this many consecutive differences.
NOISE_RECORDS = 12


@dataclass
class Records:
    """One GPU's averaged records, ordered by end time: ``[end − window, end]`` has mean ``used``."""

    end_s: np.ndarray
    window_s: np.ndarray
    used_mib: np.ndarray
    record_types: np.ndarray

    @property
    def start_s(self) -> np.ndarray:
        return self.end_s - self.window_s

    @property
    def hole_s(self) -> np.ndarray:
        """Seconds no record covers before each record (0 for the first; negative where windows overlap)."""
        return np.r_[0.0, self.start_s[1:] - self.end_s[:-1]]

    def part(self, keep: np.ndarray) -> Records:
        return Records(self.end_s[keep], self.window_s[keep], self.used_mib[keep], self.record_types[keep])


def when_utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(float(seconds), tz=UTC)


def record_noise_mib(records: Records) -> np.ndarray:
    """Each record's jitter (MiB): the robust spread of the differences between consecutive records of its type.

    A type with fewer than NOISE_RECORDS records (the few 8-hour averages of a 9-day history) would read its
    creep and the reboot itself as jitter: it gets the jitter of the best-sampled type, scaled to its window
    as an average of independent polls (σ / √polls).
    """
    noise = np.zeros(len(records.used_mib))
    few = np.zeros(len(records.used_mib), dtype=bool)
    sampled: list[tuple[int, float, float]] = []
    for kind in np.unique(records.record_types):
        mine = records.record_types == kind
        steps = np.diff(records.used_mib[mine])
        if len(steps) < NOISE_RECORDS:
            few |= mine
            continue
        sigma_mib = float(np.median(np.abs(steps - np.median(steps)))) / 0.6745 / np.sqrt(2)
        noise[mine] = sigma_mib
        sampled.append((len(steps), sigma_mib, float(np.median(records.window_s[mine]))))
    if sampled:
        _, sigma_mib, window_s = max(sampled)
        noise[few] = sigma_mib * np.sqrt(window_s / records.window_s[few])
    return noise


def type_counts(records: Records) -> list[str]:
    """``["12 × 1m", "3 × 10m"]``: how many records of each type, for the words of a fit."""
    kinds, counts = np.unique(records.record_types, return_counts=True)
    return [f"{count} × {kind}" for kind, count in zip(kinds, counts)]
