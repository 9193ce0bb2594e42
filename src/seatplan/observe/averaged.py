"""Reboots, creep and plateaus in *averaged* history (Beszel's 1m/10m/20m/120m/480m records; pure, numpy).

Each record is the mean of the used memory over its own window ``(end − window, end]``; records of
different windows are never read as one series of points. Every figure comes from one model fitted to
the records as interval means, so a 2-hour and a 10-minute record each count for what they average:

* **Reboot** (where the history shows one): a record falls below the one before it by at least
  ``min_step_mib`` (memory only grows while an engine lives, so a fall is a restart), a record dips
  below both neighbours (a restart back to the same level: the minutes at zero pull the mean down),
  or a record is near zero (the engine was down for most of the window). The reboot lies somewhere in
  the windows of the falling record and the one before it (unless that one still reads the old level); a boot time from the engines' logs inside
  that span fixes it exactly, else it is fitted (and labelled inferred, with the span).
* **Model of one boot's life**: the level ``P`` before the reboot ``s``, then ``L + R · clip((t − s) / T, 0, 1)``,
  less the memory-seconds ``D`` the engine was down and loading, in the record holding the restart.
  ``L`` is the first full post-boot level, ``R`` the creep, ``T`` how long it took; ``L + R`` the plateau.
  For a given reboot time and ``T`` the model is linear in ``L``, ``R`` and ``D`` (all ≥ 0 where it matters),
  so those come from weighted least squares (each record weighted by its window length: equal weight per
  hour of history) and the reboot time and ``T`` from a grid search.
* **Levelled off**: the history stays flat after the fitted rise for a quarter of the rise's duration (at
  least an hour); else the plateau is the model's latest level and the creep is reported as still rising.
* **Resolved**: at least three records see the rise and the restart's span is shorter than the rise.
  A 12-hour creep seen only through 8-hour (480m) records is not: its plateau is still exact, its size is
  reported but labelled unresolved.

Tolerances (tests/observe/test_averaged.py, generated hub databases with Beszel's own averaging, a reboot in
every record type's stretch at several points of a window, jitter σ = 30 MiB on the 1-minute readings,
creeps of 0.5–3 GB over 12–48 h, 1–10 minutes down): plateau within 40 MiB; creep within 10 % wherever it
is resolved (with the boot line from the log; without it at 120m and finer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from seatplan.documents.observed import Creep, Segment, Step

# Near zero: the GPU held (almost) nothing for most of the window.
NEAR_ZERO_MIB = 1024.0
# Rises faster than this are the engine loading (the loss D covers them), not creep.
RAMP_HOURS = np.geomspace(2.0, 24 * 14, 80)
REBOOT_GRID = 48
FLAT_SHARE = 0.25
# A record within this share of --min-step-mib of the one before it still reads the old level.
UNTOUCHED_SHARE = 0.25
# Fits whose squared residuals are this close to the best one are told apart by the smallest rise.
TIE_SHARE, TIE_MIB = 0.02, 1.0
# The engine may be down and loading this long after the restart (so the next record may hold part of it).
LOSS_SPREAD_S = 900.0


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

    def part(self, keep: np.ndarray) -> Records:
        return Records(self.end_s[keep], self.window_s[keep], self.used_mib[keep], self.record_types[keep])


@dataclass
class Reboot:
    span_start_s: float
    span_end_s: float
    first: int            # first record touched by the reboot
    last: int             # last record touched by the reboot
    before_mib: float     # the level just before the reboot
    evidence: str
    known_at_s: float | None = None  # a boot line's time inside the span


@dataclass
class Fit:
    reboot_s: float | None
    level_mib: float
    rise_mib: float
    ramp_s: float
    ramp_start_s: float
    residual_mib: float


@dataclass
class Analysis:
    """One GPU's history analysed (readings in observe/detect.py, averages here)."""

    samples: int
    start: datetime
    end: datetime
    gaps: int
    steps: list[Step] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    history: list[str] = field(default_factory=list)


def when_utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(float(seconds), tz=UTC)


