"""Steps, creep and plateaus in a GPU's used-memory series (pure, vectorised with numpy).

The series is first reduced to per-bin medians (10-minute bins by default, wider when the samples
are sparser), which removes single-sample spikes and the minutes an engine is down during a restart.
Empty bins (missing samples, agent restarts, retention gaps) are dropped, so a gap joins the bins on
either side: it makes a step only if the level really differs across it.

* **Step**: the median of the ``persist_bins`` bins after a point differs from the median of the
  ``persist_bins`` bins before it by at least ``min_step_mib`` (and so does the short ``window_bins``
  pair, which places it, and it carries at least ``abruptness`` of the long change, which tells a
  step from a steady rise). Consecutive candidate points form one step; its time is refined on the raw
  samples to the first reading that left the old level (the restart). Changes closer than
  ``persist_bins`` bins are one restart (down, loading, up); if the level after equals the level
  before, it was an outage, not a step.
* **Segment**: the stretch between steps (one boot's life). Its level just after the boot is the
  median of its first ``persist_bins`` bins, its plateau the median of its last quarter (at least
  ``persist_bins`` bins).
* **Creep**: plateau − level after boot ≥ ``min_creep_mib``. It levelled off at the first bin whose
  rolling median comes within ``max(3 × noise, 5 % of the rise)`` of the plateau; ``levelled_off`` is
  false when the last quarter still rises by more than that (then the plateau is the latest level).
  A change across a gap in sampling that the rise before the gap accounts for is creep, not a step.

Tolerances (checked by tests/observe/test_detect.py on generated series with noise σ = 20 MiB):
step time within one bin (10 min) of the true restart, step size within 2 % or 50 MiB (5 % of the
creep when a creep starts right at the boot: the level after the boot is read over ``persist_bins``),
plateau level within 50 MiB, plateau time within 10 % of the creep's duration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from seatplan.documents.observed import Creep, Segment, Step
from seatplan.observe.averaged import Analysis, Records, analyse_records, when_utc


@dataclass(frozen=True)
class DetectSettings:
    min_step_mib: float = 256.0
    min_creep_mib: float = 256.0
    bin_seconds: int = 600
    window_bins: int = 3
    persist_bins: int = 7
    gap_factor: float = 5.0
    abruptness: float = 0.7


@dataclass
class GpuSeries:
    """One GPU's used memory over time (MiB as nvidia-smi counts them; NaN = no reading)."""

    index: int
    times_s: np.ndarray
    used_mib: np.ndarray
    host: str | None = None
    total_mib: float | None = None
    reserved_mib: float | None = None
    source: str = ""
    # Averaged history (Beszel): each reading is the mean over (time − window, time]; None = instantaneous readings.
    window_s: np.ndarray | None = None
    record_types: np.ndarray | None = None


