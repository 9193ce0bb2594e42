"""Reboots, creep and plateaus in *averaged* history (Beszel's 1m/10m/20m/120m/480m records; pure, numpy).

Each record is the mean of the used memory over its own window ``(end − window, end]``; records of
different windows are never read as one series of points. Every figure comes from one model fitted to
the records as interval means, so a 2-hour and a 10-minute record each count for what they average:

* **Reboot** (where the history shows one): a record falls below the one before it by at least
  ``min_step_mib`` (a record of two hours or more shows only part of the step: a quarter of it will do), out of
  the jitter (memory only grows while an engine lives, so a fall is a restart), a record dips
  below both neighbours (a restart back to the same level: the minutes at zero pull the mean down),
  a record is near zero (the engine was down for most of the window), or a record after a stretch without its
  type's records (longer than its window and HOLE_S: polls missing) reads lower than the one before it by more
  than its type's jitter and a quarter of ``min_step_mib``. The reboot lies somewhere in
  the windows of the falling record and the one before it (unless that one still reads the old level); a boot time from the engines' logs inside
  that span fixes it exactly, else it is fitted (and labelled inferred, with the span).
* **Model of one boot's life**: the level ``P`` before the reboot ``s``, nothing while the engine is down (until
  ``c = s + delay``, the delay 0–15 min), then ``L + R · shape(t − c)``, less the memory-seconds ``D`` lost loading in
  the record holding the restart and in the next one (one unknown ≥ 0 each, whatever ``s``: a loss only for some
  ``s`` would make the fit prefer those for the freedom alone). ``L`` is the level when the engine is back
  (extrapolated: the first post-boot record already holds part of the creep), ``R`` the creep. Shapes: saturating
  exponential ``1 − exp(−x / τ)`` (with a second, faster stage of time constant τ / r, r from FAST_RATIOS refined, and its
  own rise ≥ 0: two-stage) and linear-then-flat ``min(x / T, 1)``. Each record is the mean of the curve over its
  window (closed-form integrals). For a given ``s``, delay and τ (or ``T``) the model is linear in ``L``, the rises
  and ``D`` (all ≥ 0 but ``L``), so those come from non-negative least squares (each record weighted by its window
  length: inverse variance for a mean of independent polls); ``s``, τ/``T`` and the shape from a coarse grid (each
  reboot time's scales and fast ratio then refined: the profile over ``s``), then finer grids around the best point
  and a compass search from it and the next-best reboot times (``_pattern_search``); without a boot line the
  profile over ``s`` across the whole span (``_profile_reboots``). A boot line fixes ``s``; the delay is fitted on a
  30-second grid. A life before that was still creeping may have risen past its last record by the reboot: one more
  unknown ≥ 0 in the record holding it (``Before.rising``).
* **Hidden reboot**: a first life whose creep starts at a stretch without records rebooted there (creep starts at a
  boot); that stretch becomes the reboot's span (``_hidden_reboot``).
* **Bounds**: every grid point evaluated is kept; the fits whose χ² is within ALIKE_CHI2 of the best one's (the
  jitter estimated from the best fit's residual) are those the records cannot tell apart. Their range of ``L``
  bounds the creep (``rise_low_mib`` … ``rise_high_mib``), their 95 % times the plateau time; the reboot times at
  the edges of theirs, and the latest creep start, are refined on fine grids. ``rise_determined`` is false when
  those rises spread beyond ±DETERMINED_SHARE of the reported one, ``plateau_at_determined`` when the times spread
  beyond one record of the finest type there. Among them the point estimate is the middle reboot time, then the
  smallest rise they see.
* **Plateau**: the level at the history's end from the latest levelled records (those after the fit reached
  95 % of its rise) at the finest resolution among them, i.e. the fit's end level corrected by their mean
  residual; ± twice that mean's standard error plus the fit's own movement across them. Still rising: the
  last hour's finest records.
* **Levelled off**: the history stays flat after the fitted rise for a quarter of the rise's duration (at
  least an hour); else the creep is reported as still rising.
* **Resolved**: at least three records see the rise and the restart's span is shorter than the rise.
  A 12-hour creep seen only through 8-hour (480m) records is not: its plateau is still exact, its size is
  reported but labelled unresolved.

Error measured (tests/observe/test_averaged_random.py, 200 random histories the fit does not assume, made as
the hub's cron makes them, and 20 more on a fresh seed each run; the figures in docs/diagnose.md): in every
draw the plateau within 40 MiB, the creep within 10 % or flagged not determinable with the truth inside its
bounds, and the plateau time within one record or so flagged. Without a boot line, moving the reboot by Δ
inside its window scales an exponential creep's rise by exp(Δ / τ), which no record can tell apart: that is
what the bounds say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from seatplan.documents.observed import Creep, Segment, Step

# Near zero: the GPU held (almost) nothing for most of the window.
NEAR_ZERO_MIB = 1024.0
# A stretch this long (and longer than the next record's window) without records: a fall across it needs only to
# stand out of the jitter to be a reboot.
HOLE_S = 600.0
# The plateau is read from a type with at least this many levelled records (see _plateau).
PLATEAU_RECORDS = 3
# Records this long show a restart only in part (see find_reboots).
LONG_WINDOW_S = 7200
# A fall or dip stands out of the jitter of the difference of two of a type's records by this many σ (two records'
# jitter: √2 × one's; at 3.5 σ of the difference, one in 4,000 steps, the last hour's 60 1-minute polls of a GPU
# jittering 50 MiB would show a fall of a quarter GiB in one history in seventy).
NOISE_FACTOR = 5.0
# A record type's own jitter is read from at least this many consecutive differences.
NOISE_RECORDS = 12
# Rises faster than this are the engine loading (the loss D covers them), not creep.
RAMP_HOURS = np.geomspace(2.0, 24 * 14, 32)
# Time constants of the saturating exponential (the same floor: faster is loading).
TAU_HOURS = np.geomspace(0.7, 24 * 5, 32)
# A two-stage creep: a fast exponential of the time constant / one of FAST_RATIOS beside the slow one.
FAST_RATIOS = (1.3, 1.8, 2.6, 4.0)
# A fast stage holding more than this share of the rise makes the creep two-stage (in its basis).
TWO_STAGE_SHARE = 0.05
# The plateau is reached when the creep holds this share of its rise (within 5 %).
PLATEAU_SHARE = 0.95
REBOOT_GRID = 24
# The fine grid around the coarse grid's best point: this many reboot times × scales.
FINE_GRID = 9
FINE_PASSES = 2
# The edges of the reboot times the records cannot tell apart: this many times across one coarse step.
EDGE_GRID = 5
# The profile over the scale around the best fit's: this many scales (and fast ratios) up to × PROFILE_SPAN each way.
PROFILE_GRID, PROFILE_SPAN = 17, 1.6
# The compass search after the grids: at most this many moves or halvings.
SEARCH_STEPS = 40
# ... from this many reboot times besides the best one's; its first steps in scale and fast ratio (× this).
SEARCH_STARTS, SEARCH_SCALE_STEP = 3, 1.15
# The profile over a blind reboot time: this many delays over LOSS_SPREAD_S at each reboot time.
PROFILE_DELAYS = 16
# Where the creep starts after the reboot (the engine back): this many delays over LOSS_SPREAD_S (30 s apart).
DELAY_GRID = 31
FLAT_SHARE = 0.25
# A record within this share of --min-step-mib of the one before it still reads the old level.
UNTOUCHED_SHARE = 0.25
# Fits whose squared residuals are this close to the best one are told apart by the smallest rise.
TIE_SHARE, TIE_MIB = 0.005, 0.1
# The engine may be down and loading this long after the restart (so the next record may hold part of it).
LOSS_SPREAD_S = 900.0
# Fits whose χ² (weighted by window, the jitter estimated from the best fit) is within this of the best one's
# are ones the records cannot tell apart: they bound the creep's size and plateau time.
ALIKE_CHI2 = 9.0
# The creep's size is determined when every fit the records cannot tell apart sizes it within this share.
DETERMINED_SHARE = 0.10
# Unknowns of one life's fit: level, two rises, two losses, reboot time and scale.
FREE_PARAMETERS = 7


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


@dataclass
class Reboot:
    span_start_s: float
    span_end_s: float
    first: int            # first record touched by the reboot
    last: int             # last record touched by the reboot
    before_mib: float     # the level just before the reboot
    evidence: str
    known_at_s: float | None = None  # a boot line's time inside the span


@dataclass(frozen=True)
class Before:
    """The life before a reboot, as the next life's fit sees it: its level, and whether it may have risen past it by
    the reboot (it was still creeping: its records end before its plateau)."""

    level_mib: float
    rising: bool = False


@dataclass
class Fit:
    """One boot's life as fitted: ``level + rise · shape((t − start) / scale)`` after the reboot."""

    reboot_s: float | None
    level_mib: float
    rise_mib: float          # the whole rise the shape tends to (the asymptote's, for the exponential)
    scale_s: float           # linear-then-flat: the ramp's length; saturating exponential: the time constant
    exponential: bool
    start_s: float           # where the creep starts: the reboot (or, for a first life, where it began)
    residual_mib: float
    model_mib: np.ndarray    # each record's fitted mean
    fast_rise_mib: float = 0.0  # a two-stage creep's fast exponential (time constant scale_s / fast_ratio)
    fast_ratio: float = FAST_RATIOS[1]
    seen_mib: float = 0.0       # the rise the records see by the history's end
    alike: FitGrid | None = None  # the fits the records cannot tell from this one

    @property
    def anchor_s(self) -> float:
        """Where the fit's grid is laid: the reboot time, or for a first life (none) where its creep starts."""
        return self.reboot_s if self.reboot_s is not None else self.start_s

    def value_at(self, t_s: float) -> float:
        x = t_s - self.start_s
        return self.level_mib + self.rise_mib * _shape(x, self.scale_s, self.exponential) \
            + self.fast_rise_mib * _shape(x, self.scale_s / self.fast_ratio, True)

    def reach_s(self, share: float) -> float:
        """When the creep holds ``share`` of its whole rise."""
        whole = self.rise_mib + self.fast_rise_mib
        if self.fast_rise_mib <= 0 or whole <= 0:
            return self.start_s + _reach_s(self.scale_s, self.exponential, share)
        # Two stages: the share is reached between the fast and the slow stage's own times (bisection).
        lo, hi = self.start_s, self.start_s + _reach_s(self.scale_s, True, share)
        for _ in range(50):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.value_at(mid) - self.level_mib < share * whole else (lo, mid)
        return hi


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
    # A fall or dip must also stand out of the jitter of its own record type (a 1-minute record is one poll).
    noise_mib = NOISE_FACTOR * np.sqrt(2.0) * record_noise_mib(records)
    # A record of two hours or more shows only the part of a step after it inside its window (a restart near its end,
    # little), and its minutes down are a small share of it: its fall need only be a quarter of --min-step-mib. A
    # shorter record holding a restart is pulled far down by those minutes; a fall of less is jitter.
    step_mib = np.maximum(np.where(records.window_s >= LONG_WINDOW_S, min_step_mib * UNTOUCHED_SHARE, min_step_mib), noise_mib)
    hole_s = records.hole_s
    hits: list[tuple[int, str]] = []
    for j in range(1, count):
        if used[j] < NEAR_ZERO_MIB and used[j - 1] >= NEAR_ZERO_MIB:
            hits.append((j, "fall to near zero"))
        elif hole_s[j] > max(float(records.window_s[j]), HOLE_S) and records.record_types[j] == records.record_types[j - 1] \
                and used[j] < used[j - 1] - max(noise_mib[j], min_step_mib * UNTOUCHED_SHARE):
            # Memory only grows while an engine lives: a fall out of the jitter across a hole in one record type's
            # history (polls missing, not where a coarser type hands over to a finer one) is a restart it hid.
            hits.append((j, f"fall of {used[j - 1] - used[j]:,.0f} MiB across {hole_s[j] / 3600:.1f} h without records"))
        elif used[j] < used[j - 1] - step_mib[j]:
            hits.append((j, f"averaged fall of {used[j - 1] - used[j]:,.0f} MiB"))
        elif j + 1 < count and used[j] < min(used[j - 1], used[j + 1]) - max(min_step_mib / 2, noise_mib[j]):
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
        # The old level: a still creeping life that rose into the record before the fall held at least that much until
        # the reboot, wherever in that record it came (its minutes down and a lower level after it only pull it down).
        before = float(used[j - 1]) if untouched else float(max(used[j - 2], used[j - 1])) if j >= 2 else float(used[first])
        # After a gap in the records the reboot may lie anywhere since the last record before it ended.
        span_start_s = min(float(records.start_s[first]), float(records.end_s[first - 1])) if first >= 1 else float(records.start_s[first])
        reboots.append(Reboot(span_start_s=span_start_s, span_end_s=float(records.end_s[j]), first=first,
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
        # The record holding the boot, or where it falls between two records (a retention or polling gap), the next one.
        holding = np.flatnonzero(at < records.end_s)
        if len(holding) == 0 or int(holding[0]) == 0 or any(r.span_start_s <= at <= r.span_end_s for r in reboots):
            continue
        j = int(holding[0])
        reboots.append(Reboot(span_start_s=min(float(records.start_s[j]), at), span_end_s=float(records.end_s[j]), first=j, last=j,
                              before_mib=float(used[j - 1]), known_at_s=at,
                              evidence=f"boot line at {when_utc(at):%m-%d %H:%M:%S} (the averages show no fall or dip)"))
    return sorted(reboots, key=lambda reboot: reboot.first)


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


def _window_means(records: Records, start: np.ndarray, scale: np.ndarray, exponential: np.ndarray,
                  rows: np.ndarray | None = None) -> np.ndarray:
    """Each record's mean of the shape (grid, records), for the grid rows ``rows`` only (the others zero).

    The integral is taken once per record boundary (a record mostly starts where the one before it ended) and
    per row only in its own shape's closed form: this is where the fit spends its time.
    """
    out = np.zeros((len(start), len(records.end_s)))
    bounds, inverse = np.unique(np.r_[records.start_s, records.end_s].astype(float), return_inverse=True)
    lo, hi = inverse[:len(records.end_s)], inverse[len(records.end_s):]
    width = (records.end_s - records.start_s).astype(float)
    for kind in (False, True):
        mine = np.flatnonzero((exponential == kind) & (np.ones(len(start), dtype=bool) if rows is None else rows))
        if len(mine) == 0:
            continue
        x = np.clip(bounds[None, :] - start[mine, None], 0.0, None)
        step = scale[mine, None]
        if kind:
            integral = x + step * np.expm1(-x / step)
        else:
            inside = np.minimum(x, step)
            integral = inside * inside / (2 * step) + np.maximum(x - step, 0.0)
        out[mine] = (integral[:, hi] - integral[:, lo]) / width[None, :]
    return out


def _shape(x: float, scale: float, exponential: bool) -> float:
    """The creep's share of its rise ``x`` seconds after the reboot."""
    if x <= 0:
        return 0.0
    return float(-np.expm1(-x / scale)) if exponential else min(x / scale, 1.0)


def _reach_s(scale: float, exponential: bool, share: float) -> float:
    """Seconds from the reboot until the creep holds ``share`` of its rise."""
    return float(-scale * np.log1p(-share)) if exponential else share * scale


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
             known_reboot_s: float | None = None, before_rising: bool = False) -> Fit:
    """Fit one boot's life (see the module docstring) to records that start at or after ``reboot_lo_s``.

    ``before_mib`` is None for the first life in the history (no reboot seen: the creep may start anywhere
    up to the records' start, and nothing before it is modelled). Every shape is fitted over a coarse grid
    of reboot times and scales, each reboot time's scales refined, then a fine grid around the best point;
    the best fit wins. Every grid point evaluated is kept: those the records cannot tell from the best
    (``alike``) bound the creep, and the reboot times at the edges of theirs are refined too.
    """
    shapes = _shapes()
    before = Before(before_mib, before_rising) if before_mib is not None else None
    known = known_reboot_s is not None
    if known:
        # A boot line is the engine starting: the creep starts when it is back, up to LOSS_SPREAD_S later.
        reboots, delays = np.array([known_reboot_s]), np.linspace(0.0, LOSS_SPREAD_S, DELAY_GRID)
    else:
        reboots, delays = _reboot_grid(records, reboot_lo_s, reboot_hi_s, known=before is not None), np.zeros(1)
    grid = _refine_scales(records, before, _fit_grid(records, before, GridPoints.every(reboots, delays, shapes), known=known), known=known)
    best = grid.best()
    blind = not known and before is not None and reboot_hi_s > reboot_lo_s
    reboot_step = (reboot_hi_s - reboot_lo_s) / (REBOOT_GRID - 1) if blind else 0.0
    ratio = float(TAU_HOURS[1] / TAU_HOURS[0]) ** (2 / (FINE_GRID - 1))
    # The fast stage's ratio between FAST_RATIOS' points too (a slow stage's time constant is no multiple of the fast one's).
    fast_step = float(FAST_RATIOS[1] / FAST_RATIOS[0])
    # Finer grids around the best point, each narrowing the steps (reboot time and scale) to a grid point's span.
    for _ in range(FINE_PASSES):
        centre = grid.at(best)
        at_s = centre.anchor_s
        near_reboots = np.unique(np.clip(at_s + np.linspace(-reboot_step, reboot_step, FINE_GRID), reboot_lo_s, reboot_hi_s))
        near = _near_shapes(centre, ratio, fast_step)
        grid = grid.join(_fit_grid(records, before, GridPoints.every(near_reboots, np.array([centre.start_s - at_s]), near), known=known))
        candidate = grid.best()
        best = candidate if _better(grid.at(candidate), grid.at(best)) else best
        reboot_step, ratio = 2 * reboot_step / (FINE_GRID - 1), ratio ** (2 / (FINE_GRID - 1))
        fast_step = fast_step ** (2 / (FINE_GRID - 1))
    # The compass search from the best point and, where the fit chooses the reboot time, from the best point at each of
    # the SEARCH_STARTS best other reboot times of the grids (the profile over the reboot time has local minima where
    # a record's boundary passes: a search from one point stays in its own).
    starts = [best, *(_best_per_reboot(grid, SEARCH_STARTS + 1) if blind else [])]
    found = best
    for start in dict.fromkeys(starts):
        grid, end = _pattern_search(records, before, grid, start, (reboot_lo_s, reboot_hi_s) if blind else None, known=known)
        found = end if _better(grid.at(end), grid.at(found)) else found
    best = found
    if blind:
        grid = _profile_reboots(records, before, grid, grid.at(best), reboot_lo_s, reboot_hi_s)
        candidate = grid.best()
        best = candidate if _better(grid.at(candidate), grid.at(best)) else best
    alike = grid.alike(best, len(records.end_s))
    if blind and len(alike.reboot_s):
        # The edges of the reboot times the records cannot tell apart, to a fine step: they bound the creep's size;
        # at the latest, the creep may start up to LOSS_SPREAD_S after the reboot.
        step = (reboot_hi_s - reboot_lo_s) / (REBOOT_GRID - 1)
        earliest = np.clip(np.linspace(alike.reboot_s.min() - step, alike.reboot_s.min(), EDGE_GRID), reboot_lo_s, reboot_hi_s)
        latest = np.clip(np.linspace(alike.reboot_s.max(), alike.reboot_s.max() + step, EDGE_GRID), reboot_lo_s, reboot_hi_s)
        grid = grid.join(_refine_scales(records, before, _fit_grid(records, before, GridPoints.every(np.unique(earliest), np.zeros(1), shapes))))
        # The latest creep start is bounded sharply (a longer delay than the engine was down leaves a record holding more
        # than the model can): a fine grid of delays, with the best fit's shape and scales around its own.
        centre = grid.at(grid.best())
        near = GridPoints(np.zeros(FINE_GRID), np.zeros(FINE_GRID), centre.scale_s * np.geomspace(1 / ratio, ratio, FINE_GRID) ** 4,
                          np.full(FINE_GRID, centre.exponential), np.full(FINE_GRID, centre.fast_ratio))
        grid = grid.join(_fit_grid(records, before, GridPoints.every(np.unique(latest), np.linspace(0.0, LOSS_SPREAD_S, DELAY_GRID), near)))
        candidate = grid.best()
        best = candidate if _better(grid.at(candidate), grid.at(best)) else best
    # The profile over the scale (and a two-stage creep's ratio) at the best fit's reboot: the fine passes sample only
    # near the best point, and the plateau time's bounds are where the records stop telling those scales apart.
    centre = grid.at(best)
    at_s = centre.anchor_s
    profile = _near_shapes(centre, PROFILE_SPAN, PROFILE_SPAN, count=PROFILE_GRID)
    grid = grid.join(_fit_grid(records, before, GridPoints.every(np.array([at_s]), np.array([centre.start_s - at_s]), profile), known=known))
    fit = grid.at(best)
    fit.model_mib = _model(records, before, fit, known=known)
    fit.alike = grid.alike(best, len(records.end_s))
    return fit


def _profile_reboots(records: Records, before: Before | None, grid: FitGrid, centre: Fit, lo_s: float, hi_s: float) -> FitGrid:
    """The profile over the reboot time across its span, each reboot time with its own delay, scale and fast ratio
    (from ``centre``'s shape): where the records cannot tell reboot times apart (a restart somewhere in an 8-hour record
    whose next record is freed for the loading too) the whole stretch fits alike, and the creep's bounds are its ends."""
    reboots = np.linspace(lo_s, hi_s, REBOOT_GRID)
    shape = GridPoints(np.zeros(1), np.zeros(1), np.array([centre.scale_s]), np.array([centre.exponential]), np.array([centre.fast_ratio]))
    delays = GridPoints.every(reboots, np.linspace(0.0, LOSS_SPREAD_S, PROFILE_DELAYS), shape)
    grid = grid.join(_fit_grid(records, before, delays))
    parts = []
    for at_s in reboots:
        mine = np.flatnonzero(grid.reboot_s == at_s)
        index = int(mine[np.argmin(grid.residual[mine])])
        parts.append(GridPoints.every(np.array([at_s]), np.array([float(grid.delay_s[index])]),
                                      _near_shapes(grid.at(index), SEARCH_SCALE_STEP, SEARCH_SCALE_STEP if centre.fast_rise_mib > 0 else 1.0)))
    return grid.join(_fit_grid(records, before, GridPoints.concat(parts)))


def _best_per_reboot(grid: FitGrid, count: int) -> list[int]:
    """The best point at each of the ``count`` reboot times whose best points fit best."""
    order = np.lexsort((grid.residual, grid.reboot_s))
    first = order[np.r_[True, grid.reboot_s[order][1:] != grid.reboot_s[order][:-1]]]
    return [int(index) for index in first[np.argsort(grid.residual[first])][:count]]


def _pattern_search(records: Records, before: Before | None, grid: FitGrid, best: int, reboot_span_s: tuple[float, float] | None,
                    *, known: bool) -> tuple[FitGrid, int]:
    """From the grids' best point, a compass search over the reboot time (when the fit chooses it), the delay, the
    scale and a two-stage creep's fast ratio: every point one step away in each of them at once is tried, the best
    one taken while it fits better, and the steps halved when none does. The grids' points are too far apart for a
    two-stage creep whose four of them move together (a later reboot, a slower stage and a faster one fit alike)."""
    centre = grid.at(best)
    reboot_step = (reboot_span_s[1] - reboot_span_s[0]) / (REBOOT_GRID - 1) / 2 if reboot_span_s is not None else 0.0
    delay_step, scale_step = 60.0 if before is not None else 0.0, SEARCH_SCALE_STEP
    fast_step = SEARCH_SCALE_STEP if centre.exponential and centre.fast_rise_mib > 0 else 1.0
    offsets = np.array(np.meshgrid(*[[-1, 0, 1]] * 4, indexing="ij")).reshape(4, -1)
    for _ in range(SEARCH_STEPS):
        if reboot_step < 15.0 and scale_step < 1.004:
            break
        at_s = centre.anchor_s
        reboots = at_s + offsets[0] * reboot_step
        delays = np.clip(centre.start_s - at_s + offsets[1] * delay_step, 0.0, LOSS_SPREAD_S if before is not None else 0.0)
        if reboot_span_s is not None:
            reboots = np.clip(reboots, *reboot_span_s)
        points = GridPoints(reboots, delays, centre.scale_s * scale_step ** offsets[2], np.full(offsets.shape[1], centre.exponential),
                            np.maximum(centre.fast_ratio * fast_step ** offsets[3], 1.05))
        grid = grid.join(_fit_grid(records, before, points, known=known))
        candidate = grid.best()
        if _better(grid.at(candidate), centre) and candidate != best:
            best, centre = candidate, grid.at(candidate)
            continue
        reboot_step, delay_step = reboot_step / 2, delay_step / 2
        scale_step, fast_step = np.sqrt(scale_step), np.sqrt(fast_step)
    return grid, best


def _near_shapes(centre: Fit, scale_step: float, fast_step: float, count: int = FINE_GRID) -> GridPoints:
    """Scales around ``centre``'s (``count`` of them, × ``scale_step`` at the edges) and, for a two-stage creep, each
    with fast ratios around its own (``fast_step`` likewise; the fast stage never slower than the slow one)."""
    scales = centre.scale_s * np.geomspace(1 / scale_step, scale_step, count)
    two_stage = centre.exponential and centre.fast_rise_mib > 0
    ratios = np.maximum(centre.fast_ratio * np.geomspace(1 / fast_step, fast_step, count), 1.05) if two_stage else np.array([centre.fast_ratio])
    scale_s, fast_ratio = (grid.ravel() for grid in np.meshgrid(scales, ratios, indexing="ij"))
    return GridPoints(np.zeros(len(scale_s)), np.zeros(len(scale_s)), scale_s, np.full(len(scale_s), centre.exponential), fast_ratio)


def _reboot_grid(records: Records, lo_s: float, hi_s: float, *, known: bool) -> np.ndarray:
    """Reboot times to try: evenly over the span, and where the fit changes abruptly: just after each record's
    start and in the last LOSS_SPREAD_S before its end (the engine's loading then runs into the next record)."""
    even = np.linspace(lo_s, hi_s, REBOOT_GRID) if hi_s > lo_s else np.array([lo_s])
    if not known or hi_s <= lo_s:
        return even
    inside = (records.end_s > lo_s) & (records.start_s < hi_s)
    ends, starts = records.end_s[inside].astype(float), records.start_s[inside].astype(float)
    near = np.r_[(ends[:, None] - LOSS_SPREAD_S * np.array([0.9, 0.5, 0.1])[None, :]).ravel(), starts + 1.0, ends - 1.0]
    return np.unique(np.r_[even, near[(near >= lo_s) & (near <= hi_s)]])


def _refine_scales(records: Records, before: Before | None, grid: FitGrid, *, known: bool = False) -> FitGrid:
    """Each (reboot time, delay, shape) of ``grid`` with its scales (and a two-stage creep's fast ratio) refined around
    its best one (FINE_PASSES narrowing grids): the profile over the reboot time that bounds the creep."""
    ratio, fast_step = float(TAU_HOURS[1] / TAU_HOURS[0]), float(FAST_RATIOS[1] / FAST_RATIOS[0])
    for _ in range(FINE_PASSES):
        keys = np.stack([grid.reboot_s, grid.delay_s, grid.exponential.astype(float)], axis=1)
        _, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.ravel()
        # The best point of each key: sort by (key, residual) and take each key's first.
        order = np.lexsort((grid.residual, inverse))
        first = order[np.r_[True, inverse[order][1:] != inverse[order][:-1]]]
        points = []
        for index in first:
            centre = grid.at(int(index))
            at_s = float(grid.reboot_s[index])
            near = _near_shapes(centre, ratio, fast_step)
            points.append(GridPoints.every(np.array([at_s]), np.array([float(grid.delay_s[index])]), near))
        grid = grid.join(_fit_grid(records, before, GridPoints.concat(points), known=known))
        ratio, fast_step = ratio ** (2 / (FINE_GRID - 1)), fast_step ** (2 / (FINE_GRID - 1))
    return grid


def _near(a: float, b: float) -> bool:
    """Squared residuals this close cannot tell two fits apart (see TIE_SHARE)."""
    return a * a <= b * b * (1 + TIE_SHARE) + TIE_MIB ** 2


def _better(candidate: Fit, best: Fit) -> bool:
    """The better fit; between fits the records cannot tell apart, the one with the smaller rise they see."""
    if _near(candidate.residual_mib, best.residual_mib) and _near(best.residual_mib, candidate.residual_mib):
        return candidate.seen_mib < best.seen_mib
    return candidate.residual_mib < best.residual_mib


@dataclass
class GridPoints:
    """Where to fit: per point a reboot time, the creep's delay after it, a scale, the shape and the fast stage's ratio."""

    reboot_s: np.ndarray
    delay_s: np.ndarray
    scale_s: np.ndarray
    exponential: np.ndarray
    fast_ratio: np.ndarray

    @staticmethod
    def concat(parts: list[GridPoints]) -> GridPoints:
        return GridPoints(*(np.concatenate([getattr(part, name) for part in parts]) for name in ("reboot_s", "delay_s", "scale_s", "exponential", "fast_ratio")))

    @staticmethod
    def every(reboots_s: np.ndarray, delays_s: np.ndarray, shapes: GridPoints) -> GridPoints:
        """Every (reboot time, delay) with every (scale, shape, ratio) of ``shapes``."""
        pairs = len(reboots_s) * len(delays_s)
        count = len(shapes.scale_s)
        return GridPoints(np.repeat(np.repeat(reboots_s, len(delays_s)), count), np.repeat(np.tile(delays_s, len(reboots_s)), count),
                          np.tile(shapes.scale_s, pairs), np.tile(shapes.exponential, pairs), np.tile(shapes.fast_ratio, pairs))


def _shapes() -> GridPoints:
    """The coarse grid of shapes: every ramp length, and every time constant with every fast ratio."""
    scales = np.r_[RAMP_HOURS, np.tile(TAU_HOURS, len(FAST_RATIOS))] * 3600.0
    kinds = np.r_[np.zeros(len(RAMP_HOURS), dtype=bool), np.ones(len(TAU_HOURS) * len(FAST_RATIOS), dtype=bool)]
    ratios = np.r_[np.full(len(RAMP_HOURS), FAST_RATIOS[1]), np.repeat(FAST_RATIOS, len(TAU_HOURS))]
    return GridPoints(np.zeros(len(scales)), np.zeros(len(scales)), scales, kinds, ratios)


@dataclass
class FitGrid:
    """Fits at grid points (reboot time, scale, shape): the linear unknowns and the weighted mean squared residual."""

    reboot_s: np.ndarray
    delay_s: np.ndarray       # the creep starts this long after the reboot (the engine down and loading)
    scale_s: np.ndarray
    exponential: np.ndarray
    fast_ratio: np.ndarray
    level_mib: np.ndarray
    rise_mib: np.ndarray
    fast_mib: np.ndarray
    residual: np.ndarray      # weighted mean of squared residuals (MiB²)
    seen_mib: np.ndarray      # the rise seen by the history's end
    first_life: bool

    def join(self, other: FitGrid) -> FitGrid:
        return replace(self, **{name: np.r_[getattr(self, name), getattr(other, name)] for name in _GRID_ARRAYS})

    def part(self, keep: np.ndarray) -> FitGrid:
        return replace(self, **{name: getattr(self, name)[keep] for name in _GRID_ARRAYS})

    def best(self) -> int:
        near_best = self.residual <= self.residual.min() * (1 + TIE_SHARE) + TIE_MIB ** 2
        # The reboot times the records cannot tell apart: the middle one (an error of at most half their spread),
        # then, among the fits at that time, the smallest rise.
        times = self.reboot_s[near_best]
        middle = times[np.argmin(np.abs(times - np.median(times)))]
        near_best &= self.reboot_s == middle
        return int(np.flatnonzero(near_best)[np.argmin(self.seen_mib[near_best])])

    def at(self, index: int) -> Fit:
        return Fit(reboot_s=None if self.first_life else float(self.reboot_s[index]), level_mib=float(self.level_mib[index]),
                   rise_mib=float(self.rise_mib[index]), scale_s=float(self.scale_s[index]), exponential=bool(self.exponential[index]),
                   start_s=float(self.reboot_s[index] + self.delay_s[index]), residual_mib=float(np.sqrt(self.residual[index])),
                   model_mib=np.zeros(0), fast_rise_mib=float(self.fast_mib[index]), fast_ratio=float(self.fast_ratio[index]),
                   seen_mib=float(self.seen_mib[index]))

    def alike(self, best: int, count: int) -> FitGrid:
        """The fits the records cannot tell from the best: Δχ² ≤ ALIKE_CHI2, the jitter estimated from the best fit's residual."""
        dof = max(count - FREE_PARAMETERS, 1)
        floor = max(float(self.residual[best]), TIE_MIB ** 2)
        return self.part(self.residual <= floor * (1 + ALIKE_CHI2 / dof))

    def reach_s(self, share: float) -> np.ndarray:
        """When each fit's creep holds ``share`` of its whole rise (bisection for two stages)."""
        slow = np.where(self.exponential, -self.scale_s * np.log1p(-share), share * self.scale_s)
        two = (self.fast_mib > 0) & (self.rise_mib + self.fast_mib > 0)
        if not two.any():
            return self.reboot_s + self.delay_s + slow
        lo, hi = np.zeros(len(slow)), slow.copy()
        whole = self.rise_mib + self.fast_mib
        for _ in range(50):
            mid = (lo + hi) / 2
            value = self.rise_mib * np.where(self.exponential, -np.expm1(-mid / self.scale_s), np.minimum(mid / self.scale_s, 1.0)) \
                + self.fast_mib * -np.expm1(-mid / (self.scale_s / self.fast_ratio))
            below = value < share * whole
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        return self.reboot_s + self.delay_s + np.where(two, hi, slow)


_GRID_ARRAYS = ("reboot_s", "delay_s", "scale_s", "exponential", "fast_ratio", "level_mib", "rise_mib", "fast_mib", "residual", "seen_mib")


def _columns(records: Records, before: Before | None, points: GridPoints, *, known: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The model's columns per grid point (grid, 6, records), the records less the level before the reboot, and
    the share of each record before the reboot. ``known``: the reboot time is a boot line's."""
    a, b = records.start_s[None, :].astype(float), records.end_s[None, :].astype(float)
    width = b - a
    reboot_s, scale_s, exponential, fast_ratio = points.reboot_s, points.scale_s, points.exponential, points.fast_ratio
    grid_reboot = reboot_s[:, None]
    # Between the reboot and the creep's start the engine is down (nothing held); the losses cover its loading.
    start = grid_reboot + points.delay_s[:, None]
    pre = _overlap(a, b, -np.inf, grid_reboot) / width
    post = np.ones_like(pre) if before is None else _overlap(a, b, start, np.inf) / width
    shape_mean = _window_means(records, start[:, 0], scale_s, exponential)
    # Two stages: a fast exponential beside the slow one (zero for the linear shape; ≥ 0 like every rise).
    fast_mean = _window_means(records, start[:, 0], scale_s / fast_ratio, np.ones(len(scale_s), dtype=bool), rows=exponential)
    target = records.used_mib[None, :] - (before.level_mib if before is not None else 0.0) * pre
    # The minutes the engine was down and loading: a loss of memory-seconds in the record holding the restart
    # and, when the loading runs past its end, in the next one (their lengths are unknown, and 1-minute polls
    # see them only as whole polls): one unknown ≥ 0 per record, so those records say nothing about L, R, T.
    if before is not None:
        first = (a <= grid_reboot) & (grid_reboot < b)
        # The next record is given its loss whether or not the loading reached it: a loss only where the reboot
        # sits in the last LOSS_SPREAD_S of its record would free a record there, and the fit would prefer
        # those reboot times for the freedom alone.
        after = np.where(a > grid_reboot, a, np.inf)
        next_start = after.min(axis=1, keepdims=True)
        second = np.isfinite(after) & (a == next_start)
        # A reboot the fit places in a stretch without records (no record holds it): the two records after it take the
        # two losses, so that every reboot time frees two records and none is preferred for the freedom alone.
        in_hole = ~first.any(axis=1, keepdims=True) & (not known)
        following = np.isfinite(after) & (a == np.where(after > next_start, after, np.inf).min(axis=1, keepdims=True))
        first, second = np.where(in_hole, second, first), np.where(in_hole, following, second)
        if known:
            # A boot line's reboot time is not chosen by the fit: the next record loses only what the loading can reach.
            second &= a < grid_reboot + LOSS_SPREAD_S
        losses = [np.where(first, -1.0 / width, 0.0), np.where(second, -1.0 / width, 0.0)]
    else:
        losses = [np.zeros_like(pre), np.zeros_like(pre)]
    # A life before that was still creeping may have risen past its last record by the reboot: the minutes before it
    # in the record holding it hold that level plus an unknown ≥ 0 (memory only grows while an engine lives).
    risen = np.where(first, pre, 0.0) if before is not None and before.rising else np.zeros_like(pre)
    return np.stack([post, shape_mean, fast_mean, *losses, risen], axis=1), target, pre


def _model(records: Records, before: Before | None, fit: Fit, *, known: bool = False) -> np.ndarray:
    """Each record's mean under ``fit`` (the losses solved again for its reboot time)."""
    reboot_s = fit.reboot_s if fit.reboot_s is not None else fit.start_s
    columns, target, pre = _columns(records, before, GridPoints(np.array([reboot_s]), np.array([fit.start_s - reboot_s]),
                                                                    np.array([fit.scale_s]), np.array([fit.exponential]), np.array([fit.fast_ratio])),
                                     known=known)
    weights = records.window_s.astype(float)[None, :]
    coef = _nonnegative_tail(np.einsum("gir,gjr,gr->gij", columns, columns, weights), np.einsum("gir,gr,gr->gi", columns, target, weights))
    return np.einsum("gir,gi->gr", columns, coef)[0] + (before.level_mib if before is not None else 0.0) * pre[0]


def _fit_grid(records: Records, before: Before | None, points: GridPoints, *, known: bool = False) -> FitGrid:
    """Fits at grid points (reboot time, delay, scale, shape, fast ratio); level and rises by non-negative least squares."""
    columns, target, _ = _columns(records, before, points, known=known)
    reboot_s, scale_s, exponential, fast_ratio = points.reboot_s, points.scale_s, points.exponential, points.fast_ratio
    weights = records.window_s.astype(float)
    w = np.broadcast_to(weights[None, :], target.shape)
    normal = np.einsum("gir,gjr,gr->gij", columns, columns, w)
    right = np.einsum("gir,gr,gr->gi", columns, target, w)
    coef = _nonnegative_tail(normal, right)
    level, rise, fast = coef[:, 0], coef[:, 1], coef[:, 2]
    model = np.einsum("gir,gi->gr", columns, coef)
    residual = (w * (target - model) ** 2).sum(1) / weights.sum()
    # Where the records cannot tell fits apart (a rise hidden inside the window that holds the restart), the
    # smallest rise seen by the history's end is the one they show: no creep is claimed that no record sees.
    elapsed = np.clip(float(records.end_s[-1]) - reboot_s - points.delay_s, 0.0, None)
    seen = rise * np.where(exponential, -np.expm1(-elapsed / scale_s), np.minimum(elapsed / scale_s, 1.0)) \
        + fast * -np.expm1(-elapsed / (scale_s / fast_ratio))
    return FitGrid(reboot_s.astype(float), points.delay_s.astype(float), scale_s.astype(float), exponential.astype(bool), fast_ratio.astype(float), level, rise, fast,
                   residual, seen, first_life=before is None)


def analyse_records(records: Records, *, min_step_mib: float = 256.0, min_creep_mib: float = 256.0,
                    boot_times_s: Sequence[float] = (), boots_here_s: Sequence[float] = ()) -> Analysis:
    valid = ~np.isnan(records.used_mib)
    records = records.part(valid)
    order = np.argsort(records.end_s, kind="stable")
    records = records.part(order)
    if len(records.end_s) == 0:
        raise ValueError("no readings")
    gaps = int(np.count_nonzero(records.hole_s[1:] > np.maximum(records.window_s[1:], 120)))
    analysis = Analysis(samples=len(records.end_s), start=when_utc(records.start_s[0]), end=when_utc(records.end_s[-1]),
                                gaps=gaps)
    reboots = find_reboots(records, min_step_mib=min_step_mib, boot_times_s=list(boot_times_s), boots_here_s=list(boots_here_s))
    lives = _fit_lives(records, reboots, min_step_mib)
    hidden = _hidden_reboot(records, *lives[0][1:], min_creep_mib) if lives and lives[0][0] is None else None
    if hidden is not None:
        lives = _fit_lives(records, sorted([*reboots, hidden], key=lambda reboot: reboot.first), min_step_mib)
    for reboot, life, fit in lives:
        step_at = None
        if reboot is not None:
            step_at = reboot.known_at_s if reboot.known_at_s is not None else fit.reboot_s if fit.reboot_s is not None else reboot.span_start_s
            analysis.steps.append(Step(
                at=when_utc(step_at), delta_mib=round(fit.level_mib - reboot.before_mib, 1), before_mib=round(reboot.before_mib, 1),
                after_mib=round(fit.level_mib, 1), window_start=when_utc(reboot.span_start_s), window_end=when_utc(reboot.span_end_s),
                inferred=reboot.known_at_s is None, evidence=reboot.evidence))
        analysis.segments.append(_segment(life, fit, reboot, min_creep_mib, step_at))
    return analysis


def _fit_lives(records: Records, reboots: list[Reboot], min_step_mib: float) -> list[tuple[Reboot | None, Records, Fit]]:
    """Each boot's life between the reboots, fitted (the first one has no reboot before it)."""
    lives: list[tuple[Reboot | None, Records, Fit]] = []
    bounds = [0] + [reboot.first for reboot in reboots] + [len(records.end_s)]
    for number in range(len(bounds) - 1):
        reboot = reboots[number - 1] if number > 0 else None
        life = records.part(np.arange(bounds[number], bounds[number + 1]))
        # Records entirely near zero are the engine down: nothing to fit there.
        life = life.part(life.used_mib >= NEAR_ZERO_MIB) if np.any(life.used_mib >= NEAR_ZERO_MIB) else life
        if len(life.end_s) == 0:
            continue
        if reboot is None:
            # The history may begin while an engine was booting: a first record far below the next is that boot
            # (its minutes at zero and loading in the mean), not creep: nothing to fit there.
            while len(life.end_s) > 2 and life.used_mib[0] < life.used_mib[1] - min_step_mib:
                life = life.part(np.arange(1, len(life.end_s)))
            fit = fit_life(life, before_mib=None, reboot_lo_s=float(life.start_s[0]) - 2 * 86400.0,
                           reboot_hi_s=float(life.end_s[-1]))
        else:
            # The life before still creeping when its records end (or too few of them to tell): it may have risen since.
            rising = not lives or len(lives[-1][1].end_s) < 3 or lives[-1][2].reach_s(PLATEAU_SHARE) > float(lives[-1][1].end_s[-1])
            fit = fit_life(life, before_mib=reboot.before_mib, reboot_lo_s=reboot.span_start_s, reboot_hi_s=reboot.span_end_s,
                           known_reboot_s=reboot.known_at_s, before_rising=rising)
        lives.append((reboot, life, fit))
    return lives


def _hidden_reboot(records: Records, life: Records, fit: Fit, min_creep_mib: float) -> Reboot | None:
    """A restart hidden in a stretch without records, read from where the first life's creep starts.

    Creep starts when an engine boots: a first life whose fitted creep starts not before the history but at a
    stretch without records (polls missing, or where a finer record type takes over from a coarser one) booted
    there (or shortly before: see ``within_s``), and the records after it may have started lower than those before
    it, which the fit cannot see without a reboot to fit. The reboot's span is that stretch and the record after it.
    """
    if fit.rise_mib + fit.fast_rise_mib < min_creep_mib or fit.start_s <= float(life.start_s[0]):
        return None
    holes = np.flatnonzero(life.hole_s > np.maximum(life.window_s, HOLE_S))
    # The records after the restart may read the old level for a while (the new life's creep passing it) before the
    # fit's creep starts: the latest stretch without records before that start, within half the rise's duration.
    within_s = (fit.reach_s(PLATEAU_SHARE) - fit.start_s) / 2
    holes = holes[(life.start_s[holes - 1] <= fit.start_s) & (fit.start_s <= life.end_s[holes] + within_s)]
    if len(holes) == 0:
        return _creep_start_reboot(records, life, fit, within_s)
    k = int(holes[-1])
    j = int(np.flatnonzero(records.end_s == life.end_s[k])[0])
    return Reboot(span_start_s=float(records.end_s[j - 1]), span_end_s=float(records.end_s[j]), first=j, last=j,
                  before_mib=float(records.used_mib[j - 1]),
                  evidence=f"creep starting after {life.hole_s[k] / 3600:.1f} h without records, ending "
                           f"{when_utc(records.start_s[j]):%m-%d %H:%M} (a restart hidden there)")


def _creep_start_reboot(records: Records, life: Records, fit: Fit, within_s: float) -> Reboot | None:
    """A restart back to about the old level, seen only as a creep starting inside the history: no record falls or
    dips (an 8-hour record holding a few minutes down and a fast creep after them reads about the level before).
    The reboot's span runs from the record before the one holding the fitted creep start to the one after it, or
    ``within_s`` after the start if later (the shape
    fitted without a reboot may start its creep early or late), and is fitted there."""
    holding = np.flatnonzero(life.end_s >= fit.start_s)
    if len(holding) == 0 or int(holding[0]) < 2:
        return None
    # From the record before the one holding it: a restart early in a record pulls it below the old level a little
    # (its minutes down), which the fit without a reboot reads as the creep starting after it.
    k = int(holding[0]) - 1
    j = int(np.flatnonzero(records.end_s == life.end_s[k])[0])
    # To the record after the one holding it at least: a step inside a record reads as a ramp through it and the next.
    after = min(j + 2, len(records.end_s) - 1)
    last = int(np.flatnonzero(records.end_s <= max(fit.start_s + within_s, float(records.end_s[after])))[-1])
    return Reboot(span_start_s=float(records.start_s[j]), span_end_s=float(records.end_s[last]), first=j, last=last,
                  before_mib=float(records.used_mib[j - 1]),
                  evidence=f"memory rising from the {records.record_types[j]} record ending {when_utc(records.end_s[j]):%m-%d %H:%M} "
                           "with no fall or dip (a restart to about the old level or above, hidden in the averages)")


def _segment(life: Records, fit: Fit, reboot: Reboot | None, min_creep_mib: float, boot_s: float | None) -> Segment:
    history_end = float(life.end_s[-1])
    reached_s = fit.reach_s(PLATEAU_SHARE)
    # Levelled off when the history stays flat after the rise long enough to tell a plateau from a rise that
    # is still going on: a quarter of the rise's duration, at least an hour and two of the last records.
    levelled_off = history_end - reached_s >= max(FLAT_SHARE * (reached_s - fit.start_s), 3600.0, 2 * float(life.window_s[-1]))
    plateau, uncertainty, still_to_rise, basis = _plateau(life, fit, reached_s if levelled_off else None)
    # The creep starts when the engine is back (up to LOSS_SPREAD_S after the reboot), the life at the reboot.
    start_s = fit.start_s if fit.reboot_s is not None else float(life.start_s[0])
    creep = None
    # A creep the records cannot size (a reboot somewhere in an 8-hour record) is reported, with its bounds, when any
    # fit they cannot tell from the best one sees it, not only when the smallest of them does.
    # (A first life's fits may start their creep before the records, at any level: there only the best one counts.)
    sized = fit.reboot_s is not None and fit.alike is not None and len(fit.alike.level_mib) > 0
    lowest_level_mib = min(float(fit.alike.level_mib.min()), fit.level_mib) if sized and fit.alike is not None else fit.level_mib
    # (The best fit must still see a quarter of it: a steady GPU rebooted blind could hide any rise in its freed records.)
    if plateau - lowest_level_mib >= min_creep_mib and plateau - fit.level_mib >= min_creep_mib * UNTOUCHED_SHARE:
        reached = reached_s if levelled_off else history_end
        # Resolved: at least three records see the rise, and the restart is known to better than the rise lasted.
        seen_by = np.count_nonzero((life.end_s > fit.start_s) & (life.start_s < reached_s))
        span_s = 0.0 if reboot is None or reboot.known_at_s is not None else reboot.span_end_s - reboot.span_start_s
        resolved = seen_by >= 3 and span_s <= reached_s - fit.start_s
        two_stage = fit.fast_rise_mib > TWO_STAGE_SHARE * (fit.rise_mib + fit.fast_rise_mib)
        bounds = _bounds(life, fit, plateau, uncertainty, reached, levelled_off)
        shape = ("two-stage exponential" if two_stage else "saturating exponential") if fit.exponential else "linear then flat"
        creep = Creep(
            start=when_utc(start_s), plateau_at=when_utc(reached), rise_mib=round(plateau - fit.level_mib, 1),
            hours_to_plateau=round((reached - start_s) / 3600, 2),
            hours_to_90pct=round((fit.reach_s(0.9) - start_s) / 3600, 2) if levelled_off else None,
            levelled_off=levelled_off, resolved=resolved, shape="exponential" if fit.exponential else "linear",
            time_constant_hours=round(fit.scale_s / 3600, 2),
            **bounds,
            basis=("" if resolved else "NOT RESOLVED: the rise is shorter than the averaging windows around it (pass the "
                   "engine log for the boot time, or keep finer history); ") + f"{shape} fitted to {len(life.end_s)} averaged records ({', '.join(_types(life))}); "
                  + ("reboot time from the boot line" if reboot is not None and reboot.known_at_s is not None
                     else "reboot time inferred inside its window" if reboot is not None else "no reboot in the history")
                  + f"; plateau from {basis}"
                  + ("" if bounds["rise_determined"] else f"; size not determinable to {DETERMINED_SHARE:.0%}: "
                     f"{bounds['rise_low_mib']:,.0f}–{bounds['rise_high_mib']:,.0f} MiB fit the records as well")
                  + ("" if bounds["plateau_at_determined"] is not False else
                     f"; plateau time not determinable to one record: {bounds['plateau_earliest']:%m-%d %H:%M}–{bounds['plateau_latest']:%m-%d %H:%M}"),
        )
    return Segment(start=when_utc(boot_s if boot_s is not None else start_s), end=when_utc(history_end), level_after_boot_mib=round(fit.level_mib, 1),
                   plateau_used_mib=round(plateau, 1), plateau_uncertainty_mib=round(uncertainty, 1),
                   still_to_rise_mib=round(still_to_rise, 1) if levelled_off else None, creep=creep)


def _bounds(life: Records, fit: Fit, plateau_mib: float, uncertainty_mib: float, reached_s: float, levelled_off: bool) -> dict[str, Any]:
    """The creep's size and plateau time over the fits the records cannot tell from ``fit`` (``Creep``'s bounds), and
    whether they agree: sizes within DETERMINED_SHARE, plateau times within one record of the finest type there.
    The size's bounds hold the plateau's ± too (it is the rise's other end)."""
    alike = fit.alike if fit.alike is not None and len(fit.alike.level_mib) else None
    reach = alike.reach_s(PLATEAU_SHARE) if alike is not None else np.array([reached_s])
    levels = alike.level_mib if alike is not None else np.array([fit.level_mib])
    rise = plateau_mib - fit.level_mib
    low = plateau_mib - uncertainty_mib - max(float(levels.max()), fit.level_mib)
    high = plateau_mib + uncertainty_mib - min(float(levels.min()), fit.level_mib)
    earliest, latest = min(float(reach.min()), reached_s), max(float(reach.max()), reached_s)
    covering = (life.start_s < reached_s) & (reached_s <= life.end_s)
    record_s = float(life.window_s[covering].min()) if covering.any() else float(life.window_s.max())
    return {"rise_low_mib": round(low, 1), "rise_high_mib": round(high, 1),
            "rise_determined": bool(high <= rise * (1 + DETERMINED_SHARE) and low >= rise * (1 - DETERMINED_SHARE)),
            "plateau_earliest": when_utc(earliest) if levelled_off else None,
            "plateau_latest": when_utc(latest) if levelled_off else None,
            "plateau_at_determined": bool(latest - reached_s <= record_s and reached_s - earliest <= record_s) if levelled_off else None}


def _plateau(life: Records, fit: Fit, levelled_from_s: float | None) -> tuple[float, float, float, str]:
    """The level now, its ± MiB, what the fit says is still to come, and which records gave it.

    The records used are the latest levelled ones (starting after the plateau was reached) at the finest
    resolution among them that has PLATEAU_RECORDS of them; while still rising, those of the last hour. Their mean residual corrects the fit's
    level at the history's end, so a shape that fits the whole life a little off does not move the plateau.
    ± is twice the standard error of that mean (the jitter) plus how much the fit moves across those records.
    """
    history_end = float(life.end_s[-1])
    chosen = life.start_s >= levelled_from_s if levelled_from_s is not None else np.zeros(len(life.end_s), dtype=bool)
    if not chosen.any():
        chosen = life.end_s >= history_end - max(3600.0, float(life.window_s[-1]))
    # The finest type with at least PLATEAU_RECORDS of them (the clean-up may leave one 1-minute poll after a polling
    # gap at the history's end: one poll's jitter is no plateau); with none, the type with the most.
    windows, counts = np.unique(life.window_s[chosen], return_counts=True)
    enough = windows[counts >= PLATEAU_RECORDS]
    chosen &= life.window_s == (float(enough.min()) if len(enough) else float(windows[np.argmax(counts)]))
    residual = life.used_mib[chosen] - fit.model_mib[chosen]
    now_mib = fit.value_at(history_end)
    count = int(chosen.sum())
    # Too few records for their own spread: their type's jitter (read from its consecutive records).
    spread = float(np.std(residual, ddof=1)) if count >= PLATEAU_RECORDS else max(float(record_noise_mib(life)[chosen].max()), fit.residual_mib)
    drift = abs(now_mib - float(fit.model_mib[chosen].mean()))
    uncertainty = max(2 * spread / np.sqrt(count) + drift, 1.0)
    still_to_rise = max(fit.level_mib + fit.rise_mib + fit.fast_rise_mib - now_mib, 0.0)
    kinds = ", ".join(sorted(set(life.record_types[chosen].tolist())))
    return now_mib + float(residual.mean()), uncertainty, still_to_rise, f"{count} × {kinds} ({'levelled' if levelled_from_s is not None else 'latest, still rising'})"


def _types(records: Records) -> list[str]:
    kinds, counts = np.unique(records.record_types, return_counts=True)
    return [f"{count} × {kind}" for kind, count in zip(kinds, counts)]