def find_reboots(records: Records, *, min_step_mib: float, boot_times_s: Sequence[float] = (),
                 boots_here_s: Sequence[float] = ()) -> list[Reboot]:
    """Reboot spans: falls, dips and near-zero records (see the module docstring); neighbouring hits are one reboot.

    ``boot_times_s`` pin a found reboot's time; ``boots_here_s`` (boots of seats known to run on this GPU) are
    reboots by themselves where the averages show none (a restart to a higher level hides its dip in a long window).
    """
    used, count = records.used_mib, len(records.used_mib)
    hits: list[tuple[int, str]] = []
    for j in range(1, count):
        if used[j] < NEAR_ZERO_MIB and used[j - 1] >= NEAR_ZERO_MIB:
            hits.append((j, "fall to near zero"))
        elif used[j] < used[j - 1] - min_step_mib:
            hits.append((j, f"averaged fall of {used[j - 1] - used[j]:,.0f} MiB"))
        elif j + 1 < count and used[j] < min(used[j - 1], used[j + 1]) - min_step_mib / 2:
            hits.append((j, f"averaged dip of {min(used[j - 1], used[j + 1]) - used[j]:,.0f} MiB"))
    reboots: list[Reboot] = []
    for j, evidence in hits:
        if reboots and j - reboots[-1].last <= 2:
            reboots[-1].last = j
            reboots[-1].span_end_s = float(records.end_s[j])
            continue
        # The record before the fall holds the reboot too, unless it still reads the old level (the reboot came after it).
        untouched = j >= 2 and abs(used[j - 1] - used[j - 2]) < min_step_mib * UNTOUCHED_SHARE
        first = j if untouched else max(j - 1, 0)
        before = float(used[j - 1]) if untouched else float(used[j - 2]) if j >= 2 else float(used[first])
        reboots.append(Reboot(span_start_s=float(records.start_s[first]), span_end_s=float(records.end_s[j]), first=first,
                              last=j, before_mib=before,
                              evidence=f"{evidence} in the {records.record_types[j]} record ending {when_utc(records.end_s[j]):%m-%d %H:%M}"))
    for reboot in reboots:
        # Records near zero after the fall are the engine being down: the new life starts after them.
        while reboot.last + 1 < count and used[reboot.last] < NEAR_ZERO_MIB:
            reboot.last += 1
            reboot.span_end_s = float(records.end_s[reboot.last])
        inside = [t for t in [*boot_times_s, *boots_here_s] if reboot.span_start_s <= t <= reboot.span_end_s]
        if inside:
            reboot.known_at_s = inside[-1]
            reboot.evidence += f"; boot line at {when_utc(inside[-1]):%m-%d %H:%M:%S}"
    for at in boots_here_s:
        holding = np.flatnonzero((records.start_s <= at) & (at < records.end_s))
        if len(holding) == 0 or int(holding[0]) == 0 or any(r.span_start_s <= at <= r.span_end_s for r in reboots):
            continue
        j = int(holding[0])
        reboots.append(Reboot(span_start_s=float(records.start_s[j]), span_end_s=float(records.end_s[j]), first=j, last=j,
                              before_mib=float(used[j - 1]), known_at_s=at,
                              evidence=f"boot line at {when_utc(at):%m-%d %H:%M:%S} (the averages show no fall or dip)"))
    return sorted(reboots, key=lambda reboot: reboot.first)


def _ramp_integral(t: np.ndarray, start: np.ndarray, ramp: np.ndarray) -> np.ndarray:
    """∫ clip((u − start) / ramp, 0, 1) du from −∞ to t (broadcasting)."""
    x = np.clip(t - start, 0.0, None)
    inside = np.minimum(x, ramp)
    return inside * inside / (2 * ramp) + np.maximum(x - ramp, 0.0)


def _overlap(a: np.ndarray, b: np.ndarray, lo: np.ndarray | float, hi: np.ndarray | float) -> np.ndarray:
    return np.clip(np.minimum(b, hi) - np.maximum(a, lo), 0.0, None)