def bin_medians(times_s: np.ndarray, values: np.ndarray, bin_seconds: int) -> tuple[np.ndarray, np.ndarray]:
    """Start times and (lower) medians of the non-empty bins; ``times_s`` must be sorted."""
    bins = ((times_s - times_s[0]) // bin_seconds).astype(np.int64)
    # One float sort orders by bin, then by value inside the bin (much faster than a lexsort):
    # the bins are already in order, so position j of the sorted keys still belongs to bins[j].
    low = float(values.min())
    spread = float(values.max()) - low + 1.0
    ordered = np.sort(bins * spread + (values - low)) - bins * spread + low
    starts = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]])
    counts = np.diff(np.r_[starts, len(bins)])
    return times_s[0] + bins[starts] * bin_seconds, ordered[starts + (counts - 1) // 2]


def rolling_median(values: np.ndarray, width: int) -> np.ndarray:
    """Median of ``values[j : j + width]`` for every j (shorter at the end)."""
    if len(values) < width:
        return np.full(len(values), np.median(values)) if len(values) else values
    windows = np.lib.stride_tricks.sliding_window_view(values, width)
    if width % 2:
        head = np.partition(windows, width // 2, axis=1)[:, width // 2]  # odd width: a partial sort is the median
    else:
        head = np.median(windows, axis=1)
    tail = np.array([np.median(values[j:]) for j in range(len(values) - width + 1, len(values))])
    return np.r_[head, tail]


# A pause in readings shorter than this is never a gap.
GAP_FLOOR_S = 2 * 60
GAP_WINDOW = 9


def count_gaps(spacing_s: np.ndarray, gap_factor: float) -> int:
    """Pauses longer than ``gap_factor`` × the local spacing (the median of the next GAP_WINDOW), and than GAP_FLOOR_S.

    Against the local spacing, so a history that is coarser further back (Beszel's 120m records) has no "gaps".
    Only pauses over the floor can count, so the local median is taken at those alone (a year of 1-minute
    readings has a few hundred, not half a million).
    """
    candidates = np.flatnonzero(spacing_s > GAP_FLOOR_S)
    if len(candidates) == 0:
        return 0
    local = rolling_median_at(spacing_s, GAP_WINDOW, candidates)
    return int(np.count_nonzero(spacing_s[candidates] > np.maximum(gap_factor * local, GAP_FLOOR_S)))


def rolling_median_at(values: np.ndarray, width: int, positions: np.ndarray) -> np.ndarray:
    """``median(values[j : j + width])`` at each position j (shorter at the end), as rolling_median gives it there."""
    full = positions <= len(values) - width
    out = np.empty(len(positions))
    if full.any():
        out[full] = np.median(np.lib.stride_tricks.sliding_window_view(values, width)[positions[full]], axis=1)
    for k in np.flatnonzero(~full):
        out[k] = np.median(values[positions[k]:])
    return out


def analyse(series: GpuSeries, settings: DetectSettings = DetectSettings(), boot_times_s: Sequence[float] = (),
            boots_here_s: Sequence[float] = ()) -> Analysis:
    """Steps, segments and creep; averaged history (Beszel) goes to observe/averaged/, readings are binned here.

    Boot times (from the engines' logs) matter to averages only: ``boot_times_s`` pin a reboot the records show,
    ``boots_here_s`` (seats the plan or fleet puts on this GPU) are reboots even where the records show none.
    """
    if series.window_s is not None:
        return _averaged(series, settings, boot_times_s, boots_here_s)
    valid = ~np.isnan(series.used_mib)
    times, used = series.times_s[valid].astype(np.int64), series.used_mib[valid].astype(np.float64)
    if len(times) == 0:
        raise ValueError("no readings")
    if np.any(times[1:] < times[:-1]):
        order = np.argsort(times, kind="stable")
        times, used = times[order], used[order]
    spacing = np.diff(times)
    typical = float(np.median(spacing)) if len(spacing) else float(settings.bin_seconds)
    gaps = count_gaps(spacing.astype(np.float64), settings.gap_factor)
    # Short captures (minutes of nvidia-smi -l 15) get finer bins so the windows still fit.
    span = float(times[-1] - times[0])
    bin_seconds = int(max(typical, min(settings.bin_seconds, span / 16)))
    bin_times, levels = bin_medians(times, used, bin_seconds)
    steps = _steps(times, used, bin_times, levels, settings)
    segments = _segments(bin_times, levels, steps, settings, bin_seconds)
    return Analysis(samples=len(times), start=when_utc(times[0]), end=when_utc(times[-1]), gaps=gaps,
                    steps=steps, segments=segments)


def _averaged(series: GpuSeries, settings: DetectSettings, boot_times_s: Sequence[float], boots_here_s: Sequence[float]) -> Analysis:
    assert series.window_s is not None  # analyse() sends only averaged (windowed) series here
    records = Records(end_s=series.times_s, window_s=series.window_s, used_mib=series.used_mib,
                      record_types=series.record_types if series.record_types is not None else np.full(len(series.times_s), "?"))
    result = analyse_records(records, min_step_mib=settings.min_step_mib, min_creep_mib=settings.min_creep_mib,
                             boot_times_s=boot_times_s, boots_here_s=boots_here_s)
    result.history = history_stretches(records)
    return result


def history_stretches(records: Records) -> list[str]:
    """Which record type covers which stretch (finest first wins), e.g. ``120m × 72: 11-24 02:00 → 11-30 00:40``."""
    valid = ~np.isnan(records.used_mib)
    order = np.argsort(records.end_s[valid], kind="stable")
    kinds, starts, ends = records.record_types[valid][order], records.start_s[valid][order], records.end_s[valid][order]
    if len(kinds) == 0:
        return []
    breaks = np.flatnonzero(kinds[1:] != kinds[:-1]) + 1
    out = []
    for first, last in zip(np.r_[0, breaks], np.r_[breaks, len(kinds)]):
        out.append(f"{kinds[first]} × {last - first}: {when_utc(starts[first]):%m-%d %H:%M} → {when_utc(ends[last - 1]):%m-%d %H:%M}")
    return out


def _steps(times: np.ndarray, used: np.ndarray, bin_times: np.ndarray, levels: np.ndarray,
           settings: DetectSettings) -> list[Step]:
    k, p = settings.window_bins, settings.persist_bins
    count = len(levels)
    if count < 2 * k:
        return []
    short = rolling_median(levels, k)
    long = rolling_median(levels, p)
    index = np.arange(k, count - k + 1)
    left_long = long[np.maximum(index - p, 0)]
    # Near the start fewer than p bins exist before the point; use what there is.
    early = index < p
    if early.any():
        left_long[early] = [np.median(levels[:i]) for i in index[early]]
    short_jump = short[np.minimum(index, count - 1)] - short[index - k]
    long_jump = long[np.minimum(index, count - 1)] - left_long
    # A step is abrupt: the short pair of windows already sees most of the long pair's change. On a
    # steady ramp (creep) the short jump is only window_bins / persist_bins of the long one.
    hit = (np.abs(short_jump) >= settings.min_step_mib) & (np.abs(long_jump) >= settings.min_step_mib) \
        & (np.sign(short_jump) == np.sign(long_jump)) & (np.abs(short_jump) >= settings.abruptness * np.abs(long_jump))
    merged: list[tuple[int, int, float, float]] = []
    for run in _runs(np.flatnonzero(hit)):
        first, last = int(index[run[0]]), int(index[run[-1]])
        before, after = float(left_long[run[0]]), float(long[last])
        if merged and first - merged[-1][1] <= p:
            # A restart seen as several nearby changes (down, loading, up) is one step.
            first, before = merged[-1][0], merged[-1][2]
            merged.pop()
        merged.append((first, last, before, after))
    return [
        _place(times, used, bin_times, first, before, after, settings)
        for first, last, before, after in merged
        if abs(after - before) >= settings.min_step_mib
        and not _trend_explains(bin_times, levels, first, last, after - before, settings)
    ]


def _trend_explains(bin_times: np.ndarray, levels: np.ndarray, first: int, last: int, delta: float,
                    settings: DetectSettings) -> bool:
    """A change across a gap in sampling that the rise before the gap accounts for is creep, not a step.

    The creep may have levelled off during the gap, so any change in the trend's direction up to what
    the trend predicts for the gap (plus ``min_step_mib``) counts as explained.
    """
    p = settings.persist_bins
    if first < 2 * p:
        return False
    earlier, later = slice(first - 2 * p, first - p), slice(first - p, first)
    span = float(np.median(bin_times[later]) - np.median(bin_times[earlier]))
    if span <= 0:
        return False
    slope = (float(np.median(levels[later])) - float(np.median(levels[earlier]))) / span
    elapsed = float(np.median(bin_times[last:last + p]) - np.median(bin_times[later]))
    predicted = slope * elapsed
    return abs(predicted) >= settings.min_step_mib and np.sign(delta) == np.sign(predicted) \
        and abs(delta) < abs(predicted) + settings.min_step_mib


def _runs(positions: np.ndarray) -> list[np.ndarray]:
    if len(positions) == 0:
        return []
    breaks = np.flatnonzero(np.diff(positions) > 1) + 1
    return np.split(positions, breaks)


def _place(times: np.ndarray, used: np.ndarray, bin_times: np.ndarray, first_bin: int, before: float, after: float,
           settings: DetectSettings) -> Step:
    """The restart time: the first raw reading near the step that left the old level."""
    lo = bin_times[max(first_bin - settings.window_bins, 0)]
    hi = bin_times[min(first_bin + settings.window_bins, len(bin_times) - 1)]
    start, end = np.searchsorted(times, [lo, hi], side="left")[0], np.searchsorted(times, hi, side="right")
    off = np.abs(used[start:end] - before) > settings.min_step_mib / 2
    at = times[start + int(np.argmax(off))] if off.any() else bin_times[first_bin]
    return Step(at=when_utc(at), delta_mib=round(after - before, 1), before_mib=round(before, 1), after_mib=round(after, 1))


def _segments(bin_times: np.ndarray, levels: np.ndarray, steps: list[Step], settings: DetectSettings,
              bin_seconds: int) -> list[Segment]:
    bounds = [bin_times[0]] + [int(step.at.timestamp()) for step in steps] + [bin_times[-1] + bin_seconds]
    segments: list[Segment] = []
    for number, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        inside = (bin_times >= start) & (bin_times < end)
        seg_times, seg_levels = bin_times[inside], levels[inside]
        if number > 0:
            # Skip the restart itself (engine down, weights loading) up to where the new level holds.
            settled = np.flatnonzero(np.abs(seg_levels - steps[number - 1].after_mib) < settings.min_step_mib / 2)
            if len(settled):
                seg_times, seg_levels = seg_times[settled[0]:], seg_levels[settled[0]:]
        if len(seg_levels) == 0:
            continue
        segments.append(_segment(int(start), seg_times, seg_levels, settings, bin_seconds))
    return segments


def _noise(levels: np.ndarray) -> float:
    if len(levels) < 3:
        return 0.0
    differences = np.diff(levels)
    return float(np.median(np.abs(differences - np.median(differences))) / 0.6745 / np.sqrt(2))


def _segment(start: int, times: np.ndarray, levels: np.ndarray, settings: DetectSettings, bin_seconds: int) -> Segment:
    """One boot's stretch; ``start`` is the restart (the step), ``times`` begin where the level settled."""
    p = settings.persist_bins
    head = float(np.median(levels[:p]))
    tail_size = max(p, len(levels) // 4)
    plateau = float(np.median(levels[-tail_size:])) if len(levels) >= 2 * p else head
    latest = float(np.median(levels[-p:]))
    creep = None
    rise = plateau - head
    if rise >= settings.min_creep_mib:
        tolerance = max(3 * _noise(levels), 0.05 * rise)
        # Still rising through the last quarter: no plateau yet; report the latest level.
        levelled_off = latest - float(np.median(levels[-tail_size:][:p])) < tolerance
        if not levelled_off:
            plateau, rise = latest, latest - head
        smooth = rolling_median(levels, min(p, len(levels)))
        reached = np.flatnonzero(smooth >= plateau - tolerance)
        at_index = int(reached[0]) if len(reached) else len(levels) - 1
        # The rolling median looks ahead; centre it on the window.
        at_index = min(at_index + min(p, len(levels)) // 2, len(levels) - 1)
        plateau_at = times[at_index] if levelled_off else times[-1]
        ninety = np.flatnonzero(smooth >= head + 0.9 * rise)
        ninety_at = times[min(int(ninety[0]) + min(p, len(levels)) // 2, len(levels) - 1)] if len(ninety) else None
        creep = Creep(
            start=when_utc(start),
            plateau_at=when_utc(plateau_at),
            rise_mib=round(rise, 1),
            hours_to_plateau=round((plateau_at - start) / 3600, 2),
            hours_to_90pct=round((ninety_at - start) / 3600, 2) if levelled_off and ninety_at is not None else None,
            levelled_off=levelled_off,
        )
    return Segment(start=when_utc(start), end=when_utc(times[-1] + bin_seconds), level_after_boot_mib=round(head, 1),
                   plateau_used_mib=round(plateau, 1), creep=creep)
