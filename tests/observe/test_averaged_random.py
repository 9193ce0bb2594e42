"""Property test: creep and plateau on random Beszel histories whose truth the fit does not assume.

The generator (tests/kits/random_hub.py) draws the creep's shape (exponential, linear-then-flat,
two-stage), time constant 3–24 h, rise 0.3–3 GB, the reboot anywhere (so anywhere inside its window),
1–10 minutes down, jitter σ 5–50 MiB, polling gaps and 1–30 days of history (so the reboot falls in the
10m, 20m, 120m or 480m stretch); half the draws give the boot line. Each hub database goes through the
real reader (``read_beszel``) and ``analyse``; the records are made as the hub's cron makes them
(kits/beszel_hub.py's ``cron_records``). The issue's targets: creep within 10 %, plateau within
40 MiB, plateau time within one record of the finest type covering it.

Where the records cannot tell (a reboot somewhere in a 2- or 8-hour window and no boot line: moving it
scales the creep; a slow tail whose 95 % point the jitter hides), the diagnosis says so: ``rise_determined``
or ``plateau_at_determined`` false, with the bounds of the fits the records cannot tell apart. A draw
counts as correct when it meets the target, or when it is flagged so and the truth lies inside its stated
bounds (the plateau time: within one record of them, the target's own resolution). Asserted: the plateau,
the creep and the plateau time in every draw, and the flagged shares below ceilings measured at this seed
(docs/diagnose.md); the worst cases are printed. A second test does the same for FRESH_DRAWS histories on a
seed drawn each run (``SEATPLAN_TEST_SEED`` replays one).

The 200 draws run as CHUNKS tests that pytest-xdist workers share (one test took 5 minutes on a worker, the run's
longest): each chunk draws the same sequence from SEED, passing over the draws before its own (a draw and the
records it makes consume the generator as in one test), and asserts every target on its own draws. Each writes
what the shares need to the session's directory; the chunk that finds all of them there asserts the shares of the
whole sweep, as the single test did.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from kits.random_hub import Draw, draw, records, write_hub
from seatplan.observe.averaged import Analysis
from seatplan.observe.detect import DetectSettings, GpuSeries, analyse
from seatplan.observe.sources.beszel import read_beszel

DRAWS = 200
SEED = 2026
CHUNKS = 4  # tests of DRAWS // CHUNKS draws each; a chunk passes over the draws before its own (0.06 s of CPU each)
PLATEAU_MIB = 40.0
CREEP_SHARE = 0.10
# The operator's --min-creep-mib for this sweep: the smallest drawn rise (286 MiB) may be only partly seen yet.
MIN_CREEP_MIB = 100.0


# Flagged shares measured at this seed (docs/diagnose.md: 2 %, 54 %, 26 %), with a margin: a fit that flags more
# than this has lost precision.
FLAGGED_BLIND_CEILING = 0.65
FLAGGED_LOGGED_CEILING = 0.10
FLAGGED_TIME_CEILING = 0.40
# Draws on a fresh seed each run (the ``rng`` fixture): histories nobody chose, every one within the targets.
FRESH_DRAWS = 20


@dataclass
class Outcome:
    number: int
    one: Draw
    creep_error: float          # |fitted − true| / true rise since the boot
    true_rise_mib: float
    rise_bounds_mib: tuple[float, float] | None
    rise_flagged: bool          # the diagnosis says the records cannot size the creep to 10 %
    plateau_error_mib: float    # fitted − true level at the history's end
    time_error_records: float | None  # (fitted − true plateau time) / window of the finest record covering it
    time_bounds_records: tuple[float, float] | None  # (earliest, latest stated) − true, in the same records
    time_flagged: bool
    uncertainty_mib: float
    bounds_physical: bool       # every life's stated rise within 0 … its plateau, the first life's too

    @property
    def creep_ok(self) -> bool:
        inside = self.rise_bounds_mib is not None and self.rise_bounds_mib[0] <= self.true_rise_mib <= self.rise_bounds_mib[1]
        return self.creep_error <= CREEP_SHARE or (self.rise_flagged and inside)

    @property
    def plateau_ok(self) -> bool:
        return abs(self.plateau_error_mib) <= PLATEAU_MIB

    @property
    def time_ok(self) -> bool:
        if self.time_error_records is None or abs(self.time_error_records) <= 1.0:
            return True
        bounds = self.time_bounds_records
        return self.time_flagged and bounds is not None and bounds[0] - 1.0 <= 0.0 <= bounds[1] + 1.0

    def describe(self) -> str:
        one = self.one
        rise = "" if self.rise_bounds_mib is None else f" (bounds {self.rise_bounds_mib[0]:,.0f}–{self.rise_bounds_mib[1]:,.0f} MiB{', flagged' if self.rise_flagged else ''})"
        times = "" if self.time_bounds_records is None else \
            f" (bounds {self.time_bounds_records[0]:+.2f}…{self.time_bounds_records[1]:+.2f}{', flagged' if self.time_flagged else ''})"
        return (f"draw {self.number}: {one.shape}, τ {one.tau_h:.1f} h, rise {one.rise_mib:,.0f} MiB, reboot {one.age_s / 3600:.1f} h back, "
                f"{one.days:.1f} days, jitter {one.jitter_mib:.0f} MiB, boot line {one.boot_line}: creep off {self.creep_error:.1%}{rise}, "
                f"plateau off {self.plateau_error_mib:+.1f} MiB (± {self.uncertainty_mib:.1f}), plateau time off "
                + ("-" if self.time_error_records is None else f"{self.time_error_records:+.2f} records{times}"))


def finest_window_s(series: GpuSeries, at_s: float) -> float:
    assert series.window_s is not None
    covering = (series.times_s - series.window_s < at_s) & (at_s <= series.times_s)
    return float(series.window_s[covering].min()) if covering.any() else float(series.window_s.max())


def bounds_physical(analysis: Analysis) -> bool:
    """Every creep's stated rise lies within 0 … its life's plateau (and its ±, to the 0.1 MiB the figures are rounded
    to): no GPU holds less than nothing. A first life whose creep began before the records once said 10-50 TB."""
    return all(
        segment.creep is None or segment.creep.rise_low_mib is None or segment.creep.rise_high_mib is None
        or (segment.creep.rise_low_mib >= 0.0
            and segment.creep.rise_high_mib <= segment.plateau_used_mib + (segment.plateau_uncertainty_mib or 0.0) + 0.2)
        for segment in analysis.segments)


def outcome(number: int, one: Draw, series: GpuSeries) -> Outcome:
    boots = [one.boot_s] if one.boot_line else []
    # The boot line is of a seat the fleet puts on this GPU: it pins the reboot, and is one where the averages show none.
    analysis = analyse(series, DetectSettings(min_creep_mib=MIN_CREEP_MIB), boot_times_s=boots, boots_here_s=boots)
    life = analysis.segments[-1]
    creep = life.creep
    # The truth where the records end (polls may be missing up to NOW: the level then is no record's).
    end_s = float(series.times_s[-1])
    truth_mib = one.truth_mib(end_s)
    true_rise = truth_mib - one.level_mib
    rise = creep.rise_mib if creep is not None else 0.0
    bounds = (creep.rise_low_mib, creep.rise_high_mib) if creep is not None and creep.rise_low_mib is not None and creep.rise_high_mib is not None else None
    true_at = one.plateau_at_s(end_s)
    time_error = time_bounds = None
    if true_at is not None and creep is not None and creep.levelled_off:
        record_s = finest_window_s(series, true_at)
        time_error = (creep.plateau_at.timestamp() - true_at) / record_s
        if creep.plateau_earliest is not None and creep.plateau_latest is not None:
            time_bounds = ((creep.plateau_earliest.timestamp() - true_at) / record_s, (creep.plateau_latest.timestamp() - true_at) / record_s)
    return Outcome(number, one, abs(rise - true_rise) / true_rise, true_rise, bounds,
                   creep is not None and creep.rise_determined is False, life.plateau_used_mib - truth_mib, time_error, time_bounds,
                   creep is not None and creep.plateau_at_determined is False, life.plateau_uncertainty_mib or 0.0,
                   bounds_physical(analysis))


def share(outcomes: list, good) -> float:
    return sum(bool(good(o)) for o in outcomes) / max(len(outcomes), 1)


def sweep_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This session's directory for the chunks' results: under xdist each worker's base directory sits in the
    session's own, which all workers share."""
    base = tmp_path_factory.getbasetemp()
    directory = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "diagnose-sweep"
    directory.mkdir(exist_ok=True)
    return directory


