"""Where the history shows a reboot (``find_reboots``: falls, dips, near-zero records, falls across a hole), and the
reboots a fit reveals (a creep starting at a hole, or where a life's creep starts).

Part of :mod:`seatplan.observe.averaged` (the method is in its docstring).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from seatplan.observe.averaged.model import Fit
from seatplan.observe.averaged.records import Records, record_noise_mib, when_utc

# Near zero: the GPU held (almost) nothing for most of the window.
NEAR_ZERO_MIB = 1024.0
# A stretch this long (and longer than the next record's window) without records: a fall across it needs only to
# stand out of the jitter to be a reboot.
HOLE_S = 600.0
# Records this long show a restart only in part (see find_reboots).
LONG_WINDOW_S = 7200
# A fall or dip stands out of the jitter of the difference of two of a type's records by this many σ (two records'
# jitter: √2 × one's; at 3.5 σ of the difference, one in 4,000 steps, the last hour's 60 1-minute polls of a GPU
# jittering 50 MiB would show a fall of a quarter GiB in one history in seventy).
NOISE_FACTOR = 5.0
# The plateau is reached when the creep holds this share of its rise (within 5 %).
PLATEAU_SHARE = 0.95
# A record within this share of --min-step-mib of the one before it still reads the old level.
UNTOUCHED_SHARE = 0.25


@dataclass
class Reboot:
    span_start_s: float
    span_end_s: float
    first: int            # first record touched by the reboot
    last: int             # last record touched by the reboot
    before_mib: float     # the level just before the reboot
    evidence: str
    known_at_s: float | None = None  # a boot line's time inside the span


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


def hidden_reboot(records: Records, life: Records, fit: Fit, min_creep_mib: float) -> Reboot | None:
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
