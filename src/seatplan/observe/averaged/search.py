"""Finding one life's best fit (``fit_life``): the coarse grid, each reboot time's scales refined, the profile over a blind reboot time, the fine grids and the compass search.

Part of :mod:`seatplan.observe.averaged` (the method is in its docstring).
"""

from __future__ import annotations

import numpy as np

from seatplan.observe.averaged.model import FAST_RATIOS, LOSS_SPREAD_S, TAU_HOURS, TIE_MIB, TIE_SHARE, Before, Fit, FitGrid, GridPoints, coarse_shapes, fit_grid, modelled_means
from seatplan.observe.averaged.records import Records

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


def fit_life(records: Records, *, before_mib: float | None, reboot_lo_s: float, reboot_hi_s: float,
             known_reboot_s: float | None = None, before_rising: bool = False) -> Fit:
    """Fit one boot's life (see the module docstring) to records that start at or after ``reboot_lo_s``.

    ``before_mib`` is None for the first life in the history (no reboot seen: the creep may start anywhere
    up to the records' start, and nothing before it is modelled). Every shape is fitted over a coarse grid
    of reboot times and scales, each reboot time's scales refined, then a fine grid around the best point;
    the best fit wins. Every grid point evaluated is kept: those the records cannot tell from the best
    (``alike``) bound the creep, and the reboot times at the edges of theirs are refined too.
    """
    shapes = coarse_shapes()
    before = Before(before_mib, before_rising) if before_mib is not None else None
    known = known_reboot_s is not None
    if known:
        # A boot line is the engine starting: the creep starts when it is back, up to LOSS_SPREAD_S later.
        reboots, delays = np.array([known_reboot_s]), np.linspace(0.0, LOSS_SPREAD_S, DELAY_GRID)
    else:
        reboots, delays = _reboot_grid(records, reboot_lo_s, reboot_hi_s, known=before is not None), np.zeros(1)
    grid = _refine_scales(records, before, fit_grid(records, before, GridPoints.every(reboots, delays, shapes), known=known), known=known)
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
        grid = grid.join(fit_grid(records, before, GridPoints.every(near_reboots, np.array([centre.start_s - at_s]), near), known=known))
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
        grid = grid.join(_refine_scales(records, before, fit_grid(records, before, GridPoints.every(np.unique(earliest), np.zeros(1), shapes))))
        # The latest creep start is bounded sharply (a longer delay than the engine was down leaves a record holding more
        # than the model can): a fine grid of delays, with the best fit's shape and scales around its own.
        centre = grid.at(grid.best())
        near = GridPoints(np.zeros(FINE_GRID), np.zeros(FINE_GRID), centre.scale_s * np.geomspace(1 / ratio, ratio, FINE_GRID) ** 4,
                          np.full(FINE_GRID, centre.exponential), np.full(FINE_GRID, centre.fast_ratio))
        grid = grid.join(fit_grid(records, before, GridPoints.every(np.unique(latest), np.linspace(0.0, LOSS_SPREAD_S, DELAY_GRID), near)))
        candidate = grid.best()
        best = candidate if _better(grid.at(candidate), grid.at(best)) else best
    # The profile over the scale (and a two-stage creep's ratio) at the best fit's reboot: the fine passes sample only
    # near the best point, and the plateau time's bounds are where the records stop telling those scales apart.
    centre = grid.at(best)
    at_s = centre.anchor_s
    profile = _near_shapes(centre, PROFILE_SPAN, PROFILE_SPAN, count=PROFILE_GRID)
    grid = grid.join(fit_grid(records, before, GridPoints.every(np.array([at_s]), np.array([centre.start_s - at_s]), profile), known=known))
    fit = grid.at(best)
    fit.model_mib = modelled_means(records, before, fit, known=known)
    fit.alike = grid.alike(best, len(records.end_s))
    return fit


def _profile_reboots(records: Records, before: Before | None, grid: FitGrid, centre: Fit, lo_s: float, hi_s: float) -> FitGrid:
    """The profile over the reboot time across its span, each reboot time with its own delay, scale and fast ratio
    (from ``centre``'s shape): where the records cannot tell reboot times apart (a restart somewhere in an 8-hour record
    whose next record is freed for the loading too) the whole stretch fits alike, and the creep's bounds are its ends."""
    reboots = np.linspace(lo_s, hi_s, REBOOT_GRID)
    shape = GridPoints(np.zeros(1), np.zeros(1), np.array([centre.scale_s]), np.array([centre.exponential]), np.array([centre.fast_ratio]))
    delays = GridPoints.every(reboots, np.linspace(0.0, LOSS_SPREAD_S, PROFILE_DELAYS), shape)
    grid = grid.join(fit_grid(records, before, delays))
    parts = []
    for at_s in reboots:
        mine = np.flatnonzero(grid.reboot_s == at_s)
        index = int(mine[np.argmin(grid.residual[mine])])
        parts.append(GridPoints.every(np.array([at_s]), np.array([float(grid.delay_s[index])]),
                                      _near_shapes(grid.at(index), SEARCH_SCALE_STEP, SEARCH_SCALE_STEP if centre.fast_rise_mib > 0 else 1.0)))
    return grid.join(fit_grid(records, before, GridPoints.concat(parts)))


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
        grid = grid.join(fit_grid(records, before, points, known=known))
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
        grid = grid.join(fit_grid(records, before, GridPoints.concat(points), known=known))
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