def _nonnegative_tail(normal: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Least squares per grid point with every coefficient but the first ≥ 0 (memory grows while an engine
    lives; a restart only loses memory): a negative one is dropped and the rest solved again."""
    count = right.shape[1]
    keep = np.ones(right.shape, dtype=bool)
    coef = np.zeros(right.shape)
    for _ in range(count):
        for pattern in np.unique(keep, axis=0):
            rows = np.all(keep == pattern, axis=1)
            sub = normal[rows][:, pattern][:, :, pattern] + np.eye(int(pattern.sum())) * 1e-9
            solved = np.zeros((int(rows.sum()), count))
            solved[:, pattern] = np.linalg.solve(sub, right[rows][:, pattern][..., None])[..., 0]
            coef[rows] = solved
        negative = coef < 0
        negative[:, 0] = False
        if not negative.any():
            break
        keep &= ~negative
    return coef


def fit_life(records: Records, *, before_mib: float | None, reboot_lo_s: float, reboot_hi_s: float,
             known_reboot_s: float | None = None) -> Fit:
    """Fit one boot's life (see the module docstring) to records that start at or after ``reboot_lo_s``.

    ``before_mib`` is None for the first life in the history (no reboot seen: the ramp may start anywhere
    up to the records' start, and nothing before it is modelled).
    """
    a, b = records.start_s[None, :].astype(float), records.end_s[None, :].astype(float)
    width = b - a
    weights = records.window_s.astype(float)
    if known_reboot_s is not None:
        reboots = np.array([known_reboot_s])
    else:
        reboots = np.linspace(reboot_lo_s, reboot_hi_s, REBOOT_GRID) if reboot_hi_s > reboot_lo_s else np.array([reboot_lo_s])
    ramps = RAMP_HOURS * 3600.0
    grid_reboot, grid_ramp = (g.ravel()[:, None] for g in np.meshgrid(reboots, ramps, indexing="ij"))
    start = grid_reboot
    pre = _overlap(a, b, -np.inf, grid_reboot) / width
    post = np.ones_like(pre) if before_mib is None else _overlap(a, b, start, np.inf) / width
    ramp_mean = (_ramp_integral(b, start, grid_ramp) - _ramp_integral(a, start, grid_ramp)) / width
    target = records.used_mib[None, :] - (before_mib or 0.0) * pre
    # The minutes the engine was down and loading: a loss of memory-seconds in the record holding the restart
    # and, when the loading runs past its end, in the next one (their lengths are unknown, and 1-minute polls
    # see them only as whole polls): one unknown ≥ 0 per record, so those records say nothing about L, R, T.
    if before_mib is not None:
        first = (a <= grid_reboot) & (grid_reboot < b)
        second = (a > grid_reboot) & (a < grid_reboot + LOSS_SPREAD_S)
        losses = [np.where(first, -1.0 / width, 0.0), np.where(second, -1.0 / width, 0.0)]
    else:
        losses = [np.zeros_like(pre), np.zeros_like(pre)]
    w = np.broadcast_to(weights[None, :], pre.shape)
    columns = np.stack([post, ramp_mean, *losses], axis=1)  # (grid, 4, records)
    normal = np.einsum("gir,gjr,gr->gij", columns, columns, w)
    right = np.einsum("gir,gr,gr->gi", columns, target, w)
    coef = _nonnegative_tail(normal, right)
    level, rise = coef[:, 0], coef[:, 1]
    model = np.einsum("gir,gi->gr", columns, coef)
    residual = (w * (target - model) ** 2).sum(1) / weights.sum()
    # Where the records cannot tell fits apart (a rise hidden inside the window that holds the restart), the
    # smallest rise is the one they show: no creep is claimed that no record sees.
    near_best = residual <= residual.min() * (1 + TIE_SHARE) + TIE_MIB ** 2
    best = int(np.flatnonzero(near_best)[np.argmin(rise[near_best])])
    return Fit(reboot_s=float(grid_reboot[best, 0]) if before_mib is not None else None, level_mib=float(level[best]),
               rise_mib=float(rise[best]), ramp_s=float(grid_ramp[best, 0]), ramp_start_s=float(start[best, 0]),
               residual_mib=float(np.sqrt(residual[best])))


def analyse_records(records: Records, *, min_step_mib: float = 256.0, min_creep_mib: float = 256.0,
                    boot_times_s: Sequence[float] = (), boots_here_s: Sequence[float] = ()) -> Analysis:
    valid = ~np.isnan(records.used_mib)
    records = records.part(valid)
    order = np.argsort(records.end_s, kind="stable")
    records = records.part(order)
    if len(records.end_s) == 0:
        raise ValueError("no readings")
    gaps = int(np.count_nonzero(records.start_s[1:] - records.end_s[:-1] > np.maximum(records.window_s[1:], 120)))
    analysis = Analysis(samples=len(records.end_s), start=when_utc(records.start_s[0]), end=when_utc(records.end_s[-1]),
                                gaps=gaps)
    reboots = find_reboots(records, min_step_mib=min_step_mib, boot_times_s=list(boot_times_s), boots_here_s=list(boots_here_s))
    bounds = [0] + [reboot.first for reboot in reboots] + [len(records.end_s)]
    for number in range(len(bounds) - 1):
        reboot = reboots[number - 1] if number > 0 else None
        lo, hi = bounds[number], bounds[number + 1]
        life = records.part(np.arange(lo, hi))
        # Records entirely near zero are the engine down: nothing to fit there.
        life = life.part(life.used_mib >= NEAR_ZERO_MIB) if np.any(life.used_mib >= NEAR_ZERO_MIB) else life
        if len(life.end_s) == 0:
            continue
        if reboot is None:
            fit = fit_life(life, before_mib=None, reboot_lo_s=float(life.start_s[0]) - 2 * 86400.0,
                           reboot_hi_s=float(life.end_s[-1]))
        else:
            fit = fit_life(life, before_mib=reboot.before_mib, reboot_lo_s=reboot.span_start_s, reboot_hi_s=reboot.span_end_s,
                           known_reboot_s=reboot.known_at_s)
            step_at = fit.reboot_s if fit.reboot_s is not None else reboot.span_start_s
            analysis.steps.append(Step(
                at=when_utc(step_at), delta_mib=round(fit.level_mib - reboot.before_mib, 1), before_mib=round(reboot.before_mib, 1),
                after_mib=round(fit.level_mib, 1), window_start=when_utc(reboot.span_start_s), window_end=when_utc(reboot.span_end_s),
                inferred=reboot.known_at_s is None, evidence=reboot.evidence))
        analysis.segments.append(_segment(life, fit, reboot, min_creep_mib))
    return analysis


def _segment(life: Records, fit: Fit, reboot: Reboot | None, min_creep_mib: float) -> Segment:
    history_end = float(life.end_s[-1])
    ramp_end = fit.ramp_start_s + fit.ramp_s
    # Levelled off when the history stays flat after the rise long enough to tell a plateau from a rise that
    # is still going on: a quarter of the rise's duration, at least an hour and two of the last records.
    levelled_off = history_end - ramp_end >= max(FLAT_SHARE * fit.ramp_s, 3600.0, 2 * float(life.window_s[-1]))
    # Still rising: the latest level as the last hour of records shows it (the model's end is an extrapolation).
    latest = float(np.median(life.used_mib[life.end_s >= history_end - max(3600.0, float(life.window_s[-1]))]))
    plateau = fit.level_mib + fit.rise_mib if levelled_off else latest
    start_s = fit.reboot_s if fit.reboot_s is not None else float(life.start_s[0])
    creep = None
    if plateau - fit.level_mib >= min_creep_mib:
        reached = min(ramp_end, history_end)
        # Resolved: at least three records see the rise, and the restart is known to better than the rise lasted.
        seen_by = np.count_nonzero((life.end_s > fit.ramp_start_s) & (life.start_s < ramp_end))
        span_s = 0.0 if reboot is None or reboot.known_at_s is not None else reboot.span_end_s - reboot.span_start_s
        resolved = seen_by >= 3 and span_s <= fit.ramp_s
        creep = Creep(
            start=when_utc(start_s), plateau_at=when_utc(reached), rise_mib=round(plateau - fit.level_mib, 1),
            hours_to_plateau=round((reached - start_s) / 3600, 2),
            hours_to_90pct=round((fit.ramp_start_s + 0.9 * fit.ramp_s - start_s) / 3600, 2) if levelled_off else None,
            levelled_off=levelled_off, resolved=resolved,
            basis=("" if resolved else "NOT RESOLVED: the rise is shorter than the averaging windows around it (pass the "
                   "engine log for the boot time, or keep finer history); ") + f"fitted to {len(life.end_s)} averaged records ({', '.join(_types(life))}); "
                  + ("reboot time from the boot line" if reboot is not None and reboot.known_at_s is not None
                     else "reboot time inferred inside its window" if reboot is not None else "no reboot in the history"),
        )
    return Segment(start=when_utc(start_s), end=when_utc(history_end), level_after_boot_mib=round(fit.level_mib, 1),
                   plateau_used_mib=round(plateau, 1), creep=creep)


def _types(records: Records) -> list[str]:
    kinds, counts = np.unique(records.record_types, return_counts=True)
    return [f"{count} × {kind}" for kind, count in zip(kinds, counts)]
