"""Property test: creep and plateau on random Beszel histories whose truth the fit does not assume.

The generator (tests/kits/random_hub.py) draws the creep's shape (exponential, linear-then-flat,
two-stage), time constant 3–24 h, rise 0.3–3 GB, the reboot anywhere (so anywhere inside its window),
1–10 minutes down, jitter σ 5–50 MiB, polling gaps and 1–30 days of history (so the reboot falls in the
10m, 20m, 120m or 480m stretch); half the draws give the boot line. Each hub database goes through the
real reader (``read_beszel``) and ``analyse``. The issue's targets: creep within 10 %, plateau within
40 MiB, plateau time within one record of the finest type covering it. Measured over the 200 draws of
this seed (docs/diagnose.md): the plateau meets its target in every draw; creep and plateau time meet theirs
in most draws only, and where the boot line is missing at 120m/480m the records cannot pin the reboot
(see docs/diagnose.md, *what the records cannot tell*): the floors below are those measured, less a margin,
so a regression fails the test; the worst case of each figure is printed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kits.random_hub import Draw, draw, write_hub
from seatplan.observe.detect import DetectSettings, GpuSeries, analyse
from seatplan.observe.sources.beszel import read_beszel

DRAWS = 200
SEED = 2026
PLATEAU_MIB = 40.0
CREEP_SHARE = 0.10
# The operator's --min-creep-mib for this sweep: the smallest drawn rise (286 MiB) may be only partly seen yet.
MIN_CREEP_MIB = 100.0


@dataclass
class Outcome:
    number: int
    one: Draw
    creep_error: float          # |fitted − true| / true rise since the boot
    plateau_error_mib: float    # fitted − true level at the history's end
    time_error_records: float | None  # (fitted − true plateau time) / window of the finest record covering it
    uncertainty_mib: float

    def describe(self) -> str:
        one = self.one
        return (f"draw {self.number}: {one.shape}, τ {one.tau_h:.1f} h, rise {one.rise_mib:,.0f} MiB, reboot {one.age_s / 3600:.1f} h back, "
                f"{one.days:.1f} days, jitter {one.jitter_mib:.0f} MiB, boot line {one.boot_line}: creep off {self.creep_error:.1%}, "
                f"plateau off {self.plateau_error_mib:+.1f} MiB (± {self.uncertainty_mib:.1f}), plateau time off "
                + ("-" if self.time_error_records is None else f"{self.time_error_records:+.2f} records"))


def finest_window_s(series: GpuSeries, at_s: float) -> float:
    assert series.window_s is not None
    covering = (series.times_s - series.window_s < at_s) & (at_s <= series.times_s)
    return float(series.window_s[covering].min()) if covering.any() else float(series.window_s.max())


def outcome(number: int, one: Draw, series: GpuSeries) -> Outcome:
    boots = [one.boot_s] if one.boot_line else []
    # The boot line is of a seat the fleet puts on this GPU: it pins the reboot, and is one where the averages show none.
    analysis = analyse(series, DetectSettings(min_creep_mib=MIN_CREEP_MIB), boot_times_s=boots, boots_here_s=boots)
    life = analysis.segments[-1]
    truth_mib = one.truth_now_mib()
    true_rise = truth_mib - one.level_mib
    rise = life.creep.rise_mib if life.creep is not None else 0.0
    true_at = one.plateau_at_s()
    time_error = None
    if true_at is not None and life.creep is not None and life.creep.levelled_off:
        time_error = (life.creep.plateau_at.timestamp() - true_at) / finest_window_s(series, true_at)
    return Outcome(number, one, abs(rise - true_rise) / true_rise, life.plateau_used_mib - truth_mib, time_error,
                   life.plateau_uncertainty_mib or 0.0)


def share(outcomes: list[Outcome], good) -> float:
    return sum(bool(good(o)) for o in outcomes) / max(len(outcomes), 1)


def test_creep_and_plateau_over_random_histories(tmp_path):
    rng = np.random.default_rng(SEED)
    outcomes = []
    for number in range(DRAWS):
        one = draw(rng)
        series = read_beszel(write_hub(tmp_path / f"hub-{number}.db", one, rng))[0]
        outcomes.append(outcome(number, one, series))
    logged = [o for o in outcomes if o.one.boot_line]
    blind = [o for o in outcomes if not o.one.boot_line]
    timed = [o for o in outcomes if o.time_error_records is not None]
    print()
    print("worst plateau:", max(outcomes, key=lambda o: abs(o.plateau_error_mib)).describe())
    print("worst creep with the boot line:", max(logged, key=lambda o: o.creep_error).describe())
    print("worst creep without it:", max(blind, key=lambda o: o.creep_error).describe())
    print("worst plateau time:", max(timed, key=lambda o: abs(o.time_error_records or 0.0)).describe())
    creep_logged = share(logged, lambda o: o.creep_error <= CREEP_SHARE)
    creep_blind = share(blind, lambda o: o.creep_error <= CREEP_SHARE)
    on_time = share(timed, lambda o: abs(o.time_error_records or 0.0) <= 1.0)
    print(f"creep within 10 %: {creep_logged:.0%} of {len(logged)} with the boot line, {creep_blind:.0%} of {len(blind)} without;"
          f" plateau time within one record: {on_time:.0%} of {len(timed)}")

    assert len(outcomes) == DRAWS and len(logged) > DRAWS // 3 and len(blind) > DRAWS // 3
    # The target, met in every draw: the plateau the plan check acts on.
    assert all(abs(o.plateau_error_mib) <= PLATEAU_MIB for o in outcomes), [o.describe() for o in outcomes if abs(o.plateau_error_mib) > PLATEAU_MIB]
    # Met in most draws (measured at this seed: 99 % of 107 with the boot line, 83 % of 93 without, plateau time 93 % of 161): floors with a margin.
    assert creep_logged >= 0.95
    assert creep_blind >= 0.75
    assert on_time >= 0.85
    # Every plateau carries its ± MiB.
    assert all(o.uncertainty_mib > 0 for o in outcomes)
