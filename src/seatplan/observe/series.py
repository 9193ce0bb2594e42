"""A GPU's used memory reduced for pictures (``seatplan report``): at most SERIES_BINS evenly spaced bins,
each with the lowest, median and highest reading in it. Bounded whatever the history's length; the lowest
keeps restarts visible (the minutes an engine is down), the highest keeps the worst moment of each bin."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from seatplan.documents.observed import UsedSeries
from seatplan.observe.detect import GpuSeries, bin_medians

SERIES_BINS = 400


def compact_series(series: GpuSeries, max_bins: int = SERIES_BINS) -> UsedSeries | None:
    readings = ~np.isnan(series.used_mib)
    times_s = series.times_s[readings]
    used_mib = series.used_mib[readings]
    if len(times_s) == 0:
        return None
    order = np.argsort(times_s, kind="stable")
    times_s, used_mib = times_s[order], used_mib[order]
    span_s = float(times_s[-1] - times_s[0])
    bin_seconds = max(1, int(np.ceil((span_s + 1) / max_bins)))
    starts_s, medians = bin_medians(times_s, used_mib, bin_seconds)
    bins = ((times_s - times_s[0]) // bin_seconds).astype(np.int64)
    firsts = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]])
    return UsedSeries(
        bin_seconds=bin_seconds,
        starts=[datetime.fromtimestamp(float(start), tz=UTC) for start in starts_s],
        min_mib=[round(float(value), 1) for value in np.minimum.reduceat(used_mib, firsts)],
        median_mib=[round(float(value), 1) for value in medians],
        max_mib=[round(float(value), 1) for value in np.maximum.reduceat(used_mib, firsts)],
    )