def chunk_outcomes(chunk: int, tmp_path: Path) -> list[Outcome]:
    rng = np.random.default_rng(SEED)
    size = DRAWS // CHUNKS
    outcomes = []
    for number in range((chunk + 1) * size):
        one = draw(rng)
        if number < chunk * size:
            records(one, rng)  # what write_hub draws for this hub, so that the next draw is the same one
            continue
        series = read_beszel(write_hub(tmp_path / f"hub-{number}.db", one, rng))[0]
        outcomes.append(outcome(number, one, series))
    return outcomes


def summary(o: Outcome) -> dict:
    """What the shares of the whole sweep need of one draw, as JSON."""
    covered = None if o.rise_bounds_mib is None else o.rise_bounds_mib[0] <= o.true_rise_mib <= o.rise_bounds_mib[1]
    return {"number": o.number, "boot_line": o.one.boot_line, "creep_error": o.creep_error, "rise_flagged": o.rise_flagged,
            "plateau_error_mib": o.plateau_error_mib, "time_error_records": o.time_error_records, "time_flagged": o.time_flagged,
            "covered": covered, "describe": o.describe()}


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_creep_and_plateau_over_random_histories(chunk, tmp_path, tmp_path_factory):
    outcomes = chunk_outcomes(chunk, tmp_path)
    directory = sweep_directory(tmp_path_factory)
    staging = directory / f".chunk-{chunk}.json"
    staging.write_text(json.dumps([summary(o) for o in outcomes]))
    staging.rename(directory / f"chunk-{chunk}.json")

    assert len(outcomes) == DRAWS // CHUNKS
    # The target, met in every draw: the plateau the plan check acts on.
    assert all(o.plateau_ok for o in outcomes), [o.describe() for o in outcomes if not o.plateau_ok]
    # Every creep within 10 %, or flagged as not determinable with the true rise inside its stated bounds.
    assert all(o.creep_ok for o in outcomes), [o.describe() for o in outcomes if not o.creep_ok]
    # Every plateau time within one record, or flagged with the truth inside its bounds (within one record of them).
    misses = [o.describe() for o in outcomes if o.time_error_records is not None and not o.time_ok]
    assert not misses, misses
    # Every plateau carries its ± MiB.
    assert all(o.uncertainty_mib > 0 for o in outcomes)
    assert all(o.bounds_physical for o in outcomes), [o.describe() for o in outcomes if not o.bounds_physical]

    # The last chunk to finish (each writes its results before it looks) holds the whole sweep to its shares.
    done = sorted(directory.glob("chunk-*.json"))
    if len(done) < CHUNKS:
        print(f"chunk {chunk}: {len(done)} of {CHUNKS} chunks done; the last one checks the shares of the whole sweep")
        return
    whole = [entry for path in done for entry in json.loads(path.read_text())]
    assert sorted(entry["number"] for entry in whole) == list(range(DRAWS))
    assert_sweep_shares(whole)


