"""The curve of one boot's life and its fit at fixed nonlinear parameters: the shapes, each record's window mean in closed
form, the non-negative least squares over a grid of reboot times and scales (``FitGrid``), and ``Fit``.

Part of :mod:`seatplan.observe.averaged` (the method is in its docstring).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from seatplan.observe.averaged.records import Records

# Rises faster than this are the engine loading (the loss D covers them), not creep.
RAMP_HOURS = np.geomspace(2.0, 24 * 14, 32)
# Time constants of the saturating exponential (the same floor: faster is loading).
TAU_HOURS = np.geomspace(0.7, 24 * 5, 32)
# A two-stage creep: a fast exponential of the time constant / one of FAST_RATIOS beside the slow one.
FAST_RATIOS = (1.3, 1.8, 2.6, 4.0)
# Fits whose squared residuals are this close to the best one are told apart by the smallest rise.
TIE_SHARE, TIE_MIB = 0.005, 0.1
# The engine may be down and loading this long after the restart (so the next record may hold part of it).
LOSS_SPREAD_S = 900.0
# Fits whose χ² (weighted by window, the jitter estimated from the best fit) is within this of the best one's
# are ones the records cannot tell apart: they bound the creep's size and plateau time.
ALIKE_CHI2 = 9.0
# Unknowns of one life's fit: level, two rises, two losses, reboot time and scale.
FREE_PARAMETERS = 7


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


def coarse_shapes() -> GridPoints:
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
        # A reboot in a stretch without records (no record holds it): the two records after it take the two losses, so
        # that every reboot time the fit tries frees two records and none is preferred for the freedom alone. A boot
        # line's reboot there frees the first record after it (the second only where the loading reaches, below): a
        # hub's longer record averages shorter ones made before its own window's start, so its mean may hold the
        # minutes down (tests/kits/random_hub.py).
        in_hole = ~first.any(axis=1, keepdims=True)
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


def modelled_means(records: Records, before: Before | None, fit: Fit, *, known: bool = False) -> np.ndarray:
    """Each record's mean under ``fit`` (the losses solved again for its reboot time)."""
    reboot_s = fit.reboot_s if fit.reboot_s is not None else fit.start_s
    columns, target, pre = _columns(records, before, GridPoints(np.array([reboot_s]), np.array([fit.start_s - reboot_s]),
                                                                    np.array([fit.scale_s]), np.array([fit.exponential]), np.array([fit.fast_ratio])),
                                     known=known)
    weights = records.window_s.astype(float)[None, :]
    coef = _nonnegative_tail(np.einsum("gir,gjr,gr->gij", columns, columns, weights), np.einsum("gir,gr,gr->gi", columns, target, weights))
    return np.einsum("gir,gi->gr", columns, coef)[0] + (before.level_mib if before is not None else 0.0) * pre[0]


def fit_grid(records: Records, before: Before | None, points: GridPoints, *, known: bool = False) -> FitGrid:
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
