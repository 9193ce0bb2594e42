"""The analysis of one GPU's averaged history (``analyse_records``): each life fitted, its creep, bounds and plateau as ``Segment``s and ``Creep``.

Part of :mod:`seatplan.observe.averaged` (the method is in its docstring).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from seatplan.documents.observed import Creep, Segment, Step
from seatplan.observe.averaged.model import Fit
from seatplan.observe.averaged.reboots import NEAR_ZERO_MIB, PLATEAU_SHARE, UNTOUCHED_SHARE, Reboot, find_reboots, hidden_reboot
from seatplan.observe.averaged.records import Records, record_noise_mib, type_counts, when_utc
from seatplan.observe.averaged.search import fit_life

# The plateau is read from a type with at least this many levelled records (see _plateau).
PLATEAU_RECORDS = 3
# A fast stage holding more than this share of the rise makes the creep two-stage (in its basis).
TWO_STAGE_SHARE = 0.05
FLAT_SHARE = 0.25
# The creep's size is determined when every fit the records cannot tell apart sizes it within this share.
DETERMINED_SHARE = 0.10


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
    hidden = hidden_reboot(records, *lives[0][1:], min_creep_mib) if lives and lives[0][0] is None else None
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
                   "engine log for the boot time, or keep finer history); ") + f"{shape} fitted to {len(life.end_s)} averaged records ({', '.join(type_counts(life))}); "
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
    # A fit's level is free in the least squares, and a first life's creep may start long before its records: such a
    # fit can need a level far below zero, and its rise came out at 10-50 TB ("106–37,533,427 MiB fit the records as
    # well"). No GPU holds less than nothing, and no rise is negative: the bounds stay within 0 … the plateau.
    low = max(plateau_mib - uncertainty_mib - max(float(levels.max()), fit.level_mib), 0.0)
    high = plateau_mib + uncertainty_mib - max(min(float(levels.min()), fit.level_mib), 0.0)
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