def assert_sweep_shares(whole: list[dict]) -> None:
    logged = [o for o in whole if o["boot_line"]]
    blind = [o for o in whole if not o["boot_line"]]
    timed = [o for o in whole if o["time_error_records"] is not None]
    print()
    print("worst plateau:", max(whole, key=lambda o: abs(o["plateau_error_mib"]))["describe"])
    print("worst creep with the boot line:", max(logged, key=lambda o: o["creep_error"])["describe"])
    print("worst creep without it:", max(blind, key=lambda o: o["creep_error"])["describe"])
    print("worst creep not flagged:", max([o for o in whole if not o["rise_flagged"]], key=lambda o: o["creep_error"])["describe"])
    print("worst plateau time:", max(timed, key=lambda o: abs(o["time_error_records"]))["describe"])
    print("worst plateau time not flagged:", max([o for o in timed if not o["time_flagged"]], key=lambda o: abs(o["time_error_records"]))["describe"])
    within = [share(logged, lambda o: o["creep_error"] <= CREEP_SHARE), share(blind, lambda o: o["creep_error"] <= CREEP_SHARE),
              share(timed, lambda o: abs(o["time_error_records"]) <= 1.0)]
    flagged = [share(logged, lambda o: o["rise_flagged"]), share(blind, lambda o: o["rise_flagged"]), share(timed, lambda o: o["time_flagged"])]
    covered = share([o for o in whole if o["covered"] is not None], lambda o: o["covered"])
    print(f"creep within 10 %: {within[0]:.0%} of {len(logged)} with the boot line, {within[1]:.0%} of {len(blind)} without;"
          f" plateau time within one record: {within[2]:.0%} of {len(timed)}")
    print(f"flagged not determinable: creep {flagged[0]:.0%} with the boot line, {flagged[1]:.0%} without; plateau time {flagged[2]:.0%};"
          f" true rise inside the stated bounds: {covered:.0%}")

    assert len(logged) > DRAWS // 3 and len(blind) > DRAWS // 3
    # Flagging is no way out: the shares flagged stay below what this seed measured (with a margin).
    assert flagged[0] <= FLAGGED_LOGGED_CEILING and flagged[1] <= FLAGGED_BLIND_CEILING and flagged[2] <= FLAGGED_TIME_CEILING, flagged


@pytest.mark.slow  # over 10 s on the 2-core machine: the full run, not the fast loop
def test_every_history_on_a_fresh_seed_is_within_the_targets(tmp_path, rng):
    """FRESH_DRAWS histories from a seed drawn this run: each one's plateau, creep and plateau time within the targets
    (or flagged with the truth inside its bounds), so the sweep above is no tuning to one seed."""
    generator = np.random.default_rng(rng.randrange(2**32))
    failures = []
    for number in range(FRESH_DRAWS):
        one = draw(generator)
        result = outcome(number, one, read_beszel(write_hub(tmp_path / f"hub-{number}.db", one, generator))[0])
        if not (result.plateau_ok and result.creep_ok and result.time_ok and result.bounds_physical):
            failures.append(result.describe())
    assert not failures, failures


def test_a_first_life_whose_creep_began_before_the_records_states_a_rise_no_larger_than_its_plateau(tmp_path):
    """The history starts mid-creep (a draw at seed 7): the fits the records cannot tell apart may start the creep long
    before them, at a level far below zero. The first life's rise was stated as 106–37,533,427 MiB; it is now bounded
    by its plateau, and still flagged as not determinable."""
    generator = np.random.default_rng(7)
    one = draw(generator)
    analysis = analyse(read_beszel(write_hub(tmp_path / "hub.db", one, generator))[0], DetectSettings(min_creep_mib=MIN_CREEP_MIB),
                       boot_times_s=[one.boot_s] if one.boot_line else [], boots_here_s=[one.boot_s] if one.boot_line else [])
    first = analysis.segments[0]
    assert first.creep is not None and first.creep.rise_determined is False and first.creep.rise_high_mib is not None
    assert first.creep.rise_high_mib < first.plateau_used_mib + (first.plateau_uncertainty_mib or 0.0) + 0.2
    assert f"{first.creep.rise_high_mib:,.0f} MiB fit the records as well" in (first.creep.basis or "")
    assert bounds_physical(analysis)


@pytest.mark.parametrize("poll_seed", [0, 1])
def test_a_boot_line_between_two_records_frees_the_record_holding_the_minutes_down(tmp_path, poll_seed):
    """A draw a fresh seed found (``SEATPLAN_TEST_SEED=396932693``, draw 15): the boot line falls between two 8-hour
    records, and the first one after it, made from shorter records that began before its own window, holds the
    minutes down. Fitted with no loss there, the level after the boot came out 4 GB low and the creep 2.5× too
    large, its bounds 7–15 GB around a true 2.4 GB; the record is now freed as a blind reboot's is."""
    one = Draw(shape="two-stage", tau_h=22.1, rise_mib=2436.6, age_s=754042.0, down_s=577.0, level_mib=36939.3,
               before_level_mib=36800.9, before_rise_mib=1430.5, jitter_mib=13.0,
               gaps=[(49817.7, 6888.2), (191889.9, 17521.2), (738453.5, 2046.7)], days=9.1, boot_line=True,
               fast_share=0.44, fast_ratio=3.67)
    result = outcome(0, one, read_beszel(write_hub(tmp_path / "hub.db", one, np.random.default_rng(poll_seed)))[0])
    assert result.creep_error <= CREEP_SHARE and not result.rise_flagged, result.describe()
    assert result.plateau_ok and result.time_ok, result.describe()
